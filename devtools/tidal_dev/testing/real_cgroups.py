# SPDX-License-Identifier: Apache-2.0
"""Real cgroups for tests: created below this process's own cgroups (so limits set on it still
apply), with child processes moved into them, and removed again even when a test fails.
Used by the collector's and the QoS engine's tests on this machine's cgroup filesystem."""

from __future__ import annotations

import errno
import secrets
import subprocess
import sys
import time
from pathlib import Path, PurePosixPath

import pytest

CHILD = r"""
import os, sys
mode, cache_file, procs = sys.argv[1], sys.argv[2], sys.argv[3:]
for path in procs:
    with open(path, "w") as f:
        f.write(str(os.getpid()))
if "memory" in mode:
    anon = bytearray(b"\x01") * (100 << 20)  # 100 MiB, every page written
    chunk = os.urandom(1 << 20)
    with open(cache_file, "wb") as f:  # 100 MiB of page cache charged to this cgroup
        for _ in range(100):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
print("ready", flush=True)
if "spin" in mode:
    while True:
        pass
sys.stdin.read()
"""


def own_cgroup(controller: str | None) -> PurePosixPath:
    """This process's cgroup in the v1 hierarchy of ``controller``, or in v2 when None."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hierarchy_id, controllers, path = line.split(":", 2)
        if controller is None and hierarchy_id == "0" and controllers == "":
            return PurePosixPath(path)
        if controller is not None and controller in controllers.split(","):
            return PurePosixPath(path)
    raise LookupError(f"no {controller or 'cgroup v2'} line in /proc/self/cgroup")


def below_own(root: Path, controller: str | None) -> Path:
    return root / own_cgroup(controller).relative_to("/")


class RealCgroups:
    """Cgroups and child processes created by one test, removed by :meth:`cleanup`."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.name = f"tidal-test-{secrets.token_hex(4)}"
        self.created: list[Path] = []
        #: levels above this test's own cgroups that another test session's cgroups still use
        self.left_in_use: list[Path] = []
        self.children: list[subprocess.Popen] = []

    def make(self, path: Path) -> Path:
        """mkdir -p, remembering each level created (each level is a cgroup)."""
        missing = []
        p = path
        while not p.exists():
            missing.append(p)
            p = p.parent
        for p in reversed(missing):
            try:
                p.mkdir()
            except OSError as error:
                if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                    pytest.skip(f"cgroup hierarchy not writable: cannot create {p}: {error}")
                raise
            self.created.append(p)
        return path

    def shared_in_use(self, path: Path) -> bool:
        """Whether ``path`` is a level above this test's own cgroups (named :attr:`name`) that holds
        another session's cgroups: two test sessions on one machine (the unit suite beside a flake
        hunt) create the same parent levels below their common cgroup; the last one out removes them."""
        return self.name not in path.parts and any(child.is_dir() for child in path.iterdir())

    def spawn(self, mode: str, *cgroups: Path) -> subprocess.Popen:
        child = subprocess.Popen(
            [
                sys.executable, "-c", CHILD, mode, str(self.tmp_path / "cache-file"),
                *(str(c / "cgroup.procs") for c in cgroups),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.children.append(child)
        line = child.stdout.readline()
        assert line == "ready\n", f"child exited with {child.poll()} before it was ready"
        for cgroup in cgroups:
            assert str(child.pid) in (cgroup / "cgroup.procs").read_text().split(), f"{child.pid} not in {cgroup}"
        return child

    def cleanup(self) -> None:
        for child in self.children:
            if child.poll() is None:
                child.kill()
            child.wait(timeout=10)
        for path in reversed(self.created):
            deadline = time.monotonic() + 5
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as error:  # EBUSY while the killed task is being reaped
                    if error.errno == errno.EBUSY and self.shared_in_use(path):
                        self.left_in_use.append(path)
                        break
                    if error.errno != errno.EBUSY or time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        (self.tmp_path / "cache-file").unlink(missing_ok=True)
