# SPDX-License-Identifier: Apache-2.0
"""Where a pod's cgroups are: cgroup v1/v2 detection and the kubelet's naming of pod cgroups.

The kubelet names cgroups as a list of components (its ``CgroupName``) and renders that list for
its cgroup driver:

* cgroupfs: components joined by ``/``: ``kubepods/burstable/pod<uid>``;
* systemd: every component has ``-`` escaped to ``_``, then each prefix becomes a slice:
  ``kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice``.

Guaranteed pods sit directly under ``kubepods``; Burstable and BestEffort pods under their QoS
cgroup. Container cgroups are one level below the pod and named by the container runtime:

================  ===========================  ==========================
runtime (scheme)  cgroupfs driver              systemd driver
================  ===========================  ==========================
``containerd://`` ``<id>``                     ``cri-containerd-<id>.scope``
``docker://``     ``<id>``                     ``docker-<id>.scope``
``cri-o://``      ``crio-<id>``                ``crio-<id>.scope``
================  ===========================  ==========================

Everything here except ``detect_*``, ``find_container_cgroup`` and ``discover_pod_cgroups`` is
pure: paths are computed, never looked at. The filesystem root (``/sys/fs/cgroup`` by default)
is a parameter everywhere so that tests can point it at recorded trees.

Cgroup version detection looks at files, not mount types, for the same reason:

* v2 (unified): ``<root>/cgroup.controllers`` exists (``memory`` must be listed in it);
* v1 (legacy or hybrid): a cpuacct hierarchy (``<root>/cpu,cpuacct``, ``<root>/cpuacct,cpu`` or
  ``<root>/cpuacct``, holding ``cpuacct.usage``) and ``<root>/memory`` (holding
  ``memory.usage_in_bytes``). A hybrid system's ``<root>/unified`` cgroup2 mount is then ignored:
  the controllers Tidal reads are attached to v1;
* v2 mounted at ``<root>/unified`` with the memory controller attached there: v2 at that path.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

__all__ = [
    "BE_IDLE_GROUP",
    "DEFAULT_CGROUP_ROOT",
    "CgroupVersion",
    "CgroupDriver",
    "PodQOSClass",
    "CgroupLayoutError",
    "ContainerID",
    "CgroupHierarchy",
    "CgroupLayout",
    "DiscoveredPod",
    "pod_uids_in",
    "kubelet_root_components",
    "cgroup_name_to_relpath",
    "kubepods_relpath",
    "qos_cgroup_relpath",
    "pod_cgroup_relpath",
    "container_cgroup_relpath",
    "detect_hierarchy",
    "detect_driver",
    "detect_layout",
    "find_container_cgroup",
    "discover_pod_cgroups",
]

DEFAULT_CGROUP_ROOT = Path("/sys/fs/cgroup")

#: v1 mount directories that can hold the cpuacct controller, most common first.
V1_CPUACCT_DIRS = ("cpu,cpuacct", "cpuacct,cpu", "cpuacct")
V1_MEMORY_DIR = "memory"
V1_BLKIO_DIR = "blkio"
#: Where hybrid systems mount cgroup2 next to the v1 controllers.
HYBRID_UNIFIED_DIR = "unified"


class CgroupVersion(enum.StrEnum):
    V1 = "v1"
    V2 = "v2"


class CgroupDriver(enum.StrEnum):
    """The kubelet's ``cgroupDriver``."""

    CGROUPFS = "cgroupfs"
    SYSTEMD = "systemd"


class PodQOSClass(enum.StrEnum):
    """Kubernetes' QoS class of a pod (``status.qosClass``), which decides its cgroup parent;
    and ``BE_IDLE_GROUP``, not a Kubernetes class: a BestEffort pod whose containers Tidal's NRI
    plugin created in the BE idle group (``tidal-be`` beside ``kubepods``, :data:`BE_IDLE_GROUP`)
    instead of below its pod cgroup, which then holds only the pod's sandbox."""

    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"
    BE_IDLE_GROUP = "be-idle-group"  # not a Kubernetes class: never in a pod's status


