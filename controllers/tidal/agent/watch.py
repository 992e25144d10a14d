"""One API object kept current by list + watch (the agent's own Node, the ColocationPolicy).

``ObjectWatch.object`` is the latest raw JSON of the object (``None`` while it does not exist).
When the API server is unreachable the last known object stays, so the agent keeps acting on
it; the watch resumes from the last resourceVersion, and re-lists after 410 Gone.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from tidal.kube import raw_json

log = logging.getLogger(__name__)

__all__ = ["ObjectWatch"]


class ObjectWatch:
    """Watch the object ``name`` through ``list_call`` (a kubernetes_asyncio list method)."""

    def __init__(self, list_call: Callable[..., Any], name: str, *args: Any, what: str = "") -> None:
        self.list_call = list_call
        self.args = args
        self.name = name
        self.what = what or name
        self.object: dict[str, Any] | None = None
        self.resource_version: str | None = None
        self.synced = asyncio.Event()
        #: bumped on every change, so a caller can tell cheaply whether to re-read
        self.generation = 0

    def _selector(self) -> str:
        return f"metadata.name={self.name}"

    def _set(self, obj: dict[str, Any] | None) -> None:
        self.object = obj
        self.generation += 1

    async def relist(self) -> None:
        listing = await raw_json(self.list_call(*self.args, field_selector=self._selector(),
                                                _preload_content=False))
        items = listing.get("items") or []
        self._set(items[0] if items else None)
        self.resource_version = listing["metadata"]["resourceVersion"]
        self.synced.set()

    async def run(self) -> None:
        from kubernetes_asyncio import watch
        from kubernetes_asyncio.client.exceptions import ApiException
        while True:
            try:
                if self.resource_version is None:
                    await self.relist()
                stream = watch.Watch().stream(
                    self.list_call, *self.args, field_selector=self._selector(),
                    resource_version=self.resource_version, allow_watch_bookmarks=True,
                    timeout_seconds=300)
                async for event in stream:
                    kind, obj = event["type"], event["raw_object"]
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            self.resource_version = None
                            break
                        raise RuntimeError(f"watch error: {obj}")
                    self.resource_version = (obj.get("metadata") or {}).get("resourceVersion") \
                        or self.resource_version
                    if kind == "BOOKMARK":
                        continue
                    self._set(None if kind == "DELETED" else obj)
            except asyncio.CancelledError:
                raise
            except ApiException as err:
                if err.status == 410:
                    self.resource_version = None
                    continue
                log.warning("watch of %s failed (%s): retrying, acting on the last known object",
                            self.what, err.reason or err.status)
                await asyncio.sleep(1)
            except Exception as err:  # network trouble: keep the last object, resume
                log.warning("watch of %s failed (%s): retrying, acting on the last known object",
                            self.what, err)
                await asyncio.sleep(1)
