# SPDX-License-Identifier: Apache-2.0
"""The reasons of the Events Tidal's components write, and who writes them (the contract the
console reads them by: it lists Tidal's Events with one field-selected list per reason, so a
reason missing here is an Event no one sees in the console)."""
from __future__ import annotations

__all__ = ["EVENT_REASONS"]

#: reason -> who writes it and when
EVENT_REASONS: dict[str, str] = {
    "TidalEvicted": "tidal-agent: a BE pod evicted (watermark or interference)",
    "TidalEvictionBlocked": "tidal-agent: an eviction a PodDisruptionBudget blocked",
    "TidalOfflineEvicting": "tidal-agent: the node tainted offline-evicting (no new BE pods)",
    "TidalOfflineEvictingCleared": "tidal-agent: the offline-evicting taint removed",
    "TidalBECPUThrottled": "tidal-agent: BE's CPU quota lowered, online tasks delayed on a run queue",
    "TidalBECPUReleased": "tidal-agent: BE's CPU quota back at its bound (or lifted)",
    "TidalBECPUFloorRecheck": "tidal-agent: the online delay with BE at its floor to be measured again soon",
    "TidalCgroupWriteFailed": "tidal-agent: the kernel refused cgroup writes (retried every round)",
    "TidalCgroupWriteRecovered": "tidal-agent: every cgroup write succeeds again",
    "TidalRestorePending": "tidal-agent: the agent changes this node and stays until it has put everything back",
    "TidalNodeRestored": "tidal-agent: a node switched off is restored, the agent leaves it",
    "BatchResourcesDropped": "tidal-manager: a node's batch resources dropped sharply",
}
