# SPDX-License-Identifier: Apache-2.0
"""Which BE pods run in the BE idle group: the pods' views with the cgroup parent they really have.

The API server says a BE pod is BestEffort, and the kubelet's pod cgroup is below
``kubepods/besteffort``; but when Tidal's NRI plugin created its containers in the BE idle group
(:mod:`tidal.agent.nri.placement`), their cgroups, the ones to measure and to set, are below
``tidal-be/pod<uid>``. Where a pod's containers went is decided once, at their creation, and
stays: pods created before ``beIsolation.cpuPriority.idleGroup`` was switched on (or after it was
switched off) stay below ``kubepods``. So the agent looks: one listing of the idle group per
tick, and every BestEffort pod found there is given the class
:attr:`~tidal.agent.collector.cgroups.PodQOSClass.BE_IDLE_GROUP`, which the layout maps to the
idle group's paths; the sampler and every strategy then follow it unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tidal.agent.collector.cgroups import CgroupLayout, PodQOSClass, pod_uids_in

__all__ = ["BEPlacement"]

View = TypeVar("View")  # PodInfo or PodState: frozen dataclasses with ``uid`` and ``qos_class``


class BEPlacement:
    """The BE idle group's pods, listed by :meth:`refresh`; :meth:`place` applies them."""

    def __init__(self, layout: CgroupLayout) -> None:
        self.layout = layout
        self.uids: frozenset[str] = frozenset()

    def refresh(self) -> frozenset[str]:
        self.uids = frozenset(pod_uids_in(self.layout, PodQOSClass.BE_IDLE_GROUP))
        return self.uids

    def place(self, views: Iterable[View]) -> Iterator[View]:
        for view in views:
            if view.qos_class is PodQOSClass.BEST_EFFORT and view.uid in self.uids:
                yield dataclasses.replace(view, qos_class=PodQOSClass.BE_IDLE_GROUP)
            else:
                yield view
