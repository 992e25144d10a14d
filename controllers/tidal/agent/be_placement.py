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

A BE pod none of whose containers is created yet (no container, sidecar or init container has
a runtime ID) is nowhere yet: its containers will go where the switch says when the first is
created. While the switch is in force on the node it is counted in the idle group already, so that
a new pod never draws the BE strategies back below ``kubepods`` for the seconds before its first
container (a suppression quota split between two parents, values planned for a pod cgroup that
will hold only the sandbox); a pod planned there whose containers the runtime then creates below
``kubepods`` (a node without NRI) is back at its kubelet class as soon as one is created.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tidal.agent.collector.cgroups import CgroupLayout, PodQOSClass, pod_uids_in
from tidal.agent.qos.strategy import PodState

__all__ = ["BEPlacement"]

View = TypeVar("View")  # PodInfo or PodState: frozen dataclasses with ``uid`` and ``qos_class``


class BEPlacement:
    """The BE idle group's pods, listed by :meth:`refresh`; :meth:`place` applies them."""

    def __init__(self, layout: CgroupLayout) -> None:
        self.layout = layout
        self.uids: frozenset[str] = frozenset()  # pods with containers in the group
        self.awaiting: frozenset[str] = frozenset()  # BE pods placed there before their first container

    def refresh(self, in_force: bool = False, states: Iterable[PodState] = ()) -> frozenset[str]:
        """List the group's pods (returned); ``in_force``: whether the switch is in force on the
        node now, when the BE pods of ``states`` none of whose containers is created yet are
        placed in the group too."""
        self.uids = frozenset(pod_uids_in(self.layout, PodQOSClass.BE_IDLE_GROUP))
        self.awaiting = frozenset(s.uid for s in states if _awaiting_containers(s)) if in_force else frozenset()
        return self.uids

    def place(self, views: Iterable[View]) -> Iterator[View]:
        """``views`` (PodInfo or PodState) with the idle group's class for its BestEffort pods."""
        for view in views:
            if view.qos_class is PodQOSClass.BEST_EFFORT and (view.uid in self.uids or view.uid in self.awaiting):
                yield dataclasses.replace(view, qos_class=PodQOSClass.BE_IDLE_GROUP)
            else:
                yield view


def _awaiting_containers(state: PodState) -> bool:
    """A BE pod (Tidal's level) none of whose containers, sidecars and init containers included,
    has a runtime ID yet."""
    return state.is_be and not state.containers and not state.init_started
