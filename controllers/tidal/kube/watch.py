# SPDX-License-Identifier: Apache-2.0
"""List + watch through :class:`~tidal.kube.client.KubeAPI`, resuming from the last resourceVersion.

:class:`Watcher` keeps a set of objects (keyed by UID) current: it lists (paged), then watches
from the list's resourceVersion (with bookmarks), re-lists after 410 Gone — whether the watch
is refused at its start or ends with an ``ERROR`` event — and, with ``resync_seconds``, re-lists
that often anyway. On network trouble it retries with a capped backoff while the last known
objects stay in force, so a controller keeps acting on them while the API server is unreachable
(``failing`` says so). :class:`ObjectWatch` is the one-object case (the agent's own Node, the
ColocationPolicy ``default``).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from tidal.kube.client import KubeAPI
from tidal.kube.errors import Gone, NotFound, api_error

log = logging.getLogger(__name__)

__all__ = ["ObjectWatch", "Watcher"]

MAX_BACKOFF_SECONDS = 10.0
WATCH_SECONDS = 300


class Watcher:
    """``objects`` maps UID -> ``transform(raw object)`` (objects it maps to None are dropped).

    ``page_size`` pages the (re)lists, so a list of every pod never sits in memory whole;
    ``resync_seconds`` re-lists that often even when the watch is healthy. A collection that
    does not exist (a CRD not installed) counts as empty, and is listed again after a backoff."""

    def __init__(self, api: KubeAPI, path: str, what: str, *, field_selector: str | None = None,
                 label_selector: str | None = None,
                 transform: Callable[[Mapping[str, Any]], Any] = lambda obj: obj,
                 page_size: int | None = None, resync_seconds: float | None = None) -> None:
        self.api = api
        self.path = path
        self.what = what
        self.field_selector = field_selector
        self.label_selector = label_selector
        self.transform = transform
        self.page_size = page_size
        self.resync_seconds = resync_seconds
        self.objects: dict[str, Any] = {}
        self.resource_version: str | None = None
        self.relists = 0
        self.synced = asyncio.Event()
        #: bumped on every change, so a caller can tell cheaply whether anything moved
        self.generation = 0
        #: consecutive failures (0 while the list and watch work); ``last_error`` the latest
        self.failures = 0
        self.last_error: BaseException | None = None
        self._listed_at = 0.0

    def _healthy(self) -> None:
        self.failures, self.last_error = 0, None

    @property
    def failing(self) -> bool:
        return self.failures > 0

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
            if self.objects.pop(meta["uid"], None) is None:
                return  # an object the transform drops changed: nothing moved
        else:
            self.objects[meta["uid"]] = value
        self.generation += 1

    async def relist(self) -> None:
        """List the collection afresh (replacing ``objects`` at once when the list is complete)."""
        objects = {}
        try:
            if self.page_size:
                pages = self.api.list_pages(self.path, self._params(), limit=self.page_size)
            else:
                pages = _one_page(self.api, self.path, self._params())
            async for page in pages:
                for obj in page.get("items") or []:
                    value = self.transform(obj)
                    if value is not None:
                        objects[obj["metadata"]["uid"]] = value
                resource_version = page["metadata"]["resourceVersion"]
        except NotFound:  # no such collection (a CRD not installed): nothing in it
            self.objects, self.resource_version = {}, None
            self.generation += 1
            self.synced.set()
            raise
        self.objects = objects
        self.resource_version = resource_version
        self._listed_at = time.monotonic()
        self._healthy()
        self.relists += 1
        self.generation += 1
        self.synced.set()

    def _watch_seconds(self) -> int:
        if not self.resync_seconds:
            return WATCH_SECONDS
        left = self._listed_at + self.resync_seconds - time.monotonic()
        return max(1, min(WATCH_SECONDS, int(left + 0.999)))

    async def run(self) -> None:
        while True:
            try:
                resync_due = self.resync_seconds and time.monotonic() - self._listed_at >= self.resync_seconds
                if self.resource_version is None or resync_due:
                    await self.relist()
                params = {**self._params(), "resourceVersion": self.resource_version,
                          "allowWatchBookmarks": True, "timeoutSeconds": self._watch_seconds()}
                async for event in self.api.watch(self.path, params, on_open=self._healthy):
                    kind, obj = event["type"], event["object"]
                    if kind == "ERROR":  # the Status of a watch the server ends
                        raise api_error(int(obj.get("code") or 500), "", obj)
                    self.apply(kind, obj)
                self.failures, self.last_error = 0, None
            except asyncio.CancelledError:
                raise
            except Gone:  # our resourceVersion is too old (at the watch's start or during it): start over
                log.info("watch of %s expired (410): re-listing", self.what)
                self.resource_version = None
            except Exception as err:  # network trouble or an error answer: keep the last objects
                self.failures += 1
                self.last_error = err
                delay = min(MAX_BACKOFF_SECONDS, 0.5 * 2 ** self.failures)
                level = logging.WARNING if self.failures == 1 else logging.DEBUG
                log.log(level, "watch of %s failed (%s): retrying in %.0fs, acting on the last known "
                        "state", self.what, err, delay)
                await asyncio.sleep(delay)


async def _one_page(api: KubeAPI, path: str, params: Mapping[str, Any]):
    yield await api.get(path, params)


class ObjectWatch(Watcher):
    """One object by name; ``object`` is its raw JSON, or None while it does not exist."""

    def __init__(self, api: KubeAPI, path: str, name: str, what: str = "") -> None:
        super().__init__(api, path, what or name, field_selector=f"metadata.name={name}")
        self.name = name

    @property
    def object(self) -> dict[str, Any] | None:
        return next(iter(self.objects.values()), None)

