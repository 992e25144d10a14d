# SPDX-License-Identifier: Apache-2.0
"""The online history on the host: a restarted agent (upgrade, crash, reboot) goes on from it
instead of warming its predictor up again.

`OnlineHistory` lives in memory. `HistoryStore` keeps a copy in the agent's state directory,
``/var/lib/tidal-agent/online-history.bin`` beside the QoS journal (a hostPath: it outlives the
pod and a reboot). It is written after every closed step (at most once per step, every 5 minutes)
and read once when the agent starts. `encode` / `decode` are pure; `HistoryStore` does the I/O.

Format (version 1) — binary, not JSON: 14 days of 110 pods are 445,000 pod-steps of usage and of
request; as JSON text that is ~16 MB and about a second of CPU to write every 5 minutes (and to
parse), on an agent whose budget is a few percent of a core. Here usage is little-endian float64
(8 bytes a pod-step, bit-exact, written with a memory copy) and each pod's request, which changes
only when the pod is resized or away, is run-length coded: ≈ 3.6 MB at most, ~1 MB for 30 pods. ::

    prefix   52 bytes: magic b"TIDALOH\\0", version u16, 0 u16, body length u64, sha256(body)
    body     header length u32, header (JSON), payload
    header   {"node", "stepSeconds", "keepSteps", "savedAt", "newestClosed",
              "pods": [[uid, first step, steps, request runs], ...]}
    payload  per pod in header order: usage float64[steps], run lengths u32[runs],
             run values float64[runs]

The checksum covers the whole body, header included. The header is readable with
``tail -c +57 online-history.bin | head -c 1000``.

Size. The history is bounded by keep_steps × pods; the file is capped besides (`MAX_BYTES`
16 MiB, `MAX_PODS` 10,000 pods, both well above 110 pods × 14 days): above either, the *oldest
steps* are left out — of every pod at once — until it fits. A shorter history only makes the
predictor more careful (fewer calibration points, pods count at their request while young);
leaving out whole pods instead would lower the past totals, and so the margin.

Discarded on load — the reason is logged (WARNING) and reported (`Loaded.reason`, the NodeProfile's
``predictions.history``) — when the file is unreadable, too large, truncated or corrupt (bad
magic, malformed header or payload, negative or non-finite values), its checksum does not
match, its version, node or step differ from this agent's, or it is stale: its newest step a
whole keep window (14 days) or more before now — every step of it would be trimmed at the next
close anyway — or not before now (the clock went back: its steps would be misaligned). Anything
younger is kept, whatever the gap. Up to an hour of steps in between repeat each pod's last saved
reading (:data:`tidal.agent.history.MAX_GAP_SECONDS`, as the traces treat missing readings); a
longer gap is absent (no usage, no request), as for a pod that was away, which the predictor reads
conservatively (the pods are young again, counted at their request). Either way its calibration
on the past days stays valid, so the warm-up is not paid again. A missing file is not an error
("no saved history"). A discarded file is left in place until the next save replaces it.

Writes are atomic — temporary file beside it, fsync, rename, fsync of the directory — so a crash
leaves the old file or the new one. A failed write (disk full, EACCES, read-only) is logged once
per distinct error, counted (`HistoryStore.failures`) and never raised: the history goes on in
memory and the next closed step tries again.
"""
from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import logging
import math
import os
import struct
import sys
from array import array
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path

from tidal.agent.durable import tmp_path_of, write_durably
from tidal.agent.history import OnlineHistory

log = logging.getLogger(__name__)

FILE_NAME = "online-history.bin"
VERSION = 1
MAGIC = b"TIDALOH\0"
MAX_BYTES = 16 << 20
MAX_PODS = 10_000
NO_FILE = "no saved history"

_PREFIX = struct.Struct("<8sHHQ32s")
_U32 = struct.Struct("<I")
_ENTRY_SLACK = 3 * 20 + 6  # three integers of up to 20 digits, brackets and commas


class Discarded(ValueError):
    """A saved history that cannot be used; ``str()`` is the reason."""


@dataclass(frozen=True)
class Encoded:
    data: bytes
    dropped_steps: int  # oldest steps left out to fit MAX_BYTES / MAX_PODS
    dropped_pods: int  # pods that had no step left after that


@dataclass(frozen=True)
class Decoded:
    history: OnlineHistory
    saved_at: float


