# SPDX-License-Identifier: Apache-2.0
"""pytest fixtures for tests that need the lab.

`lab` (session scope) reuses a healthy lab that is already running in
``$TIDAL_LAB_DIR`` (or the default directory) and leaves it running; otherwise it
brings up a lab of its own in ``~/.cache/tidal/lab/test-run`` from empty state and
wipes it afterwards (``TIDAL_LAB_KEEP=1`` keeps it running).
"""
from __future__ import annotations

import asyncio
import fcntl
import os
import time

import pytest

from tidal_dev.lab import versions
from tidal_dev.lab.lab import Lab


@pytest.fixture(scope="session")
def lab():
    running = Lab(os.environ.get("TIDAL_LAB_DIR"))
    if running.status().healthy:
        yield running  # the developer's lab: used as it is, left running
        return
    # Otherwise a lab of the test session's own, from empty state, so what earlier runs left
    # in etcd (labels, webhooks, objects of a failed test) cannot change the outcome.
    instance = Lab(versions.cache_root() / "test-run")
    # Held for the whole session: a second test session must not wipe this one's lab under it.
    instance.dir.mkdir(parents=True, exist_ok=True)
    session_lock = open(instance.dir.parent / "test-run.session.lock", "w")
    try:
        fcntl.flock(session_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pytest.fail(f"another test session is using the lab in {instance.dir}: wait for it, or run this "
                    "one against a lab of your own (`tidal lab up`, then TIDAL_LAB_DIR)", pytrace=False)
    instance.down(wipe=True)
    instance.up(nodes=int(os.environ.get("TIDAL_LAB_NODES", "3")))
    yield instance
    if os.environ.get("TIDAL_LAB_KEEP") != "1":
        had_real_node = int(instance._load_state().get("real_nodes", 0)) > 0
        instance.down(wipe=True)
        if had_real_node:  # `down` must leave nothing of the real node on the machine
            from tidal_dev.lab import realnode
            left = realnode.leftovers(realnode.node_for(instance.dir))
            assert not left, f"tidal lab down left behind: {left}"
    session_lock.close()


@pytest.fixture(scope="session")
def lab_api(lab):
    with lab.api_client() as api:
        yield api


async def wait_for_async(predicate, timeout: float, what: str, interval: float = 0.01):
    """`wait_for` inside an event loop: polls `predicate` with ``asyncio.sleep`` (the loop's
    other tasks run meanwhile) and returns its first truthy value; on timeout fails the test
    naming `what` and the last value seen."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        await asyncio.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def wait_for(predicate, timeout: float, what: str, interval: float = 0.5, describe=None):
    """Poll `predicate` until it returns something truthy and return that; on timeout
    fail the test naming `what` and the last value seen, plus ``describe()`` when given (the
    state that explains the wait: pods' conditions, a log's tail, ...)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    detail = ""
    if describe is not None:
        try:
            detail = f"\n{describe()}"
        except Exception as err:  # the diagnosis must not hide the timeout
            detail = f"\n(describing the state failed: {err!r})"
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r}){detail}")
