# SPDX-License-Identifier: Apache-2.0
"""LLC and memory-bandwidth limits of BE pods through resctrl (Intel RDT, Arm MPAM).

Groups under the resctrl mount (``/sys/fs/resctrl``):

* ``tidal-low``, ``tidal-mid``, ``tidal-high``: the levels a BE pod asks for with
  ``colocation.tidal.io/cache-limit`` (``volcano.sh/cache-limit`` accepted), with the policy's
  shares (``features.cacheLimits``: L3 20/30/50 %, MB 20/30/50 % by default);
* ``tidal-be``: the dynamic group of every other BE pod. Its shares follow online CPU load: the
  high level's while online pods use at most 30 % of the node's CPUs, the mid level's up to 60 %,
  the low level's above (BE pods get cache and bandwidth when online pods do not need them).

Every round the BE pods' threads (the ``tasks`` / ``cgroup.threads`` of their containers'
cgroups) that are not in their group yet are moved there, one TID per write (resctrl moves
threads, not processes; threads created later inherit the group). Switched off, or the node
leaving colocation: the ``tidal-*`` groups are removed, and the kernel moves their threads back
to the default group. ``tidal-agent restore`` does the same.

The feature (:class:`CacheLimitsFeature`, ``cache-limits``) reads the resctrl ``info`` and the
root schemata in ``sense``; its plan (:func:`group_for`, :func:`dynamic_level`,
:func:`desired_groups`, the schemata arithmetic in :mod:`.resctrl_schemata`) is intents for the
executor (:mod:`tidal.agent.executor.resctrl`): each group with its schemata, each BE pod's
containers' threads in its group; its undo removes the groups. :class:`ResctrlActuator` drives
the feature alone (tests and tools).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from tidal.agent.collector.cgroups import CgroupLayout
from tidal.agent.executor.resctrl import ResctrlExecutor, ResctrlGroup, ResctrlMembers, ResctrlRemoveGroups
from tidal.agent.executor.resctrl import remove_groups as _remove_groups
from tidal.api.policy import CacheLimits, ColocationPolicy
from tidal.api.qos import CacheLimit

from .feature import DEFAULT_OPTIONS, EMPTY, Context, Options, Plan, run_alone
from .pod_features import FeaturePodState
from .resctrl_schemata import ResctrlInfo, Schemata, parse_schemata, share_lines
from .strategy import NodeState, PodState

log = logging.getLogger(__name__)

__all__ = ["CacheLimitsFeature", "DYNAMIC_GROUP", "GROUP_PREFIX", "ResctrlActuator", "desired_groups", "dynamic_level", "group_for",
           "remove_groups"]

DEFAULT_ROOT = Path("/sys/fs/resctrl")
GROUP_PREFIX = "tidal-"
DYNAMIC_GROUP = "tidal-be"
LEVEL_GROUPS = {level: f"{GROUP_PREFIX}{level.value}" for level in CacheLimit}
#: online CPU load (percent of the node) up to which the dynamic group gets the high / mid shares
DYNAMIC_HIGH_UP_TO, DYNAMIC_MID_UP_TO = 30.0, 60.0


def dynamic_level(online_percent: float) -> CacheLimit:
    if online_percent <= DYNAMIC_HIGH_UP_TO:
        return CacheLimit.HIGH
    if online_percent <= DYNAMIC_MID_UP_TO:
        return CacheLimit.MID
    return CacheLimit.LOW


def group_for(pod: PodState) -> str | None:
    if not pod.is_be:
        return None
    level = pod.cache_limit if isinstance(pod, FeaturePodState) else None
    return LEVEL_GROUPS[level] if level is not None else DYNAMIC_GROUP


def _shares(config: CacheLimits, level: CacheLimit) -> tuple[int, int]:
    l3, mb = config.l3_percent, config.memory_bandwidth_percent
    return getattr(l3, level.value), getattr(mb, level.value)


def desired_groups(config: CacheLimits, info: ResctrlInfo, root: Schemata, online_percent: float,
                   l3: bool = True, mba: bool = True) -> dict[str, Schemata]:
    out = {}
    levels = {**{name: level for level, name in LEVEL_GROUPS.items()}, DYNAMIC_GROUP: dynamic_level(online_percent)}
    for name, level in levels.items():
        l3_share, mb_share = _shares(config, level)
        out[name] = share_lines(l3_share if l3 else None, mb_share if mba else None, info, root)
    return out


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def read_info(root: Path) -> ResctrlInfo:
    mask = _read(root / "info/L3/cbm_mask")
    gran = _read(root / "info/MB/bandwidth_gran")
    return ResctrlInfo(
        cbm_mask=int(mask.strip(), 16) if mask else None,
        min_cbm_bits=int((_read(root / "info/L3/min_cbm_bits") or "1").strip()),
        bandwidth_gran=int(gran.strip()) if gran else None,
        min_bandwidth=int((_read(root / "info/MB/min_bandwidth") or "10").strip()),
    )


def remove_groups(root: Path = DEFAULT_ROOT, remove: Callable[[Path], None] = Path.rmdir) -> list[tuple[str, str]]:
    """Remove every ``tidal-*`` group (the executor's :func:`~tidal.agent.executor.resctrl.remove_groups`)."""
    return _remove_groups(root, GROUP_PREFIX, remove)


class CacheLimitsFeature:
    """``features.cacheLimits`` where resctrl offers L3 or MBA (capabilities ``resctrl.l3``,
    ``resctrl.mba``)."""

    name = "cache-limits"

    def __init__(self, options: Options = DEFAULT_OPTIONS) -> None:
        self.root = options.resctrl_root

    @staticmethod
    def _offered(ctx: Context) -> tuple[bool, bool]:
        caps = ctx.capabilities
        return caps.get("resctrl.l3", False), caps.get("resctrl.mba", False)

    def enabled(self, ctx: Context) -> bool:
        return ctx.policy.features.cache_limits.enabled and any(self._offered(ctx))

    def sense(self, ctx: Context) -> tuple[ResctrlInfo, Schemata]:
        return read_info(self.root), parse_schemata(_read(self.root / "schemata") or "")

    def plan(self, ctx: Context) -> Plan:
        info, root_schemata = ctx.observed[self.name]
        state = ctx.state
        l3, mba = self._offered(ctx)
        online_percent = state.online_usage_millicores / (state.node_cpus * 1000) * 100
        config = ctx.policy.features.cache_limits
        writes: list = [ResctrlGroup(self.root, name, lines, GROUP_PREFIX) for name, lines in
                        desired_groups(config, info, root_schemata, online_percent, l3, mba).items()]
        for pod in state.pods:
            name = group_for(pod)
            if name is not None and pod.containers:
                files = state.layout.container_thread_files(pod.uid, pod.qos_class, (c.id for c in pod.containers))
                writes.append(ResctrlMembers(self.root, name, files, GROUP_PREFIX))
        return Plan(tuple(writes))

    def undo(self, ctx: Context) -> Plan:
        """Off: the groups go (every round while resctrl is offered: whoever made them)."""
        if ctx.state is not None and not any(self._offered(ctx)):
            return EMPTY  # no resctrl here: no I/O at all
        return Plan((ResctrlRemoveGroups(self.root, GROUP_PREFIX),))


class ResctrlActuator:
    """The feature alone: ``round`` is one agent round of cache limits (tests and tools)."""

    def __init__(self, layout: CgroupLayout, root: Path = DEFAULT_ROOT,
                 remove: Callable[[Path], None] = Path.rmdir) -> None:
        self.layout = layout
        self.root = root
        self.feature = CacheLimitsFeature(Options(resctrl_root=root))
        self.executor = ResctrlExecutor(remove)

    @property
    def moved(self) -> int:
        return self.executor.moved

    def round(self, enabled: bool, config: CacheLimits, pods: Iterable[PodState], online_percent: float,
              capabilities: Mapping[str, bool]) -> list[tuple[str, str]]:
        policy = ColocationPolicy()
        policy = replace(policy, features=replace(policy.features, cache_limits=config))
        state = NodeState(tuple(pods), 1.0, online_percent * 10, policy, dict(capabilities), self.layout)
        plan = run_alone(self.feature, Context(state, enabled))
        problems: list[tuple[str, str]] = []
        self.executor.execute(plan.writes, set(), problems)
        return problems
