"""The committed api_pb2.py is NRI's api.proto at the pinned version (the harness's go.mod)."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess

from google.protobuf import descriptor_pb2

from nri_harness import HARNESS_DIR, Harness, nri_version
from tidal.agent.nri.api import api_pb2, source


def _normalized(fdp: descriptor_pb2.FileDescriptorProto) -> bytes:
    fdp.name = "api.proto"
    for message in fdp.message_type:
        for field in message.field:
            field.ClearField("json_name")
        for nested in message.nested_type:
            for field in nested.field:
                field.ClearField("json_name")
    return fdp.SerializeToString(deterministic=True)


def test_generated_code_is_from_the_pinned_nri_version():
    assert source.NRI_VERSION == nri_version(), (
        "tests/nri/harness/go.mod and controllers/tidal/agent/nri/api disagree on the NRI version: "
        "run controllers/tidal/agent/nri/api/regenerate.sh after changing NRI_VERSION there")
    env = dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-mod=mod")
    out = subprocess.run(["go", "mod", "download", "-json", f"github.com/containerd/nri@{source.NRI_VERSION}"],
                         cwd=HARNESS_DIR, env=env, check=True, capture_output=True, text=True, timeout=300)
    proto = os.path.join(json.loads(out.stdout)["Dir"], "pkg", "api", "api.proto")
    with open(proto, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == source.API_PROTO_SHA256


def test_generated_descriptor_equals_nris_go_descriptor(harness_binary, socket_dir):
    h = Harness(harness_binary, socket_dir / "nri.sock")
    try:
        go = descriptor_pb2.FileDescriptorProto.FromString(
            base64.b64decode(h.cmd("descriptor")["file_descriptor_proto"]))
    finally:
        h.close()
    py = descriptor_pb2.FileDescriptorProto()
    api_pb2.DESCRIPTOR.CopyToProto(py)
    assert [m.name for m in py.message_type] == [m.name for m in go.message_type]
    assert [s.name for s in py.service] == ["Runtime", "Plugin", "HostFunctions"]
    assert _normalized(py) == _normalized(go)
