# SPDX-License-Identifier: Apache-2.0
"""The strategy interface, the node state it plans from, and the cgroup adapter.

* :class:`Strategy` ``.plan(state) -> list[CgroupWrite]`` is pure: it computes desired file
  values from a :class:`NodeState` and never looks at the filesystem.
* :func:`apply` writes a plan: only values that differ from the kernel's current value, only
  inside the node's ``kubepods`` trees, recording each file's original value once in a
  :class:`RestoreJournal` (a JSON file, saved before every write, so a restarted agent can still
  put things back).
* :func:`restore` writes every recorded original value back and empties the journal.

Reconciling from the kernel's current state makes apply idempotent and restart-safe: a second
run with the same plan writes nothing, and a restarted agent keeps the originals it recorded.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Protocol

from tidal.agent.collector.cgroups import CgroupLayout, CgroupVersion, PodQOSClass
from tidal.api.policy import ColocationPolicy
from tidal.api.qos import QoSLevel

__all__ = [
    "CgroupWrite",
    "ContainerState",
    "PodState",
    "NodeState",
    "Strategy",
    "RestoreJournal",
    "ApplyResult",
    "UnsafeWriteError",
    "cpu_controller_root",
    "cpu_dir",
    "memory_dir",
    "allowed_roots",
    "compose",
    "apply",
    "restore",
]


@dataclass(frozen=True)
class CgroupWrite:
    """Desired value of one cgroup file: ``<path>/<file>`` should read ``value``."""

    path: Path
    file: str
    value: str

    @cached_property
    def target(self) -> Path:
        return self.path / self.file

    @cached_property
    def key(self) -> str:
        """``str(target)``: the journal's and the known-values cache's key."""
        return f"{self.path}/{self.file}"


@dataclass(frozen=True)
class ContainerState:
    """One container: its ID (``<runtime>://<id>``) and its batch resource requests."""

    id: str
    batch_cpu_millicores: int = 0
    batch_memory_bytes: int = 0


@dataclass(frozen=True)
class PodState:
    """A pod running on this node, as the QoS engine needs it."""

    uid: str
    qos_class: PodQOSClass
    tidal_level: QoSLevel | None
    containers: tuple[ContainerState, ...] = ()
    namespace: str = ""
    name: str = ""
    priority: int = 0

    @property
    def is_be(self) -> bool:
        return self.tidal_level is QoSLevel.BE

    @property
    def batch_cpu_millicores(self) -> int:
        return sum(c.batch_cpu_millicores for c in self.containers)

    @property
    def batch_memory_bytes(self) -> int:
        return sum(c.batch_memory_bytes for c in self.containers)


@dataclass(frozen=True)
class NodeState:
    """Everything a strategy plans from (plain data; built by the agent each round)."""

    pods: tuple[PodState, ...]
    node_cpus: float
    online_usage_millicores: float
    policy: ColocationPolicy
    capabilities: Mapping[str, bool]
    layout: CgroupLayout
    #: v1 only: where the ``cpu`` controller is mounted when it differs from the cpuacct root of
    #: ``layout`` (e.g. separate ``/sys/fs/cgroup/cpu`` and ``/sys/fs/cgroup/cpuacct``).
    cpu_controller_root: Path | None = None

    def supports(self, capability: str) -> bool:
        return bool(self.capabilities.get(capability, False))

    def be_pods(self) -> list[PodState]:
        return [p for p in self.pods if p.is_be]


class Strategy(Protocol):
    """One node QoS strategy. ``plan`` must be pure and deterministic."""

    name: str
    #: True when the plan reads usage (recomputed every round); False when it depends only on
    #: pods, policy, capabilities and layout (recomputed when those change).
    uses_usage: bool

    def plan(self, state: NodeState) -> list[CgroupWrite]: ...


def cpu_controller_root(layout: CgroupLayout, override: Path | None = None) -> Path:
    """Root of the hierarchy holding ``cpu.shares``/``cpu.cfs_quota_us`` (v1) or ``cpu.max`` (v2).

    The layout's ``cpu_root`` is where CPU *accounting* is: on v1 that is the cpuacct hierarchy.
    When cpu and cpuacct are co-mounted (``cpu,cpuacct``) it is the same directory; when cpuacct is
    mounted alone, the cpu controller is its sibling ``cpu``. Pure: decided by name only.
    """
    if override is not None:
        return override
    root = layout.hierarchy.cpu_root
    if layout.version is CgroupVersion.V2 or root.name in ("cpu,cpuacct", "cpuacct,cpu"):
        return root
    if root.name == "cpuacct":
        return root.parent / "cpu"
    return root


def cpu_dir(state: NodeState, relpath: PurePosixPath) -> Path:
    return cpu_controller_root(state.layout, state.cpu_controller_root) / relpath


def memory_dir(state: NodeState, relpath: PurePosixPath) -> Path:
    return state.layout.memory_dir(relpath)


def allowed_roots(layout: CgroupLayout, cpu_root_override: Path | None = None) -> tuple[Path, ...]:
    """The only directories :func:`apply` may write below: ``kubepods`` in each hierarchy."""
    kubepods = layout.kubepods_relpath()
    roots = {
        cpu_controller_root(layout, cpu_root_override) / kubepods,
        layout.memory_dir(kubepods),
    }
    return tuple(sorted(roots))


V1_QUOTA_FILE = "cpu.cfs_quota_us"


def compose(plans: Iterable[Iterable[CgroupWrite]], version: CgroupVersion) -> list[CgroupWrite]:
    """Merge the plans of several strategies into one consistent plan.

    * A later write to the same file replaces an earlier one (keeping the earlier position).
    * cgroup v1 refuses a ``cpu.cfs_quota_us`` above an ancestor's quota (EINVAL), and such a
      quota would not be worth more than the ancestor's anyway: every planned v1 quota is clamped
      to the smallest quota planned on its ancestors (e.g. BE containers under a suppressed
      ``kubepods/besteffort``). v2 has no such rule (``cpu.max`` nests freely).
    """
    merged: dict[tuple[Path, str], CgroupWrite] = {}
    for plan in plans:
        for write in plan:
            merged[(write.path, write.file)] = write
    if version is not CgroupVersion.V1:
        return list(merged.values())
    quotas = {
        str(path): int(w.value)
        for (path, file), w in merged.items()
        if file == V1_QUOTA_FILE and int(w.value) > 0
    }
    out = []
    for (path, file), write in merged.items():
        if file == V1_QUOTA_FILE:
            caps = [quotas[a] for a in _ancestors(str(path)) if a in quotas]
            if caps:
                own = int(write.value)
                limit = min(caps)
                if own <= 0 or own > limit:
                    write = CgroupWrite(path, file, str(limit))
        out.append(write)
    return out


def _ancestors(path: str) -> list[str]:
    out = []
    while (parent := path.rsplit("/", 1)[0]) and parent != path:
        out.append(parent)
        path = parent
    return out


class UnsafeWriteError(ValueError):
    """A write outside the kubepods trees, or with a path that tries to escape them."""


def _check_safe(write: CgroupWrite, roots: Sequence[Path]) -> None:
    path = str(write.path)
    if ".." in path.split("/") or "/" in write.file or write.file in ("", ".", ".."):
        raise UnsafeWriteError(f"{write.target}: path components '..' or '/' not allowed")
    for root in map(str, roots):
        if path == root or path.startswith(root + "/"):
            return
    raise UnsafeWriteError(
        f"{write.target}: outside the kubepods trees ({', '.join(map(str, roots))})"
    )


class RestoreJournal:
    """Original values of every file the agent changed, persisted as JSON at ``path``.

    A file's original is recorded once (the first time the agent changes it) and kept until
    :func:`restore`; later changes never overwrite it. The file is written atomically
    (temporary file + rename) before the kernel value is changed.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.originals: dict[str, str] = {}
        if self.path.exists():
            data = json.loads(self.path.read_text(encoding="utf-8"))
            self.originals = {str(k): str(v) for k, v in data.get("originals", {}).items()}

    def record(self, target: Path, original: str) -> None:
        key = str(target)
        if key not in self.originals:
            self.originals[key] = original
            self.save()

    def forget(self, target: Path | str) -> None:
        if self.originals.pop(str(target), None) is not None:
            self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(
            json.dumps({"originals": self.originals}, indent=1, sort_keys=True), encoding="utf-8"
        )
        os.replace(tmp, self.path)


@dataclass
class ApplyResult:
    written: list[CgroupWrite] = field(default_factory=list)
    unchanged: list[CgroupWrite] = field(default_factory=list)
    #: cgroups that do not exist (pod gone or not created yet): skipped, not an error.
    missing: list[CgroupWrite] = field(default_factory=list)
    errors: list[tuple[CgroupWrite, str]] = field(default_factory=list)
    #: set by QoSEngine when it restored instead of applying: (file, problem) left to retry.
    restore_problems: list[tuple[str, str]] = field(default_factory=list)


def _normalize(file: str, text: str) -> str:
    """Current kernel text in the form plans use (``cpu.max`` reads ``max 100000``)."""
    return " ".join(text.split())


def apply(
    writes: Iterable[CgroupWrite], journal: RestoreJournal, roots: Sequence[Path],
    known: dict[str, str] | None = None,
) -> ApplyResult:
    """Make the kernel match ``writes``; write only what differs; journal originals first.

    ``known`` (optional) maps files to the value they were last seen or set to: a write whose
    value is known to be there already counts as unchanged without reading the file. The caller
    empties it now and then to re-read everything (drift made by others). It is updated here.
    """
    result = ApplyResult()
    writes = list(writes)
    for write in writes:
        _check_safe(write, roots)
    if known is not None:
        todo = []
        for write in writes:
            if known.get(write.key) == write.value:
                result.unchanged.append(write)
            else:
                todo.append(write)
        writes = todo
    # v1 hierarchical CFS quotas: raising a child before its parent, or lowering a parent before
    # its child, is refused with EINVAL; retry those once the rest is written, until no progress.
    pending = writes
    while pending:
        refused = _apply_pass(pending, journal, result)
        if len(refused) == len(pending):
            result.errors += [(w, f"{w.target}: {os.strerror(errno.EINVAL)}") for w in refused]
            break
        pending = refused
    if known is not None:
        for write in (*result.written, *result.unchanged):
            known[write.key] = write.value
        for write in (*result.missing, *(w for w, _ in result.errors)):
            known.pop(write.key, None)
    return result


def _apply_pass(
    writes: list[CgroupWrite], journal: RestoreJournal, result: ApplyResult
) -> list[CgroupWrite]:
    refused = []
    for write in writes:
        target = write.target
        try:
            current = _normalize(write.file, target.read_text(encoding="ascii"))
        except FileNotFoundError:
            result.missing.append(write)
            continue
        if current == write.value:
            result.unchanged.append(write)
            continue
        journal.record(target, current)
        try:
            target.write_text(write.value, encoding="ascii")
        except OSError as error:
            if error.errno == errno.ENOENT:
                result.missing.append(write)
            elif error.errno == errno.EINVAL and write.file == V1_QUOTA_FILE:
                refused.append(write)
            else:
                result.errors.append((write, f"{target}: {error.strerror or error}"))
            continue
        result.written.append(write)
    return refused


def restore(journal: RestoreJournal, only: Iterable[str] | None = None) -> list[tuple[str, str]]:
    """Write recorded originals back (every one, or those in ``only``); returns (file, problem)
    for those that failed.

    A cgroup that no longer exists (pod deleted) needs nothing restored and is dropped. Files
    restored successfully (or gone) are removed from the journal; failures stay for a retry.
    """
    keys = journal.originals if only is None else [k for k in only if k in journal.originals]
    if not keys:
        return []
    # Children before parents; v1 quota writes refused (EINVAL) are retried while others progress.
    pending = sorted(keys, key=lambda k: (-len(Path(k).parts), k))
    while True:
        problems: list[tuple[str, str]] = []
        for key in pending:
            original = journal.originals[key]
            target = Path(key)
            try:
                if _normalize(target.name, target.read_text(encoding="ascii")) != original:
                    target.write_text(original, encoding="ascii")
            except FileNotFoundError:
                pass
            except OSError as error:
                problems.append((key, error.strerror or str(error)))
                continue
            journal.originals.pop(key)
        if not problems or len(problems) == len(pending):
            break
        pending = [key for key, _ in problems]
    journal.save()
    return problems