# -- pure encoding -------------------------------------------------------------------------------
def _le(values: array) -> bytes:
    if sys.byteorder == "big":
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def _from_le(data) -> array:
    values = array("d")
    values.frombytes(data)
    if sys.byteorder == "big":
        values.byteswap()
    return values


def _runs(values) -> tuple[list[int], array]:
    lengths, runs = [], array("d")
    for value, group in groupby(values):
        lengths.append(sum(1 for _ in group))
        runs.append(value)
    return lengths, runs


def _header(node: str, history: OnlineHistory, saved_at: float, entries: list) -> bytes:
    return json.dumps({"node": node, "stepSeconds": history.step_seconds, "keepSteps": history.keep_steps,
                       "savedAt": saved_at, "newestClosed": history.newest_closed, "pods": entries},
                      separators=(",", ":"), sort_keys=True).encode()


def _cut(history: OnlineHistory, node: str, saved_at: float, pods: list, runs: dict,
         max_bytes: int, max_pods: int) -> int:
    """The oldest step to keep so that the file stays within both caps (an upper bound of its
    size: a suffix of a pod has at most as many request runs as the whole pod)."""
    newest = history.newest_closed
    fixed = _PREFIX.size + _U32.size + len(_header(node, history, saved_at, []))
    if fixed > max_bytes:
        raise ValueError(f"a cap of {max_bytes} bytes leaves no room for the header ({fixed} bytes)")
    spans = [(first, first + len(usage) - 1, len(json.dumps(uid)) + _ENTRY_SLACK, len(runs[uid][0]))
             for uid, first, usage, _ in pods]

    def fits(cut: int) -> bool:
        size, count = fixed, 0
        for first, last, entry, full_runs in spans:
            cells = last - max(first, cut) + 1
            if cells > 0:
                size += entry + 8 * cells + 12 * min(cells, full_runs)
                count += 1
        return size <= max_bytes and count <= max_pods

    lo = min((first for first, *_ in spans), default=newest + 1)
    if fits(lo):
        return lo
    hi = newest + 1  # keeps nothing: always fits
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi


def encode(history: OnlineHistory, node: str, saved_at: float, *,
           max_bytes: int = MAX_BYTES, max_pods: int = MAX_PODS) -> Encoded:
    """The closed steps of `history` as the file's bytes (the open step is not saved)."""
    if history.newest_closed is None:
        raise ValueError("no closed step to save")
    pods = history.closed_pods()
    runs = {uid: _runs(request) for uid, _, _, request in pods}
    cut = _cut(history, node, saved_at, pods, runs, max_bytes, max_pods)
    oldest = min((first for _, first, _, _ in pods), default=cut)
    entries, chunks = [], []
    for uid, first, usage, request in pods:
        start = max(first, cut)
        if first + len(usage) - 1 < start:
            continue
        if start > first:
            usage, request = usage[start - first:], request[start - first:]
            lengths, values = _runs(request)
        else:
            lengths, values = runs[uid]
        entries.append([uid, start, len(usage), len(lengths)])
        chunks += [_le(usage), struct.pack(f"<{len(lengths)}I", *lengths), _le(values)]
    header = _header(node, history, saved_at, entries)
    body = b"".join([_U32.pack(len(header)), header, *chunks])
    data = _PREFIX.pack(MAGIC, VERSION, 0, len(body), hashlib.sha256(body).digest()) + body
    if len(data) > max_bytes:  # cannot happen: _cut bounds the size from above
        raise ValueError(f"encoded history of {len(data)} bytes exceeds the cap of {max_bytes}")
    return Encoded(data, max(0, cut - oldest), len(pods) - len(entries))


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min"


