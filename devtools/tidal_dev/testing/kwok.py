# SPDX-License-Identifier: Apache-2.0
"""Fake nodes for tests and benchmarks: kwok manages every node carrying its annotation."""
from __future__ import annotations

from collections.abc import Mapping

__all__ = ["KWOK_ANNOTATION", "kwok_node"]

KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}


def kwok_node(core, name: str, capacity: Mapping[str, str], labels: Mapping[str, str] | None = None) -> None:
    """Create node ``name`` (``core`` is a ``kubernetes.client.CoreV1Api``); kwok makes it Ready."""
    core.create_node({"apiVersion": "v1", "kind": "Node",
                      "metadata": {"name": name, "annotations": dict(KWOK_ANNOTATION),
                                   "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
                      "status": {"capacity": dict(capacity), "allocatable": dict(capacity)}})
