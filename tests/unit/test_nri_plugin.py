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
