"""BE block I/O caps (``features.blockIO``, :mod:`tidal.agent.qos.be_block_io`): the pure plan as
tables, the disk list on recorded sysfs trees, and the whole feature through the QoS engine on
this machine's real blkio hierarchy — the kernel's files read back, a direct read inside the BE
container slowed to the cap, everything put back when the feature is switched off."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from tidal.agent.collector.cgroups import (
    CgroupDriver,
    CgroupHierarchy,
    CgroupLayout,
    CgroupVersion,
    PodQOSClass,
)
from tidal.agent.executor.cgroupfs import device_lines
from tidal.agent.qos.be_block_io import BEBlockIO, Disk, disk_holding, node_disks, plan_block_io, share
from tidal.agent.qos.engine import QoSEngine
from tidal.agent.qos.feature import Context
from tidal.agent.qos.strategy import ContainerState, NodeState, PodState
from tidal.api.policy import BlockIO, ColocationPolicy
from tidal.api.qos import QoSLevel
from tidal_dev.testing.real_cgroups import below_own

MiB = 1 << 20
VDA, VDB = Disk("vda", "254:0"), Disk("vdb", "254:16")


def layout(version: CgroupVersion, blkio: bool = True) -> CgroupLayout:
    if version is CgroupVersion.V2:
        return CgroupLayout(CgroupHierarchy(version, Path("/cg"), Path("/cg")), CgroupDriver.CGROUPFS)
    return CgroupLayout(CgroupHierarchy(version, Path("/cg/cpuacct"), Path("/cg/memory"),
                                        Path("/cg/blkio") if blkio else None), CgroupDriver.CGROUPFS)


def pod(uid: str, level: QoSLevel | None, *containers: str, qos_class=PodQOSClass.BEST_EFFORT) -> PodState:
    return PodState(uid, qos_class, level, tuple(ContainerState(f"containerd://{c}") for c in containers))


def state(version: CgroupVersion, *pods: PodState, blkio: bool = True) -> NodeState:
    return NodeState(pods, 2.0, 0, ColocationPolicy(), {"blkio.throttle": True}, layout(version, blkio))


@pytest.mark.parametrize("cap,containers,expected", [
    (0, 3, 0),                 # not capped
    (100 * MiB, 0, 0),         # nobody to share it
    (100 * MiB, 1, 100 * MiB),
    (100 * MiB, 3, 100 * MiB // 3),
    (2, 3, 1),                 # never 0: a limit of 0 means none
])
def test_share_is_an_equal_part_of_the_node_cap_never_zero(cap, containers, expected):
    assert share(cap, containers) == expected


def files(writes) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for w in writes:
        out.setdefault(str(w.path), {})[w.file] = w.value
    return out


BE1 = pod("u1", QoSLevel.BE, "a", "b")
BE2 = pod("u2", QoSLevel.BE, "c", qos_class=PodQOSClass.BURSTABLE)
IDLE = pod("u3", QoSLevel.BE, "d", qos_class=PodQOSClass.BE_IDLE_GROUP)
LS = pod("u4", QoSLevel.LS, "e", qos_class=PodQOSClass.BURSTABLE)
PLAIN = pod("u5", None, "f")


@pytest.mark.parametrize("case,version,pods,config,disks,expected", [
    ("v1: one BE container takes the whole caps, on every disk",
     CgroupVersion.V1, (pod("u1", QoSLevel.BE, "a"), LS, PLAIN), BlockIO(enabled=True, read_iops=500), (VDA, VDB),
     {"/cg/blkio/kubepods/besteffort/podu1/a": {
         "blkio.throttle.read_bps_device": f"254:0 {100 * MiB}; 254:16 {100 * MiB}",
         "blkio.throttle.write_bps_device": f"254:0 {100 * MiB}; 254:16 {100 * MiB}",
         "blkio.throttle.read_iops_device": "254:0 500; 254:16 500"}}),
    ("v1: four BE containers (Burstable and idle-group pods too) share the caps",
     CgroupVersion.V1, (BE1, BE2, IDLE, LS), BlockIO(enabled=True, read_mib_per_second=40, write_mib_per_second=0),
     (VDA,),
     {f"/cg/blkio/{where}": {"blkio.throttle.read_bps_device": f"254:0 {10 * MiB}"} for where in (
         "kubepods/besteffort/podu1/a", "kubepods/besteffort/podu1/b", "kubepods/burstable/podu2/c",
         "tidal-be/podu3/d")}),
    ("v2: one io.max line per disk, max where not capped",
     CgroupVersion.V2, (BE1,), BlockIO(enabled=True, read_mib_per_second=20, write_mib_per_second=0, write_iops=100),
     (VDB, VDA),
     {f"/cg/kubepods/besteffort/podu1/{c}": {"io.max": (
         f"254:0 rbps={10 * MiB} wbps=max riops=max wiops=50; 254:16 rbps={10 * MiB} wbps=max riops=max wiops=50")}
      for c in "ab"}),
    ("nothing capped: no file", CgroupVersion.V2, (BE1,),
     BlockIO(enabled=True, read_mib_per_second=0, write_mib_per_second=0), (VDA,), {}),
    ("no disk found: no file", CgroupVersion.V1, (BE1,), BlockIO(enabled=True), (), {}),
    ("no BE pod: no file", CgroupVersion.V1, (LS, PLAIN), BlockIO(enabled=True), (VDA,), {}),
])
def test_plan(case, version, pods, config, disks, expected):
    assert files(plan_block_io(state(version, *pods), config, disks)) == expected, case


def test_no_blkio_hierarchy_plans_nothing():
    assert plan_block_io(state(CgroupVersion.V1, BE1, blkio=False), BlockIO(enabled=True), (VDA,)) == []


def test_plan_values_read_as_the_kernel_lists_them():
    """A plan's value is the kernel's lines in the executor's normal form: sorted by device."""
    value = files(plan_block_io(state(CgroupVersion.V1, pod("u1", QoSLevel.BE, "a")), BlockIO(enabled=True),
                                (VDB, VDA)))["/cg/blkio/kubepods/besteffort/podu1/a"]
    lines = device_lines(value["blkio.throttle.read_bps_device"])
    assert list(lines) == ["254:0", "254:16"] and set(lines.values()) == {str(100 * MiB)}


