# SPDX-License-Identifier: Apache-2.0
"""Evictions in flight, kept on the node so that an agent killed in the middle of one finishes it
when it starts again (issue 15).

An eviction is three steps: the round chooses the pod, the worker asks the Eviction API, then it
leaves the evidence (the ``TidalEvicted`` Event, the evictions counter). An agent killed between
the request and the evidence used to leave a pod evicted with no word of why. So the intent is
written to ``evictions-journal.json`` (beside the cgroup journal, atomically) before the request
and removed once the evidence is out, or once the request came to nothing (PDB, pod gone).

On start, :func:`resume` (pure) sorts what the journal holds against the pods the agent now sees
on its node (and so does the round after one of this run's requests or Events failed: a request
that timed out may have taken effect):

* the pod is terminating or gone: the request took effect; its evidence is finished (the Event
  with the recorded reason, said to be finished after a restart) — never a second eviction;
* the pod is there and not terminating: the request never took effect (the agent died before
  it, or the API refused it); the intent is dropped and the watermarks decide afresh, as for any
  other pod.

A journal that cannot be written (disk full) does not stop an eviction: the node's safety comes
first; the intent is then only in memory and a warning says so.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Mapping

from tidal.agent.executor.cgroupfs import _write_atomic

log = logging.getLogger(__name__)

FILE_NAME = "evictions-journal.json"
#: what the finished Event adds to the recorded reason
FINISHED_NOTE = "(evicted before the agent restarted; Event sent on its restart)"
#: ... and when this run's request or Event failed and the next round finished it
RETRIED_NOTE = "(Event sent after an API error)"


@dataclass(frozen=True)
class EvictionIntent:
    uid: str
    namespace: str
    name: str
    reason: str
    resource: str = ""
    kind: str = "watermark"
    requested_at: float = 0.0  # seconds since the epoch


def resume(intents: Iterable[EvictionIntent], terminating: Mapping[str, bool]) -> tuple[
        list[EvictionIntent], list[EvictionIntent]]:
    """(finish, drop): `terminating` maps the uid of every pod now on the node to whether it is
    terminating (deletionTimestamp set). Terminating or gone: finish; present and running: drop."""
    finish, drop = [], []
    for intent in intents:
        (drop if terminating.get(intent.uid) is False else finish).append(intent)
    return finish, drop


def _load(path: Path) -> dict[str, EvictionIntent]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:  # unreadable or garbage: nothing to finish, said once
        log.warning("eviction journal %s unreadable (%s): starting without it", path, err)
        return {}
    fields = set(EvictionIntent.__dataclass_fields__)
    out = {}
    for raw in (data.get("evictions") or []) if isinstance(data, dict) else []:
        if isinstance(raw, dict) and raw.get("uid"):
            intent = EvictionIntent(**{k: v for k, v in raw.items() if k in fields})
            out[intent.uid] = intent
    return out


class EvictionJournal:
    """The intents of evictions requested and not yet finished, by pod uid, at `path`."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.intents: dict[str, EvictionIntent] = _load(self.path)

    def record(self, intent: EvictionIntent) -> None:
        self.intents[intent.uid] = intent
        self._save()

    def done(self, uid: str) -> None:
        if self.intents.pop(uid, None) is not None:
            self._save()

    def _save(self) -> None:
        try:
            _write_atomic(self.path, {"evictions": [asdict(i) for i in self.intents.values()]})
        except OSError as err:
            log.warning("eviction journal %s not written (%s): an agent restarted now would not "
                        "finish the evictions in flight", self.path, err)
