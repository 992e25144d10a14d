# SPDX-License-Identifier: Apache-2.0
"""Where api_pb2.py comes from (written by regenerate.sh; do not edit)."""
NRI_VERSION = "v0.12.5"
API_PROTO_SHA256 = "3bd22972e843dc33ede77d189c3a876f7008cd9bf9c961ed7d826bfb8b9a8763"
GRPCIO_TOOLS_VERSION = "1.85.1"
