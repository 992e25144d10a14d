# SPDX-License-Identifier: Apache-2.0
"""The admission rule of each QoS level (DESIGN.md "The QoS model"), as violation messages.

Every violation names the container, the field and the rule, e.g.::

    container "web": HLS requires requests.cpu == limits.cpu (got 500m / 1)

and all of them are reported, not just the first, so one round trip fixes a manifest.

A request that is not set is read as Kubernetes stores it: defaulted to the limit (see
`Container.effective_request`). Quantities are compared by value, so ``1`` equals ``1000m``.
At every level, the cpu/memory quantities a rule reads must parse (``quantities``); one that does
not is a violation of that level's rule, e.g. ``container "web": limits.cpu: "1.5.5" is not a
quantity (...)``. Other resources (ephemeral-storage, GPUs) are the API server's business.

* **HLS** — every container, init containers included (exclusive CPUs are assigned to init
  containers too): cpu and memory requests equal to limits, and a whole number of CPUs, at
  least one (the static CPU manager pins only whole CPUs of Guaranteed pods).
* **LS** — every container that runs alongside the application (regular containers and sidecar
  init containers, ``restartPolicy: Always``) has cpu and memory requests. Ordinary init
  containers are exempt: they finish before the application starts, the pod's effective request
  is already non-zero through its containers, and injected init containers (service meshes,
  volume permission fixers) commonly set no resources. Their quantities must still parse.
* **HLS and LS** (online) — no container, init containers included, may request or limit
  ``kubernetes.io/batch-cpu`` or ``kubernetes.io/batch-memory``: oversold capacity is what
  online pods requested but do not use, reclaimed the moment they need it, so only BE pods may
  run on it; online pods use native cpu/memory only. Pods without a Tidal QoS level are not
  looked at (DESIGN.md: a pod without a QoS annotation is left alone).
* **BE** — native cpu/memory are allowed because the mutation rewrites them (see
  ``tidal.manager.admission.batch``); every quantity must parse and fit, a native request may
  not exceed its limit, batch requests must equal batch limits, and a batch resource that is
  set must equal the native amount it would be rewritten from. Pod-level ``spec.resources``
  (cpu/memory) are refused: Kubernetes has no pod-level extended resources to rewrite them into.
* **BE keeping native requests** (opted out of oversold resources, see
  ``tidal.api.node_mode.oversell_opted_out``) — the native requests stay, so they are judged as
  Kubernetes would run them: every quantity must parse, a native request may not exceed its
  limit, and no ``kubernetes.io/batch-*`` may be set (the pod runs without oversold resources,
  and a node without overselling publishes none: the pod would never schedule). Pod-level
  resources are allowed: nothing is rewritten.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any, NamedTuple

from tidal.manager.admission.batch import (
    BATCH_RESOURCE_OF,
    NATIVE_RESOURCES,
    UNIT_OF,
    native_amount,
)
from tidal.manager.admission.podspec import Container, containers_of
from tidal.api.quantities import MAX_QUANTITY_LENGTH, QuantityError, parse_quantity
from tidal.api.shape import optional_object
from tidal.api.qos import QoSLevel

__all__ = ["violations"]

_INVALID = object()  # a quantity that did not parse; its problem is already reported


def _show(raw: Any) -> str:
    """A quantity as written, for "(got ...)"; ``unset`` when absent."""
    if raw is None:
        return "unset"
    text = str(raw)
    return text if len(text) <= MAX_QUANTITY_LENGTH else text[:MAX_QUANTITY_LENGTH] + "…"


def _parse(container: Container, field: str, raw: Any, problems: list[str]) -> Any:
    """The quantity's value, None when unset, or _INVALID after reporting why."""
    if raw is None:
        return None
    try:
        return parse_quantity(raw)
    except QuantityError as error:
        problems.append(f"{container.label}: {field}: {error}")
        return _INVALID


def _is_whole_number(value: Decimal) -> bool:
    return value == value.to_integral_value()


class _Fields(NamedTuple):
    """The field names of one native resource and its batch resource, as messages show them."""

    request: str
    limit: str
    batch_request: str
    batch_limit: str


