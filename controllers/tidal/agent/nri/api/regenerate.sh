#!/usr/bin/env bash
# Regenerates api_pb2.py from NRI's pkg/api/api.proto at NRI_VERSION and ttrpc_pb2.py from
# ttrpc.proto, with a pinned grpcio-tools in a throw-away venv. The generated code is committed;
# tests/unit/test_nri_api_generated.py checks it still matches the pinned NRI version's proto.
#   controllers/tidal/agent/nri/api/regenerate.sh
set -euo pipefail
NRI_VERSION=v0.12.5
GRPCIO_TOOLS_VERSION=1.85.1
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
go mod init tidal-nri-proto >/dev/null 2>&1
nri_dir="$(GOFLAGS=-mod=mod go mod download -json "github.com/containerd/nri@${NRI_VERSION}" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
mkdir -p proto/nri/pkg/api
cp "$nri_dir/pkg/api/api.proto" proto/nri/pkg/api/api.proto
cp "$here/ttrpc.proto" proto/ttrpc.proto
python3 -m venv venv
venv/bin/pip install --quiet "grpcio-tools==${GRPCIO_TOOLS_VERSION}"
mkdir -p out
venv/bin/python -m grpc_tools.protoc -Iproto --python_out=out nri/pkg/api/api.proto ttrpc.proto
cp out/nri/pkg/api/api_pb2.py "$here/api_pb2.py"
cp out/ttrpc_pb2.py "$here/ttrpc_pb2.py"
sha="$(sha256sum proto/nri/pkg/api/api.proto | cut -d' ' -f1)"
cat > "$here/source.py" <<PY
"""Where api_pb2.py comes from (written by regenerate.sh; do not edit)."""
NRI_VERSION = "${NRI_VERSION}"
API_PROTO_SHA256 = "${sha}"
GRPCIO_TOOLS_VERSION = "${GRPCIO_TOOLS_VERSION}"
PY
echo "generated from github.com/containerd/nri@${NRI_VERSION} api.proto (sha256 ${sha})"
