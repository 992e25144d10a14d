# SPDX-License-Identifier: Apache-2.0
"""How a BE container's native CPU and memory become oversold ``kubernetes.io/batch-*`` resources.

A BE pod runs on capacity that online pods requested but do not use, so the scheduler must count
it against the node's oversold ``kubernetes.io/batch-cpu`` (millicores) and
``kubernetes.io/batch-memory`` (bytes), never against native ``cpu``/``memory``. The webhook
rewrites each container's native amount into the batch resource.

The amount is the native **limit** when there is one, otherwise the request: a BE container may
use up to its limit, and the oversold capacity is what must absorb that use, so scheduling it by
its (smaller) request would oversell the oversold. Extended resources cannot be overcommitted, so
the batch request and limit are both set to that amount.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidal.manager.admission.podspec import Container
from tidal.api.quantities import cpu_millicores, memory_bytes
from tidal.api.qos import BATCH_CPU_RESOURCE, BATCH_MEMORY_RESOURCE

__all__ = ["NATIVE_RESOURCES", "BATCH_RESOURCE_OF", "UNIT_OF", "NativeAmount", "native_amount"]

#: The native resources a BE pod may state, and which it gets rewritten.
NATIVE_RESOURCES = ("cpu", "memory")
BATCH_RESOURCE_OF = {"cpu": BATCH_CPU_RESOURCE, "memory": BATCH_MEMORY_RESOURCE}
UNIT_OF = {"cpu": "millicores", "memory": "bytes"}
_CONVERT: dict[str, Callable[[Any], int]] = {"cpu": cpu_millicores, "memory": memory_bytes}


@dataclass(frozen=True, slots=True)
class NativeAmount:
    """The native amount of one resource of a BE container, in batch units.

    Attributes:
        field: where it was read, ``limits.cpu`` or ``requests.cpu`` (``memory`` likewise).
        raw: the quantity as written, e.g. ``"2"`` or ``"1Gi"``.
        amount: in the batch resource's unit: millicores for cpu, bytes for memory.
    """

    field: str
    raw: Any
    amount: int


def native_amount(container: Container, resource: str) -> NativeAmount | None:
    """The amount of native ``resource`` to rewrite into its batch resource, or None if unset.

    Raises:
        QuantityError: the quantity read is malformed or out of range.
    """
    for map_name, values in (("limits", container.limits), ("requests", container.requests)):
        raw = values.get(resource)
        if raw is not None:
            return NativeAmount(f"{map_name}.{resource}", raw, _CONVERT[resource](raw))
    return None
