# SPDX-License-Identifier: Apache-2.0
"""Running ansible-playbook from tests, past ansible-core 2.19.3's results-thread race.

The results thread of ansible-core 2.19.3 can die with a KeyError in ``_queued_task_cache`` and
leave the run hanging until its timeout (ansible/ansible#86027, #85879). :func:`run` stops such a
run as soon as its traceback shows and runs it again, saying so, up to ATTEMPTS runs in all (on a
loaded machine, with another ansible-playbook running, the race met two runs in a row: CI-like
load on 2026-11-27); any other run is returned as it ended, and one still running at the
deadline fails with its last output.
"""
from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["UPSTREAM_RACE", "PlaybookTimeout", "run"]

UPSTREAM_RACE = "_queued_task_cache"
ATTEMPTS = 3


class PlaybookTimeout(AssertionError):
    """The run was still going at its deadline (and had not met the upstream race)."""


def run(args: Sequence[str], cwd: Path | str, env: Mapping[str, str], timeout: float) -> subprocess.CompletedProcess:
    """``args`` (ansible-playbook and its arguments) in ``cwd`` with ``env``, retried once when
    the upstream race hangs it; raises :class:`PlaybookTimeout` after ``timeout`` seconds."""
    for attempt in range(1, ATTEMPTS + 1):
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(list(args), cwd=cwd, env=dict(env), stdout=out, stderr=err, text=True)
            deadline, raced = time.monotonic() + timeout, False
            while proc.poll() is None:
                err.seek(0)
                if UPSTREAM_RACE in err.read():
                    raced = True
                    proc.kill()
                    proc.wait()
                    break
                if time.monotonic() > deadline:
                    proc.kill()
                    proc.wait()
                    out.seek(0)
                    raise PlaybookTimeout(f"{' '.join(args[:3])} still running after {timeout:.0f}s:\n"
                                          f"{out.read()[-10000:]}")
                time.sleep(0.2)
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        if raced and attempt < ATTEMPTS:
            print(f"{' '.join(args[:3])}: ansible-core results-thread race, retrying")
            continue
        return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    raise AssertionError("unreachable")
