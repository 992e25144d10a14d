# SPDX-License-Identifier: Apache-2.0
"""Start, find and stop the lab's processes by recorded PID.

A PID alone can be reused by an unrelated process after the original exits, so a
record also carries the process start time from /proc; a process only counts as
ours when both match. Each component runs in its own session so it survives the
`tidal lab up` that started it, and `stop` signals the whole process group.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcessRecord:
    name: str
    pid: int
    start_ticks: int
    argv: tuple[str, ...]
    log: str

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "ProcessRecord":
        return cls(data["name"], int(data["pid"]), int(data["start_ticks"]),
                   tuple(data["argv"]), data["log"])


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks) of `pid`, or None when it does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or ')'.
    fields = raw[raw.rindex(")") + 2:].split()
    return fields[0], int(fields[19])


def start(name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None,
          cwd: Path | None = None) -> ProcessRecord:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting {' '.join(argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=env, cwd=cwd, start_new_session=True)
    stat = _stat(proc.pid)
    return ProcessRecord(name, proc.pid, stat[1] if stat else 0, tuple(argv), str(log_path))


def _reap(pid: int) -> None:
    """Collect the exit status when the process is our own child, so it leaves no zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def alive(record: ProcessRecord) -> bool:
    _reap(record.pid)
    stat = _stat(record.pid)
    return stat is not None and stat[0] not in ("Z", "X") and stat[1] == record.start_ticks


def stop(record: ProcessRecord, timeout: float = 15.0) -> bool:
    """SIGTERM the process group, SIGKILL after `timeout`. True when it was running."""
    if not alive(record):
        return False
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(record.pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not alive(record):
                return True
            time.sleep(0.1)
    return True
