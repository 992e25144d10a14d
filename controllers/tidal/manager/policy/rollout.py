# SPDX-License-Identifier: Apache-2.0
"""The ColocationPolicy's rollout status, from the nodes' NodeProfiles (pure).

Every Tidal node's agent (a node whose mode is active: colocation, oversubscription or both,
`tidal.api.node_mode`) reports in its NodeProfile ``status.policy`` the policy generation it
runs and what it cannot apply (``problems``). The status says how many of those nodes run the
current generation, and for each node that does not — or that runs it with problems — why.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tidal.api.node_profile import NodeProfileStatus, PolicyReport
from tidal.api.policy_crd import NodeRollout, PolicyStatus
from tidal.api.schema import Condition

__all__ = ["NodeReport", "rollout_status", "STALE_SECONDS"]

#: a NodeProfile not written for this long means its agent is not running
STALE_SECONDS = 120


@dataclass(frozen=True)
class NodeReport:
    """What one NodeProfile says about the policy (None: the node has no NodeProfile)."""

    applied_generation: int | None
    problems: tuple[str, ...] = ()
    observed_at: datetime | None = None

    @classmethod
    def from_profile(cls, profile: Mapping[str, Any]) -> NodeReport:
        status = NodeProfileStatus.from_status(profile.get("status"))
        policy = status.policy or PolicyReport()
        observed = status.observed_at
        try:
            observed_at = datetime.fromisoformat(observed.replace("Z", "+00:00")) if observed else None
        except ValueError:
            observed_at = None
        return cls(policy.applied_generation, policy.problems or (), observed_at)


@dataclass(frozen=True)
class _Row:
    name: str
    applied_generation: int | None
    reason: str = field(default="")


def _reason(report: NodeReport | None, generation: int, now: datetime) -> str:
    if report is None:
        return "no NodeProfile: tidal-agent is not running on this node"
    if report.observed_at is not None and (now - report.observed_at).total_seconds() > STALE_SECONDS:
        age = int((now - report.observed_at).total_seconds())
        return f"tidal-agent last reported {age}s ago"
    if report.applied_generation is None:
        return "tidal-agent has not reported a policy generation yet"
    if report.applied_generation != generation:
        return f"tidal-agent runs generation {report.applied_generation}"
    if report.problems:
        more = f" (+{len(report.problems) - 1} more)" if len(report.problems) > 1 else ""
        return f"applied with problems: {report.problems[0]}{more}"
    return ""


def rollout_status(generation: int, nodes: Iterable[str], reports: Mapping[str, NodeReport],
                   now: datetime, previous: Mapping[str, Any] | None = None,
                   scheduler: tuple[bool, str] | None = None) -> dict[str, Any]:
    """The ColocationPolicy ``status`` for ``generation`` over the Tidal ``nodes`` (mode active);
    ``scheduler`` (ok, message) adds the ``SchedulerConfigured`` condition (Volcano's
    configuration carries the policy's load-aware scheduling).

    Conditions keep their ``lastTransitionTime`` from ``previous`` while their status holds.
    """
    rows = []
    for name in sorted(set(nodes)):
        report = reports.get(name)
        rows.append(_Row(name, None if report is None else report.applied_generation,
                         _reason(report, generation, now)))
    applied = [r for r in rows if r.applied_generation == generation and not r.reason.startswith(("no ", "tidal-agent"))]
    with_problems = [r for r in rows if r.reason.startswith("applied with problems")]
    behind = [r for r in rows if r not in applied]
    conditions = [
        _condition("Applied", not behind, generation,
                   "AllNodesApplied" if not behind else "NodesBehind",
                   f"{len(applied)}/{len(rows)} Tidal nodes run generation {generation}"
                   + ("" if not behind else f"; behind: {', '.join(r.name for r in behind[:10])}"
                      + (f" (+{len(behind) - 10} more)" if len(behind) > 10 else ""))),
        _condition("NodeProblems", bool(with_problems), generation,
                   "SomeNodesCannotApply" if with_problems else "NoProblems",
                   f"{len(with_problems)} nodes cannot apply part of the policy"
                   + (f": {', '.join(r.name for r in with_problems[:10])}" if with_problems else "")),
    ]
    if scheduler is not None:
        ok, message = scheduler
        conditions.append(_condition("SchedulerConfigured", ok, generation,
                                     "VolcanoConfigured" if ok else "VolcanoNotConfigured", message))
    previous_conditions = {c.get("type"): c for c in (previous or {}).get("conditions") or []}
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    for c in conditions:
        old = previous_conditions.get(c["type"])
        c["lastTransitionTime"] = old["lastTransitionTime"] if old and old.get("status") == c["status"] else stamp
    return PolicyStatus(
        observed_generation=generation,
        total_nodes=len(rows),
        applied_nodes=len(applied),
        nodes=tuple(NodeRollout(name=r.name, applied_generation=r.applied_generation, reason=r.reason)
                    for r in rows),
        conditions=tuple(Condition(type=c["type"], status=c["status"], observed_generation=c["observedGeneration"],
                                   last_transition_time=c["lastTransitionTime"], reason=c["reason"],
                                   message=c["message"]) for c in conditions),
    ).to_status()


def _condition(kind: str, true: bool, generation: int, reason: str, message: str) -> dict[str, Any]:
    return {"type": kind, "status": "True" if true else "False", "observedGeneration": generation,
            "reason": reason, "message": message[:32768]}