def test_node_disks_are_whole_disks_with_a_driver(tmp_path):
    block = tmp_path / "block"
    for name, dev, driver in (("vda", "254:0", True), ("loop0", "7:0", False), ("zram0", "253:0", False),
                              ("nvme0n1", "259:0", True), ("odd", "not-a-device", True)):
        (block / name).mkdir(parents=True)
        (block / name / "dev").write_text(dev + "\n")
        if driver:
            (block / name / "device").mkdir()
    assert node_disks(tmp_path) == (Disk("nvme0n1", "259:0"), Disk("vda", "254:0"))
    assert node_disks(tmp_path / "nowhere") == ()


def test_switched_on_only_where_the_node_can_throttle():
    feature = BEBlockIO()
    on = replace(ColocationPolicy(), features=replace(ColocationPolicy().features, block_io=BlockIO(enabled=True)))
    for policy, caps, expected in ((on, {"blkio.throttle": True}, True), (on, {"blkio.throttle": False}, False),
                                   (on, {}, False), (ColocationPolicy(), {"blkio.throttle": True}, False)):
        node = NodeState((), 2.0, 0, policy, caps, layout(CgroupVersion.V1))
        assert feature.enabled(Context(node)) is expected, (policy.features.block_io, caps)


def test_the_caps_are_reported_once_per_change_and_a_node_without_disks_is_warned_about():
    feature = BEBlockIO()
    on = replace(ColocationPolicy(), features=replace(ColocationPolicy().features, block_io=BlockIO(enabled=True)))

    def reports(disks, *pods):
        ctx = Context(NodeState(pods, 2.0, 0, on, {"blkio.throttle": True}, layout(CgroupVersion.V1)),
                      observed={feature.name: disks})
        return [(r.level, r.message) for r in feature.plan(ctx).decisions]

    assert reports((VDA,), BE1) == [(logging.INFO, "block I/O of BE pods capped on vda (254:0): read 100 MiB/s, "
                                                   "write 100 MiB/s per disk, shared by 2 BE container(s)")]
    assert reports((VDA,), BE1, LS) == []  # nothing changed
    assert reports((VDA,), BE1, BE2)[0][1].endswith("shared by 3 BE container(s)")
    assert reports((), BE1) == [(logging.WARNING, "block I/O of BE pods not capped: no disk with a driver in "
                                                  "/sys/block")]
    assert reports((), LS) == []  # no BE container: nothing to say


# --- the real path: this machine's blkio hierarchy -------------------------------------------


