# SPDX-License-Identifier: Apache-2.0
"""The node's features, in the order they run: one module per feature.

Order matters where plans meet: :func:`~.strategy.compose` lets a later write to the same file
win and clamps v1 quotas to their ancestors'. Each call returns fresh instances (features keep
their own decision state: a reclaim level, NUMA placements), configured with ``options``.
"""
from __future__ import annotations

from . import (
    be_batch_resources, be_block_io, be_cpu_interference, be_cpu_priority, be_cpu_suppression, cpu_burst,
    egress_bandwidth, kernel_qos_level, memory_reclaim, numa_affinity, online_sched_slice, psi_interference,
    resctrl,
)
from .feature import DEFAULT_OPTIONS, Feature, Options

__all__ = ["features"]


def features(options: Options = DEFAULT_OPTIONS) -> list[Feature]:
    return [
        be_cpu_suppression.feature(),
        be_cpu_interference.BECPUInterference(options),  # after suppression: its quota wins
        be_cpu_priority.feature(),
        be_batch_resources.feature(),
        cpu_burst.feature(),
        kernel_qos_level.KernelQoSLevel(),
        memory_reclaim.MemoryReclaim(),
        numa_affinity.NUMAAffinity(options),
        resctrl.CacheLimitsFeature(options),
        egress_bandwidth.EgressBandwidthFeature(options),
        be_block_io.BEBlockIO(options),
        psi_interference.PSIInterference(options),
        online_sched_slice.OnlineSchedSlice(),
    ]

#: journals of agents before the executor (merged into the one journal on start)
LEGACY_JOURNALS: tuple[str, ...] = (memory_reclaim.JOURNAL_NAME, numa_affinity.JOURNAL_NAME)