_FIELDS = {
    resource: _Fields(
        f"requests.{resource}",
        f"limits.{resource}",
        f"requests.{BATCH_RESOURCE_OF[resource]}",
        f"limits.{BATCH_RESOURCE_OF[resource]}",
    )
    for resource in NATIVE_RESOURCES
}


def _batch_set(container: Container, resource: str) -> list[tuple[str, str, Any]]:
    """(map name, batch resource, value) for each of requests/limits that sets the batch
    counterpart of the native ``resource``."""
    batch = BATCH_RESOURCE_OF[resource]
    return [(map_name, batch, values[batch])
            for map_name, values in (("requests", container.requests), ("limits", container.limits))
            if values.get(batch) is not None]


def _online_without_batch(level: QoSLevel, container: Container, problems: list[str]) -> None:
    """HLS and LS: no oversold ``kubernetes.io/batch-*`` resource, in requests or limits."""
    for resource in NATIVE_RESOURCES:
        for map_name, batch, raw in _batch_set(container, resource):
            problems.append(
                f"{container.label}: {level.value} requires {map_name}.{batch} to be unset: "
                f"oversold batch resources are for BE pods only, online pods use native "
                f"{map_name}.{resource} (got {_show(raw)})"
            )


def _hls(container: Container, problems: list[str]) -> None:
    _online_without_batch(QoSLevel.HLS, container, problems)
    for resource in NATIVE_RESOURCES:
        fields = _FIELDS[resource]
        limit_raw = container.limits.get(resource)
        limit = _parse(container, fields.limit, limit_raw, problems)
        request_raw = container.requests.get(resource)
        if request_raw is None:  # defaulted to the limit: parse it once, report it once
            request_raw, request = limit_raw, limit
        else:
            request = _parse(container, fields.request, request_raw, problems)
        if request is _INVALID or limit is _INVALID:
            continue
        if request is None or limit is None or request != limit:
            problems.append(
                f"{container.label}: HLS requires {fields.request} == {fields.limit} "
                f"(got {_show(request_raw)} / {_show(limit_raw)})"
            )
        if resource == "cpu":
            field, raw, amount = (
                (fields.limit, limit_raw, limit)
                if limit is not None
                else (fields.request, request_raw, request)
            )
            if amount is not None and (amount < 1 or not _is_whole_number(amount)):
                problems.append(
                    f"{container.label}: HLS requires {field} to be a whole number of CPUs, "
                    f"at least 1 (got {_show(raw)})"
                )


def _ls(container: Container, problems: list[str]) -> None:
    _online_without_batch(QoSLevel.LS, container, problems)
    for resource in NATIVE_RESOURCES:
        fields = _FIELDS[resource]
        _parse(container, fields.request, container.requests.get(resource), problems)
        _parse(container, fields.limit, container.limits.get(resource), problems)
        if container.runs_with_app and container.effective_request(resource) is None:
            problems.append(f"{container.label}: LS requires {fields.request} to be set")


def _be(container: Container, problems: list[str]) -> None:
    for resource in NATIVE_RESOURCES:
        fields = _FIELDS[resource]
        batch = BATCH_RESOURCE_OF[resource]
        request_raw, limit_raw = container.requests.get(resource), container.limits.get(resource)
        batch_request_raw, batch_limit_raw = (
            container.requests.get(batch),
            container.limits.get(batch),
        )
        request = _parse(container, fields.request, request_raw, problems)
        limit = _parse(container, fields.limit, limit_raw, problems)
        batch_request = _parse(container, fields.batch_request, batch_request_raw, problems)
        batch_limit = _parse(container, fields.batch_limit, batch_limit_raw, problems)
        if _INVALID in (request, limit, batch_request, batch_limit):
            continue
        try:
            native = native_amount(container, resource)
        except QuantityError as error:  # parses, but does not fit in its batch unit
            field = fields.limit if limit is not None else fields.request
            problems.append(f"{container.label}: {field}: {error}")
            continue
        if request is not None and limit is not None and request > limit:
            problems.append(
                f"{container.label}: BE requires {fields.request} <= {fields.limit} "
                f"(got {_show(request_raw)} / {_show(limit_raw)})"
            )
        if batch_request is not None and batch_limit is not None and batch_request != batch_limit:
            problems.append(
                f"{container.label}: BE requires {fields.batch_request} == {fields.batch_limit} "
                f"(got {_show(batch_request_raw)} / {_show(batch_limit_raw)})"
            )
            continue
        if native is None:
            continue
        batch_field, batch_raw, batch_value = (
            (fields.batch_limit, batch_limit_raw, batch_limit)
            if batch_limit is not None
            else (fields.batch_request, batch_request_raw, batch_request)
        )
        if batch_value is not None and batch_value != native.amount:
            problems.append(
                f"{container.label}: BE requires {batch_field} == {native.field} "
                f"in {UNIT_OF[resource]} "
                f"(got {_show(batch_raw)} / {_show(native.raw)} = {native.amount})"
            )


