# SPDX-License-Identifier: Apache-2.0
"""List + watch through the agent's KubeAPI, resuming from the last resourceVersion.

:class:`Watcher` keeps a set of objects (keyed by UID) current: it lists, then watches from the
list's resourceVersion (with bookmarks), re-lists after 410 Gone, and on network trouble retries
with a capped backoff while the last known objects stay in force — so the agent keeps acting on
them while the API server is unreachable. :class:`ObjectWatch` is the one-object case (the
agent's own Node, the ColocationPolicy ``default``).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from tidal.kube.client import ApiError, KubeAPI

log = logging.getLogger(__name__)

__all__ = ["ObjectWatch", "Watcher"]

MAX_BACKOFF_SECONDS = 10.0


class Watcher:
    """``objects`` maps UID -> ``transform(raw object)`` (objects it maps to None are dropped)."""

    def __init__(self, api: KubeAPI, path: str, what: str, *, field_selector: str | None = None,
                 label_selector: str | None = None,
                 transform: Callable[[Mapping[str, Any]], Any] = lambda obj: obj) -> None:
        self.api = api
        self.path = path
        self.what = what
        self.field_selector = field_selector
        self.label_selector = label_selector
        self.transform = transform
        self.objects: dict[str, Any] = {}
        self.resource_version: str | None = None
        self.relists = 0
        self.synced = asyncio.Event()
        #: bumped on every change, so a caller can tell cheaply whether anything moved
        self.generation = 0

    def _params(self) -> dict[str, Any]:
        params = {"fieldSelector": self.field_selector, "labelSelector": self.label_selector}
        return {k: v for k, v in params.items() if v}

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        self.resource_version = meta.get("resourceVersion") or self.resource_version
        if event_type == "BOOKMARK" or not meta.get("uid"):
            return
        value = self.transform(obj) if event_type != "DELETED" else None
        if value is None:
            self.objects.pop(meta["uid"], None)
        else:
            self.objects[meta["uid"]] = value
        self.generation += 1

    async def relist(self) -> None:
        listing = await self.api.request("GET", self.path, params=self._params())
        objects = {}
        for obj in listing.get("items") or []:
            value = self.transform(obj)
            if value is not None:
                objects[obj["metadata"]["uid"]] = value
        self.objects = objects
        self.resource_version = listing["metadata"]["resourceVersion"]
        self.relists += 1
        self.generation += 1
        self.synced.set()

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                if self.resource_version is None:
                    await self.relist()
                params = {**self._params(), "resourceVersion": self.resource_version,
                          "allowWatchBookmarks": True, "timeoutSeconds": 300}
                async for event in self.api.watch(self.path, params):
                    failures = 0
                    kind, obj = event["type"], event["object"]
                    if kind == "ERROR":
                        if obj.get("code") == 410:  # our resourceVersion is too old: start over
                            log.info("watch of %s expired (410): re-listing", self.what)
                            self.resource_version = None
                            break
                        raise ApiError(int(obj.get("code") or 500), obj.get("reason") or "", str(obj))
                    self.apply(kind, obj)
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as err:  # network trouble or an error answer: keep the last objects
                if isinstance(err, ApiError) and err.status == 410:
                    self.resource_version = None
                    continue
                failures += 1
                delay = min(MAX_BACKOFF_SECONDS, 0.5 * 2 ** failures)
                level = logging.WARNING if failures == 1 else logging.DEBUG
                log.log(level, "watch of %s failed (%s): retrying in %.0fs, acting on the last known "
                        "state", self.what, err, delay)
                await asyncio.sleep(delay)


class ObjectWatch(Watcher):
    """One object by name; ``object`` is its raw JSON, or None while it does not exist."""

    def __init__(self, api: KubeAPI, path: str, name: str, what: str = "") -> None:
        super().__init__(api, path, what or name, field_selector=f"metadata.name={name}")
        self.name = name

    @property
    def object(self) -> dict[str, Any] | None:
        return next(iter(self.objects.values()), None)
