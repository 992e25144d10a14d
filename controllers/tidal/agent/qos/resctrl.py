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

Pure parts: :func:`group_for`, :func:`dynamic_level`, :func:`desired_groups` (and the schemata
arithmetic in :mod:`.resctrl_schemata`); I/O in :class:`ResctrlActuator`.
"""
from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tidal.agent.collector.cgroups import CgroupLayout, CgroupVersion
from tidal.api.policy import CacheLimits
from tidal.api.qos import CacheLimit

from .pod_features import FeaturePodState
from .resctrl_schemata import ResctrlInfo, Schemata, parse_schemata, render, satisfied, share_lines
from .strategy import PodState

log = logging.getLogger(__name__)

__all__ = ["DYNAMIC_GROUP", "GROUP_PREFIX", "ResctrlActuator", "desired_groups", "dynamic_level", "group_for",
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
    """Remove every ``tidal-*`` group (its threads return to the default group). ``remove`` is
    ``rmdir`` (a resctrl group directory goes with its files); tests of recorded trees pass
    ``shutil.rmtree``."""
    problems = []
    try:
        groups = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(GROUP_PREFIX)]
    except OSError:
        return []
    for group in groups:
        try:
            remove(group)
            log.info("resctrl group %s removed", group.name)
        except OSError as err:
            problems.append((str(group), err.strerror or str(err)))
    return problems


@dataclass
class ResctrlActuator:
    layout: CgroupLayout
    root: Path = DEFAULT_ROOT
    remove: Callable[[Path], None] = Path.rmdir

    def __post_init__(self) -> None:
        self.moved = 0

    def threads(self, pod: PodState) -> set[str]:
        name = "tasks" if self.layout.version is CgroupVersion.V1 else "cgroup.threads"
        out: set[str] = set()
        for c in pod.containers:
            text = _read(self.layout.cpu_dir(self.layout.container_relpath(pod.uid, pod.qos_class, c.id)) / name)
            out.update((text or "").split())
        return out

    def round(self, enabled: bool, config: CacheLimits, pods: Iterable[PodState], online_percent: float,
              capabilities: Mapping[str, bool]) -> list[tuple[str, str]]:
        l3, mba = capabilities.get("resctrl.l3", False), capabilities.get("resctrl.mba", False)
        if not (enabled and config.enabled and (l3 or mba)):
            return remove_groups(self.root, self.remove)
        info = read_info(self.root)
        root_schemata = parse_schemata(_read(self.root / "schemata") or "")
        problems = []
        for name, lines in desired_groups(config, info, root_schemata, online_percent, l3, mba).items():
            group = self.root / name
            try:
                group.mkdir(exist_ok=True)
                if not satisfied(parse_schemata(_read(group / "schemata") or ""), lines):
                    (group / "schemata").write_text(render(lines))
                    log.info("resctrl group %s: %s", name, render(lines).strip().replace("\n", " "))
            except (OSError, ValueError) as err:
                problems.append((str(group / "schemata"), str(getattr(err, "strerror", None) or err)))
        members: dict[str, set[str]] = {}
        for pod in pods:
            name = group_for(pod)
            if name is None:
                continue
            wanted = self.threads(pod)
            if not wanted:
                continue
            if name not in members:
                members[name] = set((_read(self.root / name / "tasks") or "").split())
            for tid in sorted(wanted - members[name], key=int):
                try:
                    with open(self.root / name / "tasks", "a", encoding="ascii") as f:
                        f.write(tid)
                    members[name].add(tid)
                    self.moved += 1
                except OSError as err:
                    if err.errno != errno.ESRCH:  # thread exited meanwhile: nothing to move
                        problems.append((str(self.root / name / "tasks"), err.strerror or str(err)))
        return problems


def resctrl_round(node_qos, online_millicores: float, enabled: bool) -> None:
    """One round for :class:`~.node_qos.NodeQoS`; no I/O at all where resctrl is not mounted."""
    caps = node_qos.capabilities
    if not (caps.get("resctrl.l3") or caps.get("resctrl.mba")):
        return
    online_percent = online_millicores / (node_qos.node_cpus * 1000) * 100
    for file, problem in node_qos.resctrl.round(enabled, node_qos.policy.features.cache_limits,
                                                node_qos._states.values(), online_percent, caps):
        log.warning("resctrl: %s: %s", file, problem)
