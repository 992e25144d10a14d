# SPDX-License-Identifier: Apache-2.0
"""Kubeconfig files for the lab's identities (client-certificate auth)."""
from __future__ import annotations

from pathlib import Path

import yaml

from tidal_dev.lab.pki import CertPair

CONTEXT = "tidal-lab"


def render(server: str, ca_cert: Path, client: CertPair, user: str) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": server,
                                                  "certificate-authority": str(ca_cert)}}],
        "users": [{"name": user, "user": {"client-certificate": str(client.cert),
                                          "client-key": str(client.key)}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": user}}],
        "current-context": CONTEXT,
    }
    return yaml.safe_dump(config, sort_keys=False)


def write(path: Path, server: str, ca_cert: Path, client: CertPair, user: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render(server, ca_cert, client, user))
    tmp.chmod(0o600)
    tmp.replace(path)
    return path