READER = r"""
import os, sys, time
with open(sys.argv[2], "w") as f:
    f.write(str(os.getpid()))
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)
import mmap
buf = mmap.mmap(-1, 1 << 20)
start, total = time.monotonic(), 0
while total < int(sys.argv[3]):
    n = os.readv(fd, [buf])
    if n <= 0:
        break
    total += n
print(total, time.monotonic() - start)
"""


def direct_read(path: Path, cgroup: Path, amount: int) -> tuple[int, float]:
    out = subprocess.run([sys.executable, "-c", READER, str(path), str(cgroup / "cgroup.procs"), str(amount)],
                         capture_output=True, text=True, timeout=120, check=True).stdout.split()
    return int(out[0]), float(out[1])


@pytest.fixture
def blkio_root(hierarchy: CgroupHierarchy) -> Path:
    if hierarchy.version is not CgroupVersion.V1 or hierarchy.blkio_root is None:
        pytest.skip("these tests build a cgroup v1 blkio tree (v2's io.max plans are covered by the tables)")
    return below_own(hierarchy.blkio_root, "blkio")


def test_be_containers_are_throttled_on_the_real_disk_and_put_back_when_off(hierarchy, blkio_root, real, tmp_path):
    data = Path("/var/tmp") / f"{real.name}.img"
    disk = disk_holding(data.parent)
    if disk is None:
        pytest.skip(f"{data.parent} is not on a whole disk of /sys/block (a partition or a virtual device)")
    node = CgroupLayout(CgroupHierarchy(CgroupVersion.V1, hierarchy.cpu_root, hierarchy.memory_root, blkio_root),
                        CgroupDriver.CGROUPFS, kubelet_root=f"/{real.name}")
    be_a, be_b = pod("u1", QoSLevel.BE, "a"), pod("u2", QoSLevel.BE, "b")
    ls = pod("u3", QoSLevel.LS, "c", qos_class=PodQOSClass.BURSTABLE)
    dirs = {p.uid: real.make(node.blkio_dir(node.container_relpath(p.uid, p.qos_class, p.containers[0].id)))
            for p in (be_a, be_b, ls)}
    off = ColocationPolicy()
    on = replace(off, features=replace(off.features, block_io=BlockIO(enabled=True, read_mib_per_second=8,
                                                                       write_mib_per_second=0)))
    engine = QoSEngine(tmp_path / "journal.json", features=[BEBlockIO()])
    caps = {"blkio.throttle": True}

    def run(policy, *pods, now=0.0):
        return engine.run(Context(NodeState(pods, 2.0, 0, policy, caps, node), now=now))

    def limits(uid: str) -> dict[str, str]:
        return device_lines((dirs[uid] / "blkio.throttle.read_bps_device").read_text())

    try:
        with open(data, "wb") as f:
            for _ in range(24):
                f.write(os.urandom(MiB))
            f.flush()
            os.fsync(f.fileno())
        # a limit someone else set on another device (a loop device) is the file's original
        loop = Path("/sys/block/loop0/dev")
        foreign = loop.read_text().strip() if loop.exists() else None
        if foreign:
            (dirs["u1"] / "blkio.throttle.read_bps_device").write_text(f"{foreign} 1234")
        out = run(on, be_a, be_b, ls)
        assert out.changed == {"be-block-io": 2}, out
        assert limits("u1") == limits("u2") == {disk.device: str(4 * MiB)}  # 8 MiB/s, shared by two
        assert limits("u3") == {}  # an LS container keeps its disk
        assert run(on, be_a, be_b, ls, now=1.0).changed == {}  # idempotent
        assert run(on, be_a, ls, now=2.0).changed == {"be-block-io": 1}  # one BE container left: all of it
        assert limits("u1") == {disk.device: str(8 * MiB)}

        # the kernel holds the BE container to its cap: 24 MiB at 8 MiB/s take 2 s and more (the
        # first slice's allowance aside); a load on the machine can only make it slower
        read, seconds = direct_read(data, dirs["u1"], 24 * MiB)
        assert read == 24 * MiB and seconds >= 1.5, (read, seconds)

        assert run(off, be_a, ls, now=3.0).changed == {}
        # put back by the journal: the original line, or none (no limit)
        assert limits("u1") == ({foreign: "1234"} if foreign else {}) and limits("u2") == {}
        assert engine.journal.originals == {}
    finally:
        data.unlink(missing_ok=True)
