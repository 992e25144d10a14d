# SPDX-License-Identifier: Apache-2.0
"""cgroupfs writes: the restore journal, the safety check and the reconciling writer.

* :func:`apply` writes cgroup files: only values that differ from the kernel's current value,
  only inside the allowed (``kubepods``) trees (:func:`_check_safe`, for every write), recording
  each file's original value once in the :class:`RestoreJournal` (a JSON file, saved before
  every write, so a restarted agent can still put things back).
* :func:`trigger` writes write-only request files (``memory.reclaim``): nothing to read back or
  restore, so nothing journalled; the same safety check.
* :func:`restore` writes every recorded original value back and empties the journal.

Reconciling from the kernel's current state makes apply idempotent and restart-safe: a second
run with the same plan writes nothing, and a restarted agent keeps the originals it recorded.
Nothing here decides *what* to write: that is the features' plans (:mod:`tidal.agent.qos`).
"""
from __future__ import annotations

import errno
import json
import logging
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

from tidal.agent.collector.readers import read_small
from tidal.agent.durable import write_durably

__all__ = [
    "DEVICE_FILES", "DEVICE_SEPARATOR", "ApplyResult", "CgroupTrigger", "CgroupWrite", "RestoreJournal",
    "UnsafeWriteError", "V1_QUOTA_FILE", "apply", "device_lines", "restore", "trigger",
]

V1_QUOTA_FILE = "cpu.cfs_quota_us"
V1_MEMORY_LIMIT = "memory.limit_in_bytes"
V1_MEMSW_LIMIT = "memory.memsw.limit_in_bytes"
#: Per-device files (block I/O throttling) and what each reads for a device without a limit:
#: they list one line per limited device and take one device per write(2); a value that is not
#: the unlimited one sets a device's limit, the unlimited one removes its line.
DEVICE_FILES = {
    "blkio.throttle.read_bps_device": "0",
    "blkio.throttle.write_bps_device": "0",
    "blkio.throttle.read_iops_device": "0",
    "blkio.throttle.write_iops_device": "0",
    "io.max": "rbps=max wbps=max riops=max wiops=max",
}
DEVICE_SEPARATOR = "; "

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CgroupWrite:
    """Desired value of one cgroup file: ``<path>/<file>`` should read ``value``.

    ``pristine``: the value the kubelet and runtime give the file, when Tidal's NRI plugin may
    have set ``value`` already as the container was created. Found at ``value`` and not
    journalled, the file gets ``pristine`` journalled as its original, so that switching the
    strategy off (or the node's mode, or an uninstall) puts the runtime's value back.
    """

    path: Path
    file: str
    value: str
    pristine: str | None = None

    @cached_property
    def target(self) -> Path:
        return self.path / self.file

    @cached_property
    def key(self) -> str:
        """``str(target)``: the journal's and the known-values cache's key."""
        return f"{self.path}/{self.file}"


@dataclass(frozen=True)
class CgroupTrigger:
    """A request written to a write-only cgroup file (``memory.reclaim``): not read, not
    journalled, not restored. A missing file (old kernel, cgroup gone) is skipped; the errnos
    in ``ignore`` (EAGAIN: the kernel could not reclaim that much) are normal."""

    path: Path
    file: str
    value: str
    ignore: tuple[int, ...] = (errno.EAGAIN,)

    @property
    def key(self) -> str:
        return f"{self.path}/{self.file}"


class UnsafeWriteError(ValueError):
    """A write outside the kubepods trees, or with a path that tries to escape them."""


def _check_safe(write: CgroupWrite | CgroupTrigger, roots: Sequence[Path]) -> None:
    problem = _unsafe(str(write.path), write.file, tuple(map(str, roots)))
    if problem:
        raise UnsafeWriteError(f"{write.path / write.file}: {problem}")


@lru_cache(maxsize=16384)
def _unsafe(path: str, file: str, roots: tuple[str, ...]) -> str | None:
    """Why a write to ``file`` in ``path`` is refused (None: it is not). Cached: the agent checks
    the same few hundred files every round."""
    if ".." in path.split("/") or "/" in file or file in ("", ".", ".."):
        return "path components '..' or '/' not allowed"
    if any(path == root or path.startswith(root + "/") for root in roots):
        return None
    return f"outside the kubepods trees ({', '.join(roots)})"