class CgroupLayoutError(Exception):
    """The cgroup filesystem does not look like anything the collector can read."""


# Kubernetes UIDs are UUIDs; static pods get a hex hash. Either way: no "/", no "..".
_UID_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]*")
_CONTAINER_ID_RE = re.compile(
    r"(?P<runtime>[a-z0-9][a-z0-9.+-]*)://(?P<id>[0-9A-Za-z][0-9A-Za-z_.-]*)"
)
_COMPONENT_RE = re.compile(r"[0-9A-Za-z_][0-9A-Za-z_.-]*")

_KUBEPODS = "kubepods"
#: The BE idle group's cgroup name at the hierarchy's root, beside ``kubepods`` on a kubelet
#: with the default cgroupRoot (cgroupfs ``/tidal-be``, systemd ``tidal_be.slice``): ``cpu.idle
#: = 1`` at the level where the online pods' ``kubepods`` and the node's daemons compete, which
#: no cgroup below ``kubepods`` can be — nor one below another cgroup that competes there, as a
#: kubelet's own cgroupRoot may (measured: docs/node-engine.md), so the root it is.
BE_IDLE_GROUP = "tidal-be"
_QOS_COMPONENT = {
    PodQOSClass.GUARANTEED: None,
    PodQOSClass.BURSTABLE: "burstable",
    PodQOSClass.BEST_EFFORT: "besteffort",
}


@dataclass(frozen=True)
class ContainerID:
    """A container ID as in ``status.containerStatuses[].containerID``: ``<runtime>://<id>``."""

    runtime: str
    id: str

    @classmethod
    def parse(cls, text: str) -> ContainerID:
        match = _CONTAINER_ID_RE.fullmatch(text.strip())
        if match is None:
            raise ValueError(
                f"container ID {text!r}: expected '<runtime>://<id>', e.g. 'containerd://3f2a...'"
            )
        return cls(runtime=match["runtime"], id=match["id"])

    def __str__(self) -> str:
        return f"{self.runtime}://{self.id}"


# --- The kubelet's cgroup names (pure) ---------------------------------------------------------


def _check_uid(uid: str) -> str:
    if not _UID_RE.fullmatch(uid):
        raise ValueError(f"pod UID {uid!r}: expected letters, digits and '-' (a UUID)")
    return uid


def kubelet_root_components(kubelet_root: str, driver: CgroupDriver) -> tuple[str, ...]:
    """The kubelet's ``cgroupRoot`` setting as name components (``"/"`` is the default: none).

    cgroupfs: ``/a/b`` -> ``("a", "b")``. systemd: the last slice names the whole chain, as in
    the kubelet's ``ParseSystemdToCgroupName``: ``/a.slice/a-b.slice`` -> ``("a", "b")``.
    """
    parts = [p for p in kubelet_root.strip().split("/") if p]
    if driver is CgroupDriver.CGROUPFS:
        components = parts
    elif not parts:
        components = []
    else:
        last = parts[-1]
        if not last.endswith(".slice"):
            raise ValueError(
                f"kubelet cgroup root {kubelet_root!r}: with the systemd driver it must name a "
                "slice, e.g. /kubelet.slice"
            )
        components = [c.replace("_", "-") for c in last.removesuffix(".slice").split("-")]
    for component in components:
        if not _COMPONENT_RE.fullmatch(component):
            raise ValueError(f"kubelet cgroup root {kubelet_root!r}: bad component {component!r}")
    return tuple(components)


def cgroup_name_to_relpath(components: tuple[str, ...], driver: CgroupDriver) -> PurePosixPath:
    """Render a kubelet cgroup name, relative to the hierarchy root (``.`` for no components)."""
    if driver is CgroupDriver.CGROUPFS:
        return PurePosixPath(*components) if components else PurePosixPath(".")
    escaped = [c.replace("-", "_") for c in components]
    slices = ["-".join(escaped[: i + 1]) + ".slice" for i in range(len(escaped))]
    return PurePosixPath(*slices) if slices else PurePosixPath(".")


