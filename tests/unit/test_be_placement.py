# SPDX-License-Identifier: Apache-2.0
"""BEPlacement on this machine's cgroups: a BestEffort pod whose containers are in the BE idle
group is seen there, every other pod keeps its class."""
from __future__ import annotations

import uuid

from tidal.agent.be_placement import BEPlacement
from tidal.agent.collector.cgroups import ContainerID, PodQOSClass
from tidal.agent.collector.sampler import PodInfo
from tidal.agent.qos.strategy import ContainerState, PodState
from tidal.api.qos import QoSLevel
from tidal_dev.testing.local_kubelet import LocalKubelet


def test_a_besteffort_pod_in_the_idle_group_takes_its_class_and_paths(hierarchy, real):
    kubelet = LocalKubelet(real)
    moved, kept, online = (str(uuid.uuid4()) for _ in range(3))
    cid = "containerd://" + uuid.uuid4().hex
    dirs = kubelet.create_pod(moved, PodQOSClass.BE_IDLE_GROUP, [cid])
    kubelet.create_pod(moved, PodQOSClass.BEST_EFFORT, [])  # its sandbox's pod cgroup stays below kubepods
    kubelet.create_pod(kept, PodQOSClass.BEST_EFFORT, [cid.replace("://", "://1")])
    kubelet.create_pod(online, PodQOSClass.BURSTABLE, [])
    layout = kubelet.layout
    assert all("tidal-be" in d.parts and "kubepods" not in d.parts for d in dirs[cid])

    placement = BEPlacement(layout)
    found = placement.refresh()  # the idle group is the hierarchy's: other pods may be there too
    assert moved in found and kept not in found and online not in found
    infos = [PodInfo(uid=u, namespace="ns", name=u, qos_class=c, tidal_level=level)
             for u, c, level in ((moved, PodQOSClass.BEST_EFFORT, QoSLevel.BE), (kept, PodQOSClass.BEST_EFFORT,
                                 QoSLevel.BE), (online, PodQOSClass.BURSTABLE, QoSLevel.LS))]
    placed = {p.uid: p.qos_class for p in placement.place(infos)}
    assert placed == {moved: PodQOSClass.BE_IDLE_GROUP, kept: PodQOSClass.BEST_EFFORT,
                      online: PodQOSClass.BURSTABLE}
    states = list(placement.place([PodState(uid=moved, qos_class=PodQOSClass.BEST_EFFORT, tidal_level=QoSLevel.BE)]))
    assert states[0].qos_class is PodQOSClass.BE_IDLE_GROUP
    # the layout's paths for the placed class are where the container's cgroup is
    assert layout.memory_dir(layout.container_relpath(moved, states[0].qos_class, cid)).is_dir()
    # a pod listed once it is gone from the group is back at its kubelet class
    for d in reversed(dirs[cid]):
        d.rmdir()
    for d in kubelet.dirs(layout.pod_relpath(moved, PodQOSClass.BE_IDLE_GROUP)):
        d.rmdir()
    assert moved not in placement.refresh()
    assert next(placement.place(infos[:1])).qos_class is PodQOSClass.BEST_EFFORT


def test_while_the_switch_is_in_force_a_be_pod_without_a_container_yet_counts_in_the_idle_group(hierarchy, real):
    """Between a new BE pod's sandbox and its first container the pod is nowhere yet: with the
    switch in force it is placed where the NRI plugin will create its containers (the group), so
    no BE strategy plans for ``kubepods/besteffort`` on its account. A pod with a container, a
    sidecar or an ordinary init container below ``kubepods`` (created with the switch off, or on a
    node without NRI), a plain BestEffort pod that is not Tidal's BE, and every pod while the
    switch is not in force keep their class. Which pods are nowhere is decided once per refresh,
    from the QoS engine's views (sidecars and init containers included), and holds for both views
    of a pod: the sampler's PodInfo lists ordinary containers only."""
    kubelet = LocalKubelet(real)
    new, below, sidecar, init, plain = (str(uuid.uuid4()) for _ in range(5))
    cid = "containerd://" + uuid.uuid4().hex
    kubelet.create_pod(new, PodQOSClass.BEST_EFFORT, [])  # the sandbox's pod cgroup only
    kubelet.create_pod(below, PodQOSClass.BEST_EFFORT, [cid])
    kubelet.create_pod(sidecar, PodQOSClass.BEST_EFFORT, [cid.replace("://", "://s")])
    kubelet.create_pod(init, PodQOSClass.BEST_EFFORT, [cid.replace("://", "://i")])
    kubelet.create_pod(plain, PodQOSClass.BEST_EFFORT, [])
    be = {"qos_class": PodQOSClass.BEST_EFFORT, "tidal_level": QoSLevel.BE}
    states = [PodState(uid=new, **be),
              PodState(uid=below, containers=(ContainerState(cid),), **be),
              PodState(uid=sidecar, containers=(ContainerState(cid.replace("://", "://s")),), **be),
              PodState(uid=init, init_started=True, **be),
              PodState(uid=plain, qos_class=PodQOSClass.BEST_EFFORT, tidal_level=None)]
    # the sampler's views: no container IDs for the pods in their init phase or with a sidecar only
    infos = [PodInfo(uid=s.uid, namespace="ns", name=s.uid, qos_class=s.qos_class, tidal_level=s.tidal_level,
                     container_ids=(ContainerID.parse(cid),) if s.uid == below else ()) for s in states]
    placement = BEPlacement(kubelet.layout)
    kept = dict.fromkeys((new, below, sidecar, init, plain), PodQOSClass.BEST_EFFORT)
    for in_force, expected in ((True, {**kept, new: PodQOSClass.BE_IDLE_GROUP}), (False, kept)):
        assert new not in placement.refresh(in_force, states)
        assert {p.uid: p.qos_class for p in placement.place(infos)} == expected, in_force
        assert {p.uid: p.qos_class for p in placement.place(states)} == expected, in_force
    # in force, but the refresh given no views: nothing is placed before it has a container
    placement.refresh(True)
    assert next(placement.place(states)).qos_class is PodQOSClass.BEST_EFFORT
    # its first container created in the group: there, switch in force or not
    kubelet.create_pod(new, PodQOSClass.BE_IDLE_GROUP, [cid.replace("://", "://2")])
    assert new in placement.refresh(False, states)
    assert next(placement.place(infos)).qos_class is PodQOSClass.BE_IDLE_GROUP
