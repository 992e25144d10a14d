# SPDX-License-Identifier: Apache-2.0
"""Tidal's own controllers (tidal-manager, tidal-agent replay, ...) as supervised lab processes.

On the lab there is no kubelet to run the controllers' pods, so the `tidal_controllers` Ansible
role starts them here instead, described by a spec file (YAML: a list of ``{name, argv}``).
`up` is idempotent: a process that is alive (PID *and* start time match, see `processes`) with
the same command line is reused; a changed command line restarts it; processes the spec no longer
names are stopped. State lives in ``<lab dir>/controllers.json``, logs in
``<lab dir>/logs/<name>.log``; `tidal lab down` stops them before the control plane.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from tidal_dev.lab import processes

STATE_FILE = "controllers.json"
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


class ControllerSpecError(ValueError):
    """The spec file is malformed; the message names the entry and the rule."""


@dataclass
class ControllersResult:
    started: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)


def parse_spec(data) -> dict[str, list[str]]:
    """``[{name, argv}, ...]`` -> ``{name: argv}``; raises ControllerSpecError."""
    if not isinstance(data, list):
        raise ControllerSpecError("spec: must be a list of {name, argv}")
    spec: dict[str, list[str]] = {}
    for index, entry in enumerate(data):
        where = f"spec[{index}]"
        if not isinstance(entry, dict) or set(entry) != {"name", "argv"}:
            raise ControllerSpecError(f"{where}: must have exactly the keys name and argv")
        name, argv = entry["name"], entry["argv"]
        if not isinstance(name, str) or not _NAME.match(name):
            raise ControllerSpecError(f"{where}.name: must be a lower-case DNS label, got {name!r}")
        if name in spec:
            raise ControllerSpecError(f"{where}.name: {name!r} appears twice")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and a for a in argv):
            raise ControllerSpecError(f"{where}.argv: must be a non-empty list of non-empty strings")
        spec[name] = list(argv)
    return spec


@contextlib.contextmanager
def _locked(lab_dir: Path) -> Iterator[None]:
    lab_dir.mkdir(parents=True, exist_ok=True)
    with open(lab_dir / ".controllers.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _load(lab_dir: Path) -> dict[str, processes.ProcessRecord]:
    try:
        raw = json.loads((lab_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {name: processes.ProcessRecord.from_json(rec) for name, rec in raw.items()}


def _save(lab_dir: Path, records: dict[str, processes.ProcessRecord]) -> None:
    tmp = lab_dir / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps({n: r.to_json() for n, r in sorted(records.items())}, indent=2) + "\n")
    tmp.replace(lab_dir / STATE_FILE)


def up(lab_dir: Path, spec: dict[str, list[str]]) -> ControllersResult:
    """Make exactly the processes of `spec` run (see the module docstring)."""
    result = ControllersResult()
    with _locked(lab_dir):
        records = _load(lab_dir)
        for name in sorted(set(records) - set(spec)):
            if processes.stop(records.pop(name)):
                result.stopped.append(name)
        for name, argv in spec.items():
            record = records.get(name)
            if record and processes.alive(record) and list(record.argv) == argv:
                result.reused.append(name)
                continue
            if record and processes.stop(record):
                result.restarted.append(name)
            else:
                result.started.append(name)
            records[name] = processes.start(name, argv, lab_dir / "logs" / f"{name}.log")
        _save(lab_dir, records)
    return result


def down(lab_dir: Path) -> list[str]:
    """Stop every supervised controller; returns the names that were running."""
    with _locked(lab_dir):
        records = _load(lab_dir)
        stopped = [name for name, record in sorted(records.items()) if processes.stop(record)]
        if records:
            _save(lab_dir, {})
    return stopped


def status(lab_dir: Path) -> list[dict]:
    """``[{name, running, pid, argv, log}]`` for every recorded controller."""
    return [{"name": name, "running": processes.alive(record), "pid": record.pid,
             "argv": list(record.argv), "log": record.log}
            for name, record in sorted(_load(lab_dir).items())]