def _kubepods_name(kubelet_root: str, driver: CgroupDriver) -> tuple[str, ...]:
    return (*kubelet_root_components(kubelet_root, driver), _KUBEPODS)


def _qos_name(qos_class: PodQOSClass, driver: CgroupDriver, kubelet_root: str) -> tuple[str, ...]:
    if PodQOSClass(qos_class) is PodQOSClass.BE_IDLE_GROUP:
        return (BE_IDLE_GROUP,)  # at the hierarchy's root whatever the kubelet's cgroupRoot
    name = _kubepods_name(kubelet_root, driver)
    component = _QOS_COMPONENT[PodQOSClass(qos_class)]
    return name if component is None else (*name, component)


def kubepods_relpath(driver: CgroupDriver, kubelet_root: str = "/") -> PurePosixPath:
    """The parent of all pod cgroups: ``kubepods`` or ``kubepods.slice``."""
    return cgroup_name_to_relpath(_kubepods_name(kubelet_root, driver), driver)


def qos_cgroup_relpath(
    qos_class: PodQOSClass, driver: CgroupDriver, kubelet_root: str = "/"
) -> PurePosixPath:
    """The parent of the pods of a QoS class (``kubepods`` itself for Guaranteed)."""
    return cgroup_name_to_relpath(_qos_name(qos_class, driver, kubelet_root), driver)


def pod_cgroup_relpath(
    uid: str, qos_class: PodQOSClass, driver: CgroupDriver, kubelet_root: str = "/"
) -> PurePosixPath:
    """A pod's cgroup relative to the hierarchy root, e.g. ``kubepods/burstable/pod<uid>``."""
    name = (*_qos_name(qos_class, driver, kubelet_root), "pod" + _check_uid(uid))
    return cgroup_name_to_relpath(name, driver)


def container_cgroup_relpath(
    uid: str,
    qos_class: PodQOSClass,
    container_id: str | ContainerID,
    driver: CgroupDriver,
    kubelet_root: str = "/",
) -> PurePosixPath:
    """A container's cgroup relative to the hierarchy root (see the module table).

    A runtime other than containerd, docker and cri-o gets the generic forms ``<id>`` (cgroupfs)
    and ``<runtime>-<id>.scope`` (systemd).
    """
    cid = container_id if isinstance(container_id, ContainerID) else ContainerID.parse(container_id)
    pod = pod_cgroup_relpath(uid, qos_class, driver, kubelet_root)
    if driver is CgroupDriver.SYSTEMD:
        prefix = {"containerd": "cri-containerd", "cri-o": "crio"}.get(cid.runtime, cid.runtime)
        return pod / f"{prefix}-{cid.id}.scope"
    if cid.runtime == "cri-o":
        return pod / f"crio-{cid.id}"
    return pod / cid.id


# --- The hierarchy and the layout ------------------------------------------------------------


@dataclass(frozen=True)
class CgroupHierarchy:
    """Where the controllers the collector reads are mounted.

    ``cpu_root`` holds the CPU usage counter (v1: the cpuacct hierarchy, ``cpuacct.usage``; v2:
    the unified hierarchy, ``cpu.stat``); ``memory_root`` the memory files. On v2 both are the
    same directory. ``blkio_root``: v1's blkio hierarchy when it is mounted (block I/O
    throttling); on v2 the unified root holds the io controller's files and it is not used.
    """

    version: CgroupVersion
    cpu_root: Path
    memory_root: Path
    blkio_root: Path | None = None


