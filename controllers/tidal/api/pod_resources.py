# SPDX-License-Identifier: Apache-2.0
"""What a pod object (raw JSON) requests: shared by the agent's pod view and the manager's
batch-requested metric, so both count a pod alike."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from tidal.api import qos
from tidal.api.quantities import QuantityError, cpu_millicores, memory_bytes

__all__ = ["batch_requested", "requested"]


def requested(pod: Mapping[str, Any], cpu_key: str, memory_key: str,
              cpu_parse: Callable[[Any], int] = cpu_millicores) -> tuple[int, int]:
    """(cpu, memory) the pod's containers request of two resources; a container whose amounts
    do not parse counts as nothing (admission rejects those; a pod from before it may have them)."""
    cpu = memory = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        requests = ((container.get("resources") or {}).get("requests")) or {}
        try:
            cpu += cpu_parse(requests[cpu_key]) if cpu_key in requests else 0
            memory += memory_bytes(requests[memory_key]) if memory_key in requests else 0
        except QuantityError:
            continue
    return cpu, memory


def batch_requested(pod: Mapping[str, Any]) -> tuple[int, int]:
    """(batch-cpu millicores, batch-memory bytes) a BE pod requests. Extended resources are
    plain counts: batch-cpu "2k" is 2,000 millicores, not 2,000 cores."""
    return requested(pod, qos.BATCH_CPU_RESOURCE, qos.BATCH_MEMORY_RESOURCE, cpu_parse=memory_bytes)
