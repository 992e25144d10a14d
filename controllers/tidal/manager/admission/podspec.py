# SPDX-License-Identifier: Apache-2.0
"""The containers of a pod spec and their resources, as the rules and the mutation read them.

Ephemeral containers are not listed: Kubernetes forbids them resources, and they cannot be
set when a pod is created.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tidal.api.shape import MalformedObjectError, optional_array, optional_object

__all__ = ["Container", "containers_of"]

#: The lists of a pod spec that hold containers with resources, in the order they are reported.
CONTAINER_LISTS = ("containers", "initContainers")


@dataclass(frozen=True, slots=True)
class Container:
    """One container of a pod spec.

    Attributes:
        list_name: ``containers`` or ``initContainers``.
        index: position in that list.
        name: the container's ``name`` as found (normally a string).
        runs_with_app: a regular container, or a restartable init container (a sidecar,
            ``restartPolicy: Always``), which runs for the pod's whole life like one.
        resources: the container's ``resources`` object, or None when absent.
        requests: ``resources.requests``, empty when absent.
        limits: ``resources.limits``, empty when absent.
        label: how messages name it: ``container "web"`` or ``init container "setup"``.
    """

    list_name: str
    index: int
    name: Any
    runs_with_app: bool
    resources: dict[str, Any] | None
    requests: dict[str, Any]
    limits: dict[str, Any]

    @property
    def label(self) -> str:
        # Computed on demand: only messages need it, and most pods produce none.
        kind = "init container" if self.list_name == "initContainers" else "container"
        if isinstance(self.name, str) and self.name:
            return f"{kind} {json.dumps(self.name, ensure_ascii=False)}"
        return f"{kind} {self.list_name}[{self.index}]"

    def effective_request(self, resource: str) -> Any:
        """The request the pod will get: the request, or else the limit, or None.

        The API server defaults a missing request to the limit when it stores a Pod, but not
        inside workload templates; reading both the same way keeps a Deployment and the pods it
        creates under one verdict.
        """
        value = self.requests.get(resource)
        return value if value is not None else self.limits.get(resource)


def containers_of(spec: dict[str, Any], path: str) -> list[Container]:
    """Every container of a pod spec, regular ones first, then init containers.

    Args:
        spec: the pod spec (``pod.spec`` or a template's ``spec``).
        path: where ``spec`` sits, for messages, e.g. ``spec`` or ``spec.template.spec``.

    Raises:
        MalformedObjectError: a container list, container or resources map of the wrong type.
    """
    found: list[Container] = []
    for list_name in CONTAINER_LISTS:
        items = optional_array(spec, list_name, f"{path}.{list_name}")
        if not items:
            continue
        for index, container in enumerate(items):
            container_path = f"{path}.{list_name}[{index}]"
            if not isinstance(container, dict):
                raise MalformedObjectError(container_path, "an object", container)
            resources = optional_object(container, "resources", f"{container_path}.resources")
            requests = limits = None
            if resources is not None:
                requests = optional_object(
                    resources, "requests", f"{container_path}.resources.requests"
                )
                limits = optional_object(resources, "limits", f"{container_path}.resources.limits")
                for map_name, quantities in (("requests", requests), ("limits", limits)):
                    for key, value in (quantities or {}).items():
                        # The API server never sends a null quantity; a review that has one was
                        # made by hand and is malformed (read as absent, it slipped through).
                        if value is None:
                            raise MalformedObjectError(
                                f"{container_path}.resources.{map_name}[{json.dumps(key)}]",
                                "a quantity string", value)
            found.append(
                Container(
                    list_name=list_name,
                    index=index,
                    name=container.get("name"),
                    runs_with_app=list_name == "containers"
                    or container.get("restartPolicy") == "Always",
                    resources=resources,
                    requests=requests or {},
                    limits=limits or {},
                )
            )
    return found