@dataclass(frozen=True)
class CgroupLayout:
    """A hierarchy plus the kubelet's driver and ``cgroupRoot``: enough to find any pod."""

    hierarchy: CgroupHierarchy
    driver: CgroupDriver
    kubelet_root: str = "/"

    @property
    def version(self) -> CgroupVersion:
        return self.hierarchy.version

    def cpu_dir(self, relpath: PurePosixPath) -> Path:
        return self.hierarchy.cpu_root / relpath

    def memory_dir(self, relpath: PurePosixPath) -> Path:
        return self.hierarchy.memory_root / relpath

    @property
    def blkio_root(self) -> Path | None:
        """Where block I/O throttling files are: v1's blkio hierarchy (None: not mounted), v2's
        unified root."""
        return self.hierarchy.memory_root if self.version is CgroupVersion.V2 else self.hierarchy.blkio_root

    def blkio_dir(self, relpath: PurePosixPath) -> Path | None:
        root = self.blkio_root
        return None if root is None else root / relpath

    def kubepods_relpath(self) -> PurePosixPath:
        return kubepods_relpath(self.driver, self.kubelet_root)

    def qos_relpath(self, qos_class: PodQOSClass) -> PurePosixPath:
        return qos_cgroup_relpath(qos_class, self.driver, self.kubelet_root)

    def pod_relpath(self, uid: str, qos_class: PodQOSClass) -> PurePosixPath:
        return pod_cgroup_relpath(uid, qos_class, self.driver, self.kubelet_root)

    def container_relpath(
        self, uid: str, qos_class: PodQOSClass, container_id: str | ContainerID
    ) -> PurePosixPath:
        return container_cgroup_relpath(
            uid, qos_class, container_id, self.driver, self.kubelet_root
        )

    @property
    def threads_file(self) -> str:
        """The file listing a cgroup's threads: ``tasks`` on v1, ``cgroup.threads`` on v2."""
        return "tasks" if self.version is CgroupVersion.V1 else "cgroup.threads"

    def container_thread_files(
        self, uid: str, qos_class: PodQOSClass, container_ids: Iterable[str | ContainerID]
    ) -> tuple[Path, ...]:
        """The thread lists of a pod's containers (cpu hierarchy)."""
        return tuple(self.cpu_dir(self.container_relpath(uid, qos_class, c)) / self.threads_file
                     for c in container_ids)


# --- Discovery (looks at the given root) ------------------------------------------------------


def _controllers(path: Path) -> set[str]:
    return set(path.read_text(encoding="ascii").split())


def detect_hierarchy(root: Path | str = DEFAULT_CGROUP_ROOT) -> CgroupHierarchy:
    """Find the cgroup version and controller directories under ``root`` (see the module doc)."""
    root = Path(root)
    unified_marker = root / "cgroup.controllers"
    if unified_marker.is_file():
        if "memory" not in _controllers(unified_marker):
            raise CgroupLayoutError(
                f"{unified_marker}: cgroup v2 without the memory controller; "
                "cannot read memory usage"
            )
        return CgroupHierarchy(CgroupVersion.V2, root, root)

    cpuacct = next(
        (root / d for d in V1_CPUACCT_DIRS if (root / d / "cpuacct.usage").is_file()), None
    )
    memory = root / V1_MEMORY_DIR
    if cpuacct is not None and (memory / "memory.usage_in_bytes").is_file():
        blkio = root / V1_BLKIO_DIR
        return CgroupHierarchy(CgroupVersion.V1, cpuacct, memory,
                               blkio if (blkio / "blkio.throttle.read_bps_device").is_file() else None)

    hybrid_marker = root / HYBRID_UNIFIED_DIR / "cgroup.controllers"
    if hybrid_marker.is_file() and "memory" in _controllers(hybrid_marker):
        return CgroupHierarchy(CgroupVersion.V2, hybrid_marker.parent, hybrid_marker.parent)

    v1_cpu = " or ".join(str(root / d / "cpuacct.usage") for d in V1_CPUACCT_DIRS)
    raise CgroupLayoutError(
        f"no cgroup hierarchy with CPU accounting and memory under {root}: looked for "
        f"{unified_marker} (v2), {v1_cpu} with {memory / 'memory.usage_in_bytes'} (v1), "
        f"and {hybrid_marker} listing memory"
    )


