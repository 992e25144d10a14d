# SPDX-License-Identifier: Apache-2.0
"""Which ColocationPolicy sections a node can run, from the capabilities its agent probed (pure).

The capability probe (``tidal.agent.qos.capabilities``) names what the kernel and hardware offer
(``cpu.cfs_burst``, ``psi``, ``resctrl.l3`` ...); the policy names features by section
(``features.cpuBurst`` ...). `FEATURE_NEEDS` is the one mapping between the two: the agent uses
it to report a switched-on feature it cannot run (``status.policy.problems``), the console's
node view to say, per section, whether the node supports it and why not; the web console only
displays that answer.

A section needs every group of capabilities, and in a group any one of them (cache limits work
with L3 allocation, memory bandwidth allocation or both). Sections not listed here need nothing
beyond cgroups (or degrade on their own, e.g. memory reclaim falls back to ``memory.high``).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["FEATURE_NEEDS", "SUPPORT_UNKNOWN_REASON", "feature_support"]

#: policy section (path under ``spec``; or a boolean switch's path) -> what it needs: every
#: group, and in a group any one capability, by the names the agent's probe writes.
FEATURE_NEEDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "beIsolation.cpuInterference": (("schedstat",),),
    # a switch, not a section: BE containers in the BE idle group need the runtime's NRI (the
    # plugin creates them there) and cpu.idle (without it the group is not idle)
    "beIsolation.cpuPriority.idleGroup": (("cpu.idle",), ("nri",)),
    "features.cpuBurst": (("cpu.cfs_burst",),),
    "features.psiInterference": (("psi",),),
    "features.cacheLimits": (("resctrl.l3", "resctrl.mba"),),
    "features.numaAffinity": (("numa",),),
    "features.egressBandwidth": (("tc",),),
    "features.blockIO": (("blkio.throttle",),),
    "features.onlineSchedSlice": (("sched.slice",),),
    # either file is worth writing (cpu.qos_level for every level, memory.qos_level for BE)
    "features.kernelQoSLevel": (("openeuler.cpu.qos_level", "openeuler.memory.qos_level"),),
}

SUPPORT_UNKNOWN_REASON = "not reported by the node's agent"


def _field(capability: Any, name: str) -> Any:
    if isinstance(capability, Mapping):
        return capability.get(name)
    return getattr(capability, name, None)


def feature_support(capabilities: Iterable[Any] | None) -> list[dict[str, Any]]:
    """Per policy section of `FEATURE_NEEDS`, whether a node supports it and why not.

    ``capabilities`` are the node's probed capabilities: ``{name, supported, reason}`` dicts as
    in ``NodeProfile.status.capabilities``, or objects with those attributes. Each answer is
    ``{"section": "spec.features.cpuBurst", "supported": bool | None, "reason": str,
    "needs": [capability names]}``: ``supported`` is None when the agent reported none of a
    group's capabilities (an older agent, or no NodeProfile yet), False when it reported them
    all unsupported — ``reason`` then carries the probe's reasons, ``name: reason`` each.
    """
    probed = {_field(c, "name"): c for c in capabilities or ()}
    answers = []
    for section, needs in FEATURE_NEEDS.items():
        unsupported: list[str] = []
        unknown: list[str] = []
        for group in needs:
            reported = [probed[name] for name in group if name in probed]
            if not reported:
                unknown.extend(group)
            elif not any(_field(c, "supported") is True for c in reported):
                unsupported += [f"{_field(c, 'name')}: {_field(c, 'reason') or 'unsupported'}" for c in reported]
        if unsupported:
            supported, reason = False, "; ".join(unsupported)
        elif unknown:
            supported, reason = None, f"{SUPPORT_UNKNOWN_REASON}: {', '.join(unknown)}"
        else:
            supported, reason = True, ""
        answers.append({"section": f"spec.{section}", "supported": supported, "reason": reason,
                        "needs": [name for group in needs for name in group]})
    return answers
