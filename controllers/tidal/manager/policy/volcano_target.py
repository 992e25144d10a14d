# SPDX-License-Identifier: Apache-2.0
"""Where Volcano's scheduler configuration lives: a ConfigMap (clusters) or a file (the lab,
whose scheduler reads ``--scheduler-conf`` directly). Volcano watches either and reloads it."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ConfigMapTarget", "FileTarget", "parse_target", "DEFAULT_TARGET"]

DEFAULT_TARGET = "configmap:volcano-system/volcano-scheduler-configmap/volcano-scheduler.conf"


@dataclass(frozen=True)
class FileTarget:
    path: Path

    def describe(self) -> str:
        return f"file {self.path}"

    async def read(self, api) -> tuple[str, object]:
        return self.path.read_text(), None

    async def write(self, api, text: str, version: object) -> None:
        tmp = self.path.with_name(self.path.name + ".tidal.tmp")
        tmp.write_text(text)
        os.replace(tmp, self.path)  # one atomic change for Volcano's file watch


@dataclass(frozen=True)
class ConfigMapTarget:
    namespace: str
    name: str
    key: str = "volcano-scheduler.conf"

    def describe(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name} key {self.key}"

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/configmaps/{self.name}"

    async def read(self, api) -> tuple[str, object]:
        cm = await api.get(self.path)
        return (cm.get("data") or {}).get(self.key, ""), cm["metadata"]["resourceVersion"]

    async def write(self, api, text: str, version: object) -> None:
        await api.merge_patch(self.path, {"metadata": {"resourceVersion": version}, "data": {self.key: text}})


def parse_target(spec: str) -> FileTarget | ConfigMapTarget | None:
    """``file:PATH``, ``configmap:NAMESPACE/NAME[/KEY]``, or ``none`` (leave Volcano alone)."""
    kind, _, rest = spec.partition(":")
    if kind == "none" and not rest:
        return None
    if kind == "file" and rest:
        return FileTarget(Path(rest))
    if kind == "configmap":
        parts = rest.split("/")
        if len(parts) in (2, 3) and all(parts):
            return ConfigMapTarget(*parts)
    raise ValueError(f"--volcano-scheduler-config {spec!r}: expected file:PATH, "
                     "configmap:NAMESPACE/NAME[/KEY] or none")