class RestoreJournal:
    """Original values of every file the agent changed, persisted as JSON at ``path``:
    ``{"originals": {"<absolute file path>": "<original value>"}, "cgroupRoot": "<root>"}``.

    ``cgroup_root`` is where the writer sees the cgroup filesystem (``--cgroup-root``: in the
    agent's pod ``/host/sys/fs/cgroup``, on the host ``/sys/fs/cgroup``). It is saved with the
    originals, and a journal recorded under another root is read with its paths moved to this
    one: ``tidal-agent restore`` run on the host puts back what the agent's pod journalled. A
    journal that records no root (agents before 0.1.0's upgrade of it) is read as it is.

    A file's original is recorded once (the first time the agent changes it) and kept until
    :func:`restore`; later changes never overwrite it. The file is written atomically
    (temporary file + rename) before the kernel value is changed.

    Upgrade path: agents before the executor kept three journals (``qos-journal.json`` for the
    BE strategies, ``memory-reclaim-journal.json`` and ``numa-journal.json`` beside it for memory
    reclaim and NUMA affinity). ``legacy`` names such older files: when they exist and hold
    originals, those are merged into this journal on load (an original already recorded here
    wins: it is older), the merged journal is saved, and only then each legacy file is
    rewritten empty (``{"originals": {}}``) — so a crash in between merges the same values
    again, and an agent started later (or ``tidal-agent restore``) restores everything an older
    agent changed. The legacy files are read at every start; once emptied they cost one read.
    """

    def __init__(self, path: Path | str, legacy: Iterable[Path | str] = (),
                 cgroup_root: Path | str | None = None) -> None:
        self.path = Path(path)
        self.originals, recorded = _load(self.path)
        self.cgroup_root = recorded if cgroup_root is None else str(cgroup_root)
        if recorded is not None and self.cgroup_root != recorded:
            self.originals = {_moved(key, recorded, self.cgroup_root): value for key, value in self.originals.items()}
            log.info("restore journal %s: recorded under the cgroup root %s, read under %s", self.path, recorded,
                     self.cgroup_root)
        merged = []
        for old in map(Path, legacy):
            originals, _ = _load(old)
            if originals:
                for key, value in originals.items():
                    self.originals.setdefault(key, value)
                merged.append(old)
        if merged:
            self.save()
            for old in merged:
                _write_atomic(old, {"originals": {}})

    def record(self, target: Path, original: str) -> None:
        """Record ``target``'s original value (once) and persist it; raises OSError — and
        records nothing — when the journal cannot be written (its disk full): the caller must
        then leave the file alone, as nothing could put it back."""
        key = str(target)
        if key not in self.originals:
            self.originals[key] = original
            try:
                self.save()
            except OSError:
                del self.originals[key]
                raise

    def forget(self, target: Path | str) -> None:
        if self.originals.pop(str(target), None) is not None:
            self.save()

    def save(self) -> None:
        data: dict = {"originals": self.originals}
        if self.cgroup_root is not None:
            data["cgroupRoot"] = self.cgroup_root
        _write_atomic(self.path, data)

    def outside(self, key: str) -> str | None:
        """Why a journalled file that is not there cannot be taken for a cgroup that is gone
        (None: it can): it is not under this journal's cgroup root, or that root (on v1, the
        file's hierarchy) does not exist here — the wrong ``--cgroup-root``, not a pod that
        ended. Without a root, any missing file is taken for gone (as before roots were kept)."""
        if self.cgroup_root is None:
            return None
        root = Path(self.cgroup_root)
        rest = _under(key, self.cgroup_root)
        if rest is None:
            return f"not under the cgroup root {root}"
        top = root if (root / "cgroup.controllers").exists() else root / rest.split("/", 1)[0]
        if not top.is_dir():
            return f"no cgroup hierarchy {top} here (is --cgroup-root right?)"
        return None