def _be_pod_level(spec: dict[str, Any], path: str, problems: list[str]) -> None:
    # Pod-level resources (PodLevelResources, Kubernetes 1.32+) accept only native resources.
    resources = optional_object(spec, "resources", f"{path}.resources")
    if not resources:
        return
    for map_name in ("requests", "limits"):
        values = optional_object(resources, map_name, f"{path}.resources.{map_name}") or {}
        for resource in NATIVE_RESOURCES:
            raw = values.get(resource)
            if raw is not None:
                problems.append(
                    f"pod: BE requires pod-level resources.{map_name}.{resource} to be unset, "
                    f"as it cannot be rewritten into {BATCH_RESOURCE_OF[resource]} "
                    f"(got {_show(raw)})"
                )


def _be_native(reason: str) -> Callable[[Container, list[str]], None]:
    """BE keeping its native requests because of ``reason`` (e.g. ``pod annotation
    colocation.tidal.io/oversell=false``)."""

    def rule(container: Container, problems: list[str]) -> None:
        for resource in NATIVE_RESOURCES:
            fields = _FIELDS[resource]
            request_raw, limit_raw = container.requests.get(resource), container.limits.get(resource)
            request = _parse(container, fields.request, request_raw, problems)
            limit = _parse(container, fields.limit, limit_raw, problems)
            for map_name, batch, raw in _batch_set(container, resource):
                problems.append(
                    f"{container.label}: BE keeping native requests ({reason}) requires "
                    f"{map_name}.{batch} to be unset: the pod runs without oversold "
                    f"resources, use {map_name}.{resource} (got {_show(raw)})"
                )
            if _INVALID in (request, limit):
                continue
            if request is not None and limit is not None and request > limit:
                problems.append(
                    f"{container.label}: BE requires {fields.request} <= {fields.limit} "
                    f"(got {_show(request_raw)} / {_show(limit_raw)})"
                )

    return rule


_CONTAINER_RULES: dict[QoSLevel, Callable[[Container, list[str]], None]] = {
    QoSLevel.HLS: _hls,
    QoSLevel.LS: _ls,
    QoSLevel.BE: _be,
}


def violations(
    spec: dict[str, Any],
    level: QoSLevel,
    path: str = "spec",
    containers: list[Container] | None = None,
    be_native_reason: str | None = None,
) -> list[str]:
    """Every way a pod spec breaks the rule of ``level``; empty when it complies.

    Args:
        spec: a pod spec, from a Pod or a workload's pod template.
        level: the QoS level the pod asks for.
        path: where ``spec`` sits in the object, for malformed-object messages.
        containers: ``containers_of(spec, path)``, when the caller already has it.
        be_native_reason: for a BE pod that keeps its native requests, why (shown in the
            messages); None for a BE pod whose requests become batch resources.

    Raises:
        MalformedObjectError: a part of the spec the rules read has the wrong JSON type.
    """
    problems: list[str] = []
    native = level is QoSLevel.BE and be_native_reason is not None
    rule = _be_native(be_native_reason) if native else _CONTAINER_RULES[level]  # type: ignore[arg-type]
    for container in containers_of(spec, path) if containers is None else containers:
        rule(container, problems)
    if level is QoSLevel.BE and not native:
        _be_pod_level(spec, path, problems)
    return problems
