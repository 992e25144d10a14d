"""The plugin's handlers called directly (their wire behaviour is proven in tests/nri)."""
from __future__ import annotations

import asyncio
import json

import pytest

from tidal.agent.nri.api import api_pb2 as api
from tidal.agent.nri.plugin import TidalNRIPlugin

BE = {"colocation.tidal.io/qos-level": "BE",
      "colocation.tidal.io/batch-resources": json.dumps({"w": {"kubernetes.io/batch-cpu": "100"}})}


def test_split_synchronize_answers_parts_empty_and_updates_at_the_end():
    plugin = TidalNRIPlugin("/nonexistent")
    pod = api.PodSandbox(id="p", name="n", namespace="ns", uid="u", annotations=BE)
    first = api.SynchronizeRequest(pods=[pod], more=True)
    last = api.SynchronizeRequest(containers=[api.Container(id="c", pod_sandbox_id="p", name="w",
                                                            state=api.CONTAINER_RUNNING)])

    async def main():
        return await plugin._synchronize(first), await plugin._synchronize(last)

    part, final = asyncio.run(main())
    assert part == api.SynchronizeResponse(more=True)
    assert not final.more and [u.container_id for u in final.update] == ["c"]
    assert final.update[0].linux.resources.cpu.quota.value == 10_000
    assert plugin.ready.is_set()


@pytest.mark.parametrize("kwargs, message", [
    ({"index": "1"}, "two digits"),
    ({"index": "a1"}, "two digits"),
    ({"name": ""}, "plugin name ''"),
    ({"name": "tidal plugin"}, "letters, digits"),
])
def test_bad_registration_names_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TidalNRIPlugin("/nonexistent", **kwargs)


def test_nri_capability(tmp_path):
    import socket

    from tidal.agent.nri.probe import nri_capability
    missing = nri_capability(tmp_path / "nri.sock")
    assert not missing.supported and "no NRI socket" in missing.reason and "reconcile" in missing.reason
    (tmp_path / "file").write_text("")
    assert "not a socket" in nri_capability(tmp_path / "file").reason
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "nri.sock"))
        present = nri_capability(tmp_path / "nri.sock")
    finally:
        sock.close()
    assert present.supported and present.name == "nri"


def _be_pod(uid: str, sandbox: str = "s") -> api.PodSandbox:
    return api.PodSandbox(id=sandbox, name="job", namespace="ns", uid=uid, annotations=BE)


def _be_container(uid: str, cid: str, in_group: bool = False, sandbox: str = "s",
                  state=api.CONTAINER_UNKNOWN) -> api.Container:
    path = f"/tidal-be/pod{uid}/{cid}" if in_group else f"/kubepods/besteffort/pod{uid}/{cid}"
    return api.Container(id=cid, pod_sandbox_id=sandbox, name="w", state=state, linux=api.LinuxContainer(cgroups_path=path))


def _created_in(plugin: TidalNRIPlugin, uid: str, cid: str) -> str:
    reply = asyncio.run(plugin._create_container(api.CreateContainerRequest(pod=_be_pod(uid),
                                                                            container=_be_container(uid, cid))))
    return reply.adjust.linux.cgroups_path or "kubepods"


def test_a_be_pods_containers_stay_where_its_first_went_whatever_the_switch_says_later():
    switch = {"on": False}
    plugin = TidalNRIPlugin("/nonexistent", be_idle_group=lambda: switch["on"])
    assert _created_in(plugin, "old", "c1") == "kubepods"
    switch["on"] = True
    # a container of the pod created before the switch (a restart, the next one) stays with it
    assert _created_in(plugin, "old", "c2") == "kubepods"
    # a new pod goes in the group, and stays there once the switch is off again
    assert _created_in(plugin, "new", "c3") == "/tidal-be/podnew/c3"
    switch["on"] = False
    assert _created_in(plugin, "new", "c4") == "/tidal-be/podnew/c4"
    # the sandbox removed: the pod is forgotten (a new pod with that uid is decided afresh)
    asyncio.run(plugin._remove_pod(api.RemovePodSandboxRequest(pod=_be_pod("new"))))
    assert _created_in(plugin, "new", "c5") == "kubepods"


def test_a_reconnected_plugin_learns_each_pods_placement_from_the_runtimes_containers():
    plugin = TidalNRIPlugin("/nonexistent", be_idle_group=lambda: True)
    pods = [_be_pod("below", "s1"), _be_pod("above", "s2"), _be_pod("fresh", "s3")]
    containers = [
        # an exited container tells where its pod is as well as a running one
        _be_container("below", "c1", in_group=False, sandbox="s1", state=api.CONTAINER_STOPPED),
        _be_container("above", "c2", in_group=True, sandbox="s2", state=api.CONTAINER_RUNNING),
    ]
    plugin.placements.place("ended", True)  # a pod that ended while the plugin was away
    asyncio.run(plugin._synchronize(api.SynchronizeRequest(pods=pods, containers=containers)))
    assert "ended" not in plugin.placements
    assert _created_in(plugin, "below", "c4") == "kubepods"  # the switch is on, the pod is not in the group
    assert _created_in(plugin, "above", "c5") == "/tidal-be/podabove/c5"
    assert _created_in(plugin, "fresh", "c6") == "/tidal-be/podfresh/c6"  # no container yet: the switch


def test_without_the_policy_no_container_is_moved():
    plugin = TidalNRIPlugin("/nonexistent")  # be_idle_group None: no API server access
    assert _created_in(plugin, "u", "c1") == "kubepods"
    assert "u" not in plugin.placements