def _under(key: str, root: str) -> str | None:
    """``key``'s path below ``root`` (None: not below it)."""
    prefix = root.rstrip("/") + "/"
    return key[len(prefix):] if key.startswith(prefix) else None


def _moved(key: str, old_root: str, new_root: str) -> str:
    rest = _under(key, old_root)
    return key if rest is None else f"{new_root.rstrip('/')}/{rest}"


def _load(path: Path) -> tuple[dict[str, str], str | None]:
    """The originals journalled at ``path`` and the cgroup root they were recorded under (None:
    not recorded); ({}, None) when there is no file. A file that is not a
    journal (empty or cut short by a crash on a filesystem that lost the data, or garbage) is
    moved aside to ``<name>.corrupt-<unix time>`` with an error in the log, and the agent starts
    with an empty journal: the values it named cannot be put back, and failing at every start
    would restore nothing either (nor let ``tidal-agent restore`` finish an uninstall)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}, None
    try:
        data = json.loads(raw.decode("utf-8"))
        originals = data["originals"] if isinstance(data, dict) else None
        if not isinstance(originals, dict):
            raise ValueError('not an object with an "originals" object')
        root = data.get("cgroupRoot")
        if root is not None and not (isinstance(root, str) and root.startswith("/")):
            raise ValueError(f'"cgroupRoot" is not an absolute path: {root!r}')
    except (ValueError, KeyError) as err:
        aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
        try:
            os.replace(path, aside)
            kept = f"moved to {aside}"
        except OSError as move_err:
            kept = f"left in place ({move_err.strerror or move_err})"
        log.error("restore journal %s is not a journal (%d bytes: %s); %s. The original values of the cgroup "
                  "files it named are lost: files Tidal changed keep Tidal's values until their pods end. "
                  "Starting with an empty journal.", path, len(raw), err, kept)
        return {}, None
    return {str(k): str(v) for k, v in originals.items()}, root


def _write_atomic(path: Path, data: dict) -> None:
    write_durably(path, json.dumps(data, indent=1, sort_keys=True).encode("utf-8"))


def _write_value(target: Path, value: str) -> None:
    """Write ``value`` to a cgroup file. An empty value is written as a newline: an open with
    O_TRUNC and no write(2) changes nothing in cgroupfs (``cpuset.cpus`` on v2 is empty by
    default, and restoring it must make it empty again).

    A v1 memory limit the kernel refuses (EINVAL) for being above the cgroup's memory+swap limit
    takes that limit up with it first (:func:`_raise_memsw`). A per-device file is written a
    device at a time (:func:`_write_devices`)."""
    if target.name in DEVICE_FILES:
        _write_devices(target, value)
        return
    try:
        target.write_text(value or "\n", encoding="ascii")
    except OSError as error:
        if error.errno != errno.EINVAL or target.name != V1_MEMORY_LIMIT or not _raise_memsw(target, value):
            raise
        target.write_text(value, encoding="ascii")


def device_lines(text: str) -> dict[str, str]:
    """A per-device file's text (the kernel's lines, or a plan's value: the lines joined by
    :data:`DEVICE_SEPARATOR`) as {``major:minor``: the rest of its line}."""
    lines = {}
    for line in text.replace(DEVICE_SEPARATOR.strip(), "\n").splitlines():
        device, _, rest = line.strip().partition(" ")
        if device:
            lines[device] = " ".join(rest.split())
    return lines


def _write_devices(target: Path, value: str) -> None:
    """Make a per-device file list exactly ``value``'s devices: each device that differs is
    written on its own (the kernel parses one per write), a device listed but not wanted gets
    the unlimited value, which removes it."""
    wanted = device_lines(value)
    current = device_lines(target.read_text(encoding="ascii"))
    for device in sorted(current.keys() - wanted.keys()):
        target.write_text(f"{device} {DEVICE_FILES[target.name]}", encoding="ascii")
    for device, rest in sorted(wanted.items()):
        if current.get(device) != rest:
            target.write_text(f"{device} {rest}", encoding="ascii")


def _raise_memsw(limit: Path, value: str) -> bool:
    """cgroup v1 keeps a memory limit at or below the memory+swap limit. The runtime sets both to
    the same value when it is given a memory limit (NRI's adjustment at creation included: Tidal's
    plugin sets BE containers' batch memory so), so putting back the runtime's unlimited value, or
    raising a limit, must raise memory+swap first, to the same value: the runtime's own pairing
    (no swap beyond the limit; both unlimited for a BestEffort container). Whether it was raised."""
    memsw = limit.with_name(V1_MEMSW_LIMIT)
    try:
        current, wanted = int(memsw.read_text(encoding="ascii")), int(value)
    except (OSError, ValueError):  # no swap accounting, or not a number: not this refusal
        return False
    if wanted != -1 and wanted <= current:
        return False
    memsw.write_text(value, encoding="ascii")
    log.info("%s raised to %s first: the kernel keeps %s at or below it", memsw, value, limit.name)
    return True


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
    """Current kernel text in the form plans use (``cpu.max`` reads ``max 100000``; a
    per-device file's lines are sorted and joined by :data:`DEVICE_SEPARATOR`)."""
    if file in DEVICE_FILES:
        return DEVICE_SEPARATOR.join(f"{d} {rest}" for d, rest in sorted(device_lines(text).items()))
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
            current = _normalize(write.file, read_small(target).decode("ascii"))
        except FileNotFoundError:
            result.missing.append(write)
            continue
        if current == write.value:
            if write.pristine is not None and current != write.pristine and str(target) not in journal.originals:
                _journal_pristine(write, journal)
            result.unchanged.append(write)
            continue
        try:
            journal.record(target, current)
        except OSError as error:  # never change what could not be put back: an error, not a crash
            result.errors.append((write, f"{target}: not changed: its original could not be journalled in "
                                         f"{journal.path}: {error.strerror or error}"))
            continue
        try:
            _write_value(target, write.value)
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


def _journal_pristine(write: CgroupWrite, journal: RestoreJournal) -> None:
    """A file found at the planned value that nothing journalled (Tidal's NRI plugin set it as
    the container was created): its runtime value is its original. Nothing is written, so a
    journal that cannot be saved is only logged; the file is seen again within a few rounds."""
    try:
        journal.record(write.target, write.pristine)
    except OSError as error:
        log.warning("%s: at Tidal's value %s since its creation; its original %s could not be journalled in %s "
                    "(%s): a restore now would leave Tidal's value", write.target, write.value, write.pristine,
                    journal.path, error.strerror or error)


def trigger(requests: Iterable[CgroupTrigger], roots: Sequence[Path]) -> tuple[list[CgroupTrigger], list[tuple[str, str]]]:
    """Write each request (after the safety check); returns (done, [(file, problem)])."""
    requests = list(requests)
    for request in requests:
        _check_safe(request, roots)
    done, problems = [], []
    for request in requests:
        try:
            (request.path / request.file).write_text(request.value)
        except FileNotFoundError:
            continue
        except OSError as err:
            if err.errno not in request.ignore:
                problems.append((request.key, err.strerror or str(err)))
            continue
        done.append(request)
    return done, problems


def restore(journal: RestoreJournal, only: Iterable[str] | None = None) -> list[tuple[str, str]]:
    """Write recorded originals back (every one, or those in ``only``); returns (file, problem)
    for those that failed.

    A cgroup that no longer exists (pod deleted) needs nothing restored and is dropped. Files
    restored successfully (or gone) are removed from the journal; failures stay for a retry, and
    so does a missing file the journal cannot take for gone (:meth:`RestoreJournal.outside`).
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
                    _write_value(target, original)
            except FileNotFoundError:
                wrong_place = journal.outside(key)
                if wrong_place is not None:  # kept: a cgroup that is there, seen from elsewhere
                    problems.append((key, f"not restored: {wrong_place}"))
                    continue
            except OSError as error:
                problems.append((key, error.strerror or str(error)))
                continue
            journal.originals.pop(key)
        if not problems or len(problems) == len(pending):
            break
        pending = [key for key, _ in problems]
    try:
        journal.save()
    except OSError as error:  # the files are back; the journal on disk still names them (harmless)
        problems.append((str(journal.path), f"journal not saved: {error.strerror or error}"))
    return problems
