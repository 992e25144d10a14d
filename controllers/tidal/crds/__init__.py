# SPDX-License-Identifier: Apache-2.0
"""Tidal's CustomResourceDefinitions (apiextensions.k8s.io/v1), shipped as package data.

The YAML files next to this module are the CRDs as applied to the cluster: the Ansible roles and
the lab apply them as they are. They are generated from their typed descriptions in `tidal.api`
(`tidal.api.policy_crd.crd`, `tidal.api.node_profile.crd`) by ``hack/generate_crds.py``, which
writes the role's copies too; never edit them. `crd_manifests` loads them for Python callers.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

__all__ = ["CRD_FILES", "crd_manifests"]

#: File names, in the order the CRDs should be applied (none depends on another).
CRD_FILES = (
    "colocation.tidal.io_colocationpolicies.yaml",
    "colocation.tidal.io_nodeprofiles.yaml",
)


def crd_manifests() -> list[dict[str, Any]]:
    """Every Tidal CRD as a fresh dict (callers may mutate), in `CRD_FILES` order."""
    package = resources.files(__name__)
    return [
        yaml.safe_load(package.joinpath(name).read_text(encoding="utf-8")) for name in CRD_FILES
    ]
