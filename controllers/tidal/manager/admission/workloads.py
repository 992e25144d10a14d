# SPDX-License-Identifier: Apache-2.0
"""Which objects the webhook reviews, and where each keeps its pod template.

A Pod is validated and mutated. Workloads that carry a pod template are validated only, so that
a Deployment whose pods would all be refused is refused itself, at creation, with a message
prefixed by the template's path (``spec.template: container "web": ...``); their pods are
mutated when the controllers create them.

The object is identified by the request's ``kind`` (group and kind, any version), or by its
``resource`` when ``kind`` is absent. Anything else is not Tidal's business and is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidal.api.shape import MalformedObjectError, optional_object

__all__ = ["Target", "POD", "WORKLOADS", "target_of", "pod_template_of"]


@dataclass(frozen=True, slots=True)
class Target:
    """A kind of object the webhook reviews.

    Attributes:
        group: API group, "" for the core group.
        kind: e.g. ``Deployment``.
        resource: e.g. ``deployments``.
        template_path: the keys leading to the pod template; empty for a Pod itself.
    """

    group: str
    kind: str
    resource: str
    template_path: tuple[str, ...] = ()

    @property
    def is_pod(self) -> bool:
        return not self.template_path

    @property
    def template_path_text(self) -> str:
        """The pod template's path as messages show it, e.g. ``spec.jobTemplate.spec.template``."""
        return ".".join(self.template_path)


POD = Target("", "Pod", "pods")
_TEMPLATE = ("spec", "template")
WORKLOADS = (
    Target("apps", "Deployment", "deployments", _TEMPLATE),
    Target("apps", "StatefulSet", "statefulsets", _TEMPLATE),
    Target("apps", "DaemonSet", "daemonsets", _TEMPLATE),
    Target("apps", "ReplicaSet", "replicasets", _TEMPLATE),
    Target("batch", "Job", "jobs", _TEMPLATE),
    Target("batch", "CronJob", "cronjobs", ("spec", "jobTemplate", "spec", "template")),
    # Still served by every API server and still creating pods, so it cannot be a loophole.
    Target("", "ReplicationController", "replicationcontrollers", _TEMPLATE),
)
_BY_KIND = {(target.group, target.kind): target for target in (POD, *WORKLOADS)}
_BY_RESOURCE = {(target.group, target.resource): target for target in (POD, *WORKLOADS)}


def target_of(request: dict[str, Any]) -> Target | None:
    """What the request is about, or None when it is not an object Tidal reviews.

    Raises:
        MalformedObjectError: neither ``request.kind`` nor ``request.resource`` says what it is.
    """
    for field, index in (("kind", _BY_KIND), ("resource", _BY_RESOURCE)):
        value = request.get(field)
        if isinstance(value, dict) and isinstance(value.get(field), str):
            group = value.get("group") or ""
            if not isinstance(group, str):
                raise MalformedObjectError(f"request.{field}.group", "a string", group)
            return index.get((group, value[field]))
    raise MalformedObjectError("request.kind", "an object with a string kind", request.get("kind"))


def pod_template_of(obj: dict[str, Any], target: Target) -> dict[str, Any] | None:
    """The workload's pod template, or None when it has none (the API server refuses that).

    Raises:
        MalformedObjectError: a map on the way has the wrong JSON type.
    """
    node: dict[str, Any] | None = obj
    for depth, key in enumerate(target.template_path):
        node = optional_object(node, key, ".".join(target.template_path[: depth + 1]))
        if node is None:
            return None
    return node