def detect_driver(hierarchy: CgroupHierarchy, kubelet_root: str = "/") -> CgroupDriver:
    """The kubelet's cgroup driver, from which of ``kubepods`` / ``kubepods.slice`` exists."""
    found = []
    looked = []
    for driver in CgroupDriver:
        try:
            path = hierarchy.memory_root / kubepods_relpath(driver, kubelet_root)
        except ValueError:  # kubelet_root not valid for this driver
            continue
        looked.append(str(path))
        if path.is_dir():
            found.append(driver)
    if len(found) == 1:
        return found[0]
    if not found:
        raise CgroupLayoutError(f"no kubelet pod cgroups: none of {', '.join(looked)} exists")
    raise CgroupLayoutError(
        f"both {' and '.join(looked)} exist; pass the kubelet's cgroupDriver explicitly"
    )


def detect_layout(
    root: Path | str = DEFAULT_CGROUP_ROOT,
    *,
    driver: CgroupDriver | None = None,
    kubelet_root: str = "/",
) -> CgroupLayout:
    """Hierarchy and driver of the node under ``root``; ``driver`` skips driver detection."""
    hierarchy = detect_hierarchy(root)
    if driver is None:
        driver = detect_driver(hierarchy, kubelet_root)
    return CgroupLayout(hierarchy, CgroupDriver(driver), kubelet_root)


def find_container_cgroup(
    layout: CgroupLayout, uid: str, qos_class: PodQOSClass, container_id: str | ContainerID
) -> PurePosixPath | None:
    """The container's cgroup relative path if it exists (in the memory hierarchy), else None."""
    relpath = layout.container_relpath(uid, qos_class, container_id)
    return relpath if layout.memory_dir(relpath).is_dir() else None


@dataclass(frozen=True)
class DiscoveredPod:
    uid: str
    qos_class: PodQOSClass
    relpath: PurePosixPath


def _pod_uid_from_dir(name: str, parent_name: tuple[str, ...], driver: CgroupDriver) -> str | None:
    if driver is CgroupDriver.CGROUPFS:
        return name[3:] if name.startswith("pod") and _UID_RE.fullmatch(name[3:]) else None
    prefix = "-".join(c.replace("-", "_") for c in parent_name) + "-pod"
    if not (name.startswith(prefix) and name.endswith(".slice")):
        return None
    uid = name[len(prefix) : -len(".slice")].replace("_", "-")
    return uid if _UID_RE.fullmatch(uid) else None


def pod_uids_in(layout: CgroupLayout, qos_class: PodQOSClass) -> list[str]:
    """The UIDs of the pod cgroups present below ``qos_class``'s parent in the memory hierarchy
    (one directory listing; none when the parent does not exist)."""
    parent_name = _qos_name(qos_class, layout.driver, layout.kubelet_root)
    parent = layout.memory_dir(cgroup_name_to_relpath(parent_name, layout.driver))
    uids = (_pod_uid_from_dir(entry.name, parent_name, layout.driver) for entry in _subdirs(parent))
    return [uid for uid in uids if uid is not None]


def discover_pod_cgroups(layout: CgroupLayout) -> dict[str, DiscoveredPod]:
    """Every pod cgroup present in the memory hierarchy, by UID (for diagnostics and tests)."""
    return {uid: DiscoveredPod(uid, qos_class, layout.pod_relpath(uid, qos_class))
            for qos_class in PodQOSClass for uid in pod_uids_in(layout, qos_class)}


def _subdirs(path: Path) -> Iterator[Path]:
    try:
        entries = sorted(path.iterdir())
    except FileNotFoundError:
        return
    yield from (e for e in entries if e.is_dir())
