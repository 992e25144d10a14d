"""Apply manifests to the lab's API server with server-side apply (idempotent)."""
from __future__ import annotations

import time
from typing import Iterable

FIELD_MANAGER = "tidal-lab"


def create_or_replace_all(api, manifests: Iterable[dict], wait_established: bool = False,
                          timeout: float = 60.0) -> list[str]:
    """Server-side apply every manifest; with `wait_established`, wait until every
    CustomResourceDefinition among them is Established. Returns `kind/name` of each."""
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
                conditions = crds.get(name=name).to_dict().get("status", {}).get("conditions") or []
                if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                    pending.discard(name)
            if pending:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"CRDs not Established after {timeout:.0f}s: {sorted(pending)}")
                time.sleep(0.2)
    return applied