def rfc3339(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _integer(value, what: str, minimum: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or (minimum is not None and value < minimum):
        raise Discarded(f"corrupt: {what} is {value!r}")
    return value


def decode(data: bytes, *, node: str, step_seconds: int, keep_steps: int, now: float,
           max_bytes: int = MAX_BYTES, max_pods: int = MAX_PODS) -> Decoded:
    """The history in `data`, trimmed to `keep_steps`; `Discarded` with the reason when it
    cannot be used by this agent (`node`, `step_seconds`) at time `now` (seconds)."""
    if len(data) > max_bytes:
        raise Discarded(f"too large: {len(data)} bytes, the cap is {max_bytes}")
    if not data:
        raise Discarded("corrupt: empty file")
    if data[: len(MAGIC)] != MAGIC[: len(data)]:
        raise Discarded("corrupt: not a Tidal online-history file")
    if len(data) < _PREFIX.size:
        raise Discarded(f"truncated: {len(data)} bytes, shorter than the {_PREFIX.size}-byte prefix")
    _, version, reserved, length, digest = _PREFIX.unpack_from(data)
    if version != VERSION:
        raise Discarded(f"format version {version}, this agent reads version {VERSION}")
    if reserved:
        raise Discarded(f"corrupt: reserved field is {reserved}")
    body = memoryview(data)[_PREFIX.size:]
    if len(body) < length:
        raise Discarded(f"truncated: {len(data)} of {_PREFIX.size + length} bytes")
    if len(body) > length:
        raise Discarded(f"corrupt: {len(body) - length} bytes after the end")
    if hashlib.sha256(body).digest() != digest:
        raise Discarded("checksum mismatch")
    try:
        return _decode_body(body, node=node, step_seconds=step_seconds, keep_steps=keep_steps, now=now,
                            max_pods=max_pods)
    except Discarded:
        raise
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, struct.error) as err:
        raise Discarded(f"corrupt: {err}") from err


def _decode_body(body: memoryview, *, node: str, step_seconds: int, keep_steps: int, now: float,
                 max_pods: int) -> Decoded:
    (size,) = _U32.unpack_from(body, 0)
    if _U32.size + size > len(body):
        raise Discarded("corrupt: header longer than the file")
    header = json.loads(bytes(body[_U32.size:_U32.size + size]).decode("utf-8"))
    if not isinstance(header, dict):
        raise Discarded("corrupt: header is not an object")
    if header.get("node") != node:
        raise Discarded(f"saved by node {header.get('node')!r}, this is node {node!r}")
    if header.get("stepSeconds") != step_seconds:
        raise Discarded(f"step of {header.get('stepSeconds')!r} s, this agent uses {step_seconds} s")
    newest = _integer(header.get("newestClosed"), "newestClosed")
    saved_at = header.get("savedAt")
    if not isinstance(saved_at, (int, float)) or isinstance(saved_at, bool) or not 0 <= saved_at < 253402300800:
        raise Discarded(f"corrupt: savedAt is {saved_at!r}")
    current = int(now // step_seconds)
    ended = (newest + 1) * step_seconds
    if newest >= current:
        raise Discarded(f"from the future: its newest step ends at {rfc3339(ended)}, now is "
                        f"{rfc3339(now)} (clock set back?)")
    if current - newest >= keep_steps:
        raise Discarded(f"stale: its newest step ended {_duration(now - ended)} ago, the history keeps "
                        f"{_duration(keep_steps * step_seconds)}")
    entries = header.get("pods")
    if not isinstance(entries, list) or len(entries) > max_pods:
        raise Discarded(f"corrupt: pods is not a list of at most {max_pods}")
    offset = _U32.size + size
    pods = []
    for entry in entries:
        if not isinstance(entry, list) or len(entry) != 4 or not isinstance(entry[0], str):
            raise Discarded(f"corrupt: pod entry {entry!r}")
        uid = entry[0]
        first = _integer(entry[1], f"pod {uid!r}: first step")
        steps = _integer(entry[2], f"pod {uid!r}: steps", 1)
        runs = _integer(entry[3], f"pod {uid!r}: request runs", 1)
        if runs > steps or offset + 8 * steps + 12 * runs > len(body):
            raise Discarded(f"corrupt: pod {uid!r} runs past the end of the file")
        usage = _from_le(body[offset:offset + 8 * steps])
        offset += 8 * steps
        lengths = struct.unpack_from(f"<{runs}I", body, offset)
        offset += 4 * runs
        values = _from_le(body[offset:offset + 8 * runs])
        offset += 8 * runs
        if 0 in lengths or sum(lengths) != steps:
            raise Discarded(f"corrupt: pod {uid!r}: request runs of {sum(lengths)} steps for {steps}")
        if not all(math.isfinite(v) and v >= 0 for v in (*values, *usage)):
            raise Discarded(f"corrupt: pod {uid!r}: a negative or non-finite value")
        request = array("d")
        for length, value in zip(lengths, values):
            request.extend(array("d", (value,)) * length)
        pods.append((uid, first, usage, request))
    if offset != len(body):
        raise Discarded(f"corrupt: {len(body) - offset} bytes after the last pod")
    history = OnlineHistory.restored(newest, pods, step_seconds=step_seconds, keep_steps=keep_steps)
    return Decoded(history, float(saved_at))


# -- the file ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Loaded:
    """What `HistoryStore.load` found: a history, or the reason there is none."""
    history: OnlineHistory | None
    reason: str | None = None
    saved_at: float | None = None

    def origin(self) -> dict:
        """For the NodeProfile: {"restored": true, "steps", "savedAt"} or {"restored": false, "reason"}."""
        if self.history is None:
            return {"restored": False, "reason": self.reason}
        return {"restored": True, "steps": len(self.history), "savedAt": rfc3339(self.saved_at)}


class HistoryStore:
    """One node's history file at `path`: `load` once at start, `save` after every closed step.
    Neither raises."""

    def __init__(self, path: Path | str, node: str, *, max_bytes: int = MAX_BYTES,
                 max_pods: int = MAX_PODS) -> None:
        self.path = Path(path)
        self.node = node
        self.max_bytes = max_bytes
        self.max_pods = max_pods
        self.failures = 0  # saves that failed
        self.last_error: str | None = None  # of the last failed save, None once one succeeds
        self._logged: set[tuple] = set()
        self._saved_step: int | None = None
        self._cap_logged = False

    @property
    def tmp_path(self) -> Path:
        return tmp_path_of(self.path)

    def load(self, *, step_seconds: int, keep_steps: int, now: float) -> Loaded:
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                data = b"" if size > self.max_bytes else f.read(self.max_bytes + 1)
        except FileNotFoundError:
            log.info("%s: %s, the online history starts empty", self.path, NO_FILE)
            return Loaded(None, NO_FILE)
        except OSError as err:
            return self._discard(f"unreadable: {err.strerror or err}")
        with contextlib.suppress(OSError):  # left by a save that crashed before its rename
            self.tmp_path.unlink()
        try:
            if size > self.max_bytes:
                raise Discarded(f"too large: {size} bytes, the cap is {self.max_bytes}")
            decoded = decode(data, node=self.node, step_seconds=step_seconds, keep_steps=keep_steps,
                             now=now, max_bytes=self.max_bytes, max_pods=self.max_pods)
        except Discarded as err:
            return self._discard(str(err))
        except Exception as err:  # a bug reading a bad file must not stop the agent
            log.exception("%s: reading the saved online history failed", self.path)
            return self._discard(f"corrupt: {err!r}")
        history = decoded.history
        self._saved_step = history.newest_closed
        log.info("%s: online history restored, %d steps of %d pods saved at %s", self.path,
                 len(history), len(history.closed_pods()), rfc3339(decoded.saved_at))
        return Loaded(history, None, decoded.saved_at)

    def _discard(self, reason: str) -> Loaded:
        log.warning("%s: saved online history discarded, %s; the online history starts empty",
                    self.path, reason)
        return Loaded(None, reason)

    def save(self, history: OnlineHistory, now: float) -> bool:
        """Write the closed steps (once per closed step); False when there was nothing new or
        the write failed (logged once per distinct error, counted in `failures`)."""
        step = history.newest_closed
        if step is None or step == self._saved_step:
            return False
        try:
            encoded = encode(history, self.node, now, max_bytes=self.max_bytes, max_pods=self.max_pods)
            self._write(encoded.data)
        except Exception as err:  # disk full, EACCES, read-only: the history goes on in memory
            self._failed(err)
            return False
        if encoded.dropped_steps and not self._cap_logged:
            self._cap_logged = True
            log.warning("%s: online history above the cap (%d bytes, %d pods): the oldest %d steps "
                        "(%d pods) are not saved", self.path, self.max_bytes, self.max_pods,
                        encoded.dropped_steps, encoded.dropped_pods)
        if self.last_error is not None:
            log.info("%s: online history saved again (%d failed saves)", self.path, self.failures)
            self.last_error = None
        self._saved_step = step
        return True

    def _write(self, data: bytes) -> None:
        write_durably(self.path, data)

    def _failed(self, err: Exception) -> None:
        self.failures += 1
        self.last_error = str(err) or type(err).__name__
        key = (type(err).__name__, err.errno) if isinstance(err, OSError) else (type(err).__name__, str(err))
        if key in self._logged:
            log.debug("%s: online history not saved: %s", self.path, err)
            return
        self._logged.add(key)
        log.warning("%s: online history not saved: %s (logged once; kept in memory, retried every "
                    "step)", self.path, err)
