"""pytest fixtures for tests that need the lab.

`lab` (session scope) reuses a healthy lab that is already running in
``$TIDAL_LAB_DIR`` (or the default directory) and leaves it running; otherwise it
brings one up for the session and stops it afterwards (state is kept, so the next
session starts faster).
"""
from __future__ import annotations

import os
import time

import pytest

from tidal.lab.lab import Lab


@pytest.fixture(scope="session")
def lab():
    instance = Lab(os.environ.get("TIDAL_LAB_DIR"))
    reuse = instance.status().healthy
    if not reuse:
        instance.up(nodes=int(os.environ.get("TIDAL_LAB_NODES", "3")))
    yield instance
    if not reuse and os.environ.get("TIDAL_LAB_KEEP") != "1":
        instance.down()


@pytest.fixture(scope="session")
def lab_api(lab):
    with lab.api_client() as api:
        yield api


def wait_for(predicate, timeout: float, what: str, interval: float = 0.5):
    """Poll `predicate` until it returns something truthy and return that; on timeout
    fail the test naming `what` and the last value seen."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
