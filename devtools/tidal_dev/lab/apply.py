# SPDX-License-Identifier: Apache-2.0
"""Apply manifests to the lab's API server with server-side apply (idempotent)."""
from __future__ import annotations

import time
from typing import Iterable

FIELD_MANAGER = "tidal-lab"


def create_or_replace_all(api, manifests: Iterable[dict], wait_established: bool = False,
                          timeout: float = 60.0) -> list[str]:
    """Server-side apply every manifest; with `wait_established`, wait until every
    CustomResourceDefinition among them is Established and its resources are served (right
    after a CRD is created or changed, the API server answers its lists with 429 "storage is
    (re)initializing" for a moment). Returns `kind/name` of each."""
    from kubernetes.dynamic import DynamicClient

    dynamic = DynamicClient(api)
    applied, crd_names = [], []
    for manifest in manifests:
        resource = dynamic.resources.get(api_version=manifest["apiVersion"], kind=manifest["kind"])
        namespace = manifest.get("metadata", {}).get("namespace")
        resource.server_side_apply(body=manifest, name=manifest["metadata"]["name"],
                                   namespace=namespace, field_manager=FIELD_MANAGER,
                                   force_conflicts=True)
        applied.append(f"{manifest['kind']}/{manifest['metadata']['name']}")
        if manifest["kind"] == "CustomResourceDefinition":
            crd_names.append(manifest["metadata"]["name"])
    if wait_established and crd_names:
        crds = dynamic.resources.get(api_version="apiextensions.k8s.io/v1",
                                     kind="CustomResourceDefinition")
        deadline = time.monotonic() + timeout
        pending = set(crd_names)
        while pending:
            for name in list(pending):
                crd = crds.get(name=name).to_dict()
                conditions = crd.get("status", {}).get("conditions") or []
                if any(c["type"] == "Established" and c["status"] == "True" for c in conditions) \
                        and _served(api, crd):
                    pending.discard(name)
            if pending:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"CRDs not Established and served after {timeout:.0f}s: {sorted(pending)}")
                time.sleep(0.2)
    return applied


def _served(api, crd: dict) -> bool:
    """Whether a list of the CRD's resources (every served version) answers 200."""
    from kubernetes.client.exceptions import ApiException
    spec = crd["spec"]
    for version in spec["versions"]:
        if not version.get("served"):
            continue
        try:
            api.call_api(f"/apis/{spec['group']}/{version['name']}/{spec['names']['plural']}", "GET",
                         query_params=[("limit", "1")], auth_settings=["BearerToken"],
                         response_type="object", _return_http_data_only=True)
        except ApiException:
            return False
    return True
