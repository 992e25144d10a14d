"""BE block I/O caps (``features.blockIO``, :mod:`tidal.agent.qos.be_block_io`): the pure plan as
tables, the disk list on recorded sysfs trees, and the whole feature through the QoS engine on
this machine's real blkio hierarchy — the kernel's files read back, a direct read inside the BE
container slowed to the cap, everything put back when the feature is switched off."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from tidal.agent.collector.cgroups import (
    CgroupDriver,
    CgroupHierarchy,
    CgroupLayout,
    CgroupVersion,
    PodQOSClass,
)
from tidal.agent.executor.cgroupfs import device_lines
from tidal.agent.qos.be_block_io import (
    BEBlockIO,
    Disk,
    Observed,
    allot,
    counter_files,
    demand,
    disk_holding,
    large_requests,
    node_disks,
    parse_counts,
    plan_block_io,
    rates,
)
from tidal.agent.qos.engine import QoSEngine
from tidal.agent.qos.feature import Context, Gauge, Options, Report
from tidal.agent.qos.strategy import ContainerState, NodeState, PodState
from tidal.api.policy import BlockIO, ColocationPolicy
from tidal.api.qos import QoSLevel
from tidal_dev.lab.pytest_plugin import wait_for
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
def test_with_nothing_known_each_gets_an_equal_part_of_the_node_cap_never_zero(cap, containers, expected):
    assert allot(cap, [None] * containers) == [expected] * containers


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
    """Nothing known of what the containers use (the first round): equal shares."""
    assert files(plan_block_io(state(version, *pods), config, disks)[0]) == expected, case


def test_no_blkio_hierarchy_plans_nothing():
    assert plan_block_io(state(CgroupVersion.V1, BE1, blkio=False), BlockIO(enabled=True), (VDA,)) == ([], {})


@pytest.mark.parametrize("used,held,expected", [
    (None, 10 * MiB, None),          # not known (new container, or the agent just started)
    (0.0, None, None),               # nothing held yet: the first round's equal share
    (9.5 * MiB, 10 * MiB, None),     # held by its cap: wants more
    (9 * MiB, 10 * MiB, None),       # SATURATED (90 %) counts as held
    (4 * MiB, 10 * MiB, 6 * MiB),    # below: what it used and half again
    (0.0, 10 * MiB, 0.0),            # idle (allot gives it the floor)
])
def test_demand_from_what_a_container_used_of_its_cap(used, held, expected):
    assert demand(used, held) == expected


@pytest.mark.parametrize("case,cap,demands,expected", [
    ("nobody known: equal", 100, [None] * 4, [25] * 4),
    ("one reading, three idle: the idle keep an eighth of an equal part",
     800, [None, 0.0, 0.0, 0.0], [725, 25, 25, 25]),
    ("max-min: a small demand is met, the rest shared", 100, [None, None, 10.0, 0.0], [43, 43, 10, 3]),
    ("a demand above the equal part is met when the rest allows", 100, [None, 30.0, 0.0, 0.0], [63, 30, 3, 3]),
    ("nobody wants it all: the rest spread over all", 100, [10.0, 20.0], [45, 55]),
    ("demands above the cap: max-min between them", 100, [80.0, 70.0], [50, 50]),
    ("one container gets the whole cap whatever it used", 100, [0.0], [100]),
    ("not capped", 0, [None, 1.0], [0, 0]),
    ("nobody", 100, [], []),
    ("never 0 (a limit of 0 means none)", 2, [None] * 3, [1, 1, 1]),
])
def test_allot_is_max_min_fair_and_never_above_the_cap(case, cap, demands, expected):
    parts = allot(cap, demands)
    assert parts == expected, case
    assert sum(parts) <= max(cap, len(demands)), case


@example(3, [None, 0.0, 0.0])  # found by the CI of 2026-12-06: 0.125-byte floors rounded up to 1 over the cap
@given(st.integers(1, 1 << 40), st.lists(st.one_of(st.none(), st.floats(0, 1 << 41)), min_size=1, max_size=40))
def test_allot_never_gives_more_than_the_cap_and_no_one_short_gets_less_than_another(cap, demands):
    parts = allot(cap, demands)
    n = len(demands)
    assert len(parts) == n and min(parts) >= 1
    if cap >= n:
        floor = cap * 0.125 / n
        assert sum(parts) <= cap and min(parts) >= int(floor)
        # max-min: a container that got less than it wants got no less than anyone else (rounding aside)
        for want, part in zip(demands, parts):
            if want is None or max(want, floor) > part + 1:
                assert max(parts) <= part + 1, (cap, demands, parts)


def test_counters_are_read_from_the_v1_and_v2_files():
    v1 = {"blkio.throttle.io_service_bytes": "254:0 Read 4096\n254:0 Write 8192\n254:0 Sync 1\n"
                                             "254:0 Total 12288\n7:0 Read 5\nTotal 12293\n",
          "blkio.throttle.io_serviced": "254:0 Read 1\n254:0 Write 2\n254:0 Discard 0\nTotal 3\n"}
    assert parse_counts(CgroupVersion.V1, v1) == {
        ("254:0", "rbps"): 4096, ("254:0", "wbps"): 8192, ("254:0", "riops"): 1, ("254:0", "wiops"): 2,
        ("7:0", "rbps"): 5}
    v2 = {"io.stat": "254:0 rbytes=4096 wbytes=0 rios=1 wios=0 dbytes=0 dios=0\n\n8:0 rbytes=7 odd wios=x\n"}
    assert parse_counts(CgroupVersion.V2, v2) == {
        ("254:0", "rbps"): 4096, ("254:0", "wbps"): 0, ("254:0", "riops"): 1, ("254:0", "wiops"): 0,
        ("8:0", "rbps"): 7}
    assert parse_counts(CgroupVersion.V1, {}) == {}


def test_rates_are_per_second_between_two_samples_of_the_same_cgroup():
    key = ("254:0", "rbps")
    before = {"a": {key: 100}, "b": {key: 500}, "gone": {key: 1}}
    after = {"a": {key: 300, ("254:0", "wbps"): 50}, "b": {key: 10}, "new": {key: 7}}
    # "b" went back: a new cgroup under the same name (not known); "new": one sample only
    assert rates(before, after, 2.0) == {"a": {key: 100.0, ("254:0", "wbps"): 25.0}}
    assert rates(before, after, 0.0) == {}


def test_the_shares_follow_what_the_containers_use_round_by_round():
    """Four BE containers, one reading: equal parts first; then the reader, held by its part,
    wants more and the idle three keep an eighth of an equal part; when another starts reading
    it is held by that, and the two share the rest in the next round."""
    pods = (pod("u1", QoSLevel.BE, "a", "b"), pod("u2", QoSLevel.BE, "c", "d"))
    node = state(CgroupVersion.V1, *pods)
    config = BlockIO(enabled=True, read_mib_per_second=80, write_mib_per_second=0)
    path = {c: f"/cg/blkio/kubepods/besteffort/pod{u}/{c}" for u, c in
            (("u1", "a"), ("u1", "b"), ("u2", "c"), ("u2", "d"))}
    key = ("254:0", "rbps")

    def rnd(used, held):
        writes, caps = plan_block_io(node, config, (VDA,), used, held)
        got = {c: int(files(writes)[path[c]]["blkio.throttle.read_bps_device"].split()[1]) for c in path}
        assert got == {c: caps[path[c]][key] for c in path} and sum(got.values()) <= 80 * MiB
        return got, caps

    got, held = rnd({}, {})
    assert set(got.values()) == {20 * MiB}
    use = {path["a"]: {key: 20 * MiB}, **{path[c]: {} for c in "bcd"}}
    got, held = rnd(use, held)
    assert got == {"a": 72.5 * MiB, "b": 2.5 * MiB, "c": 2.5 * MiB, "d": 2.5 * MiB}
    use = {path["a"]: {key: 72.5 * MiB}, path["b"]: {key: 2.5 * MiB}, **{path[c]: {} for c in "cd"}}
    got, held = rnd(use, held)
    assert got == {"a": 37.5 * MiB, "b": 37.5 * MiB, "c": 2.5 * MiB, "d": 2.5 * MiB}
    # a reader that slows down keeps what it uses and half again
    use = {path["a"]: {key: 37.5 * MiB}, path["b"]: {key: 10 * MiB}, **{path[c]: {} for c in "cd"}}
    got, held = rnd(use, held)
    assert got == {"a": 60 * MiB, "b": 15 * MiB, "c": 2.5 * MiB, "d": 2.5 * MiB}
    # a container not known (new, or the agent just started) gets an equal part at once
    use.pop(path["d"])
    got, held = rnd(use, held)
    assert got["d"] == got["a"] == (80 - 15 - 2.5) / 2 * MiB


def test_a_container_not_started_keeps_the_floor_and_its_first_round_an_equal_part():
    node = state(CgroupVersion.V1, pod("u1", QoSLevel.BE, "a", "b"))
    config = BlockIO(enabled=True, read_mib_per_second=80, write_mib_per_second=0)
    a, b = "/cg/blkio/kubepods/besteffort/podu1/a", "/cg/blkio/kubepods/besteffort/podu1/b"
    key = ("254:0", "rbps")
    _, held = plan_block_io(node, config, (VDA,), {}, {}, absent={b})
    assert held == {a: {key: 75 * MiB}, b: {key: 5 * MiB}}
    _, held = plan_block_io(node, config, (VDA,), {a: {key: 75 * MiB}}, held)  # b started: not known
    assert held == {a: {key: 40 * MiB}, b: {key: 40 * MiB}}


def test_plan_values_read_as_the_kernel_lists_them():
    """A plan's value is the kernel's lines in the executor's normal form: sorted by device."""
    value = files(plan_block_io(state(CgroupVersion.V1, pod("u1", QoSLevel.BE, "a")), BlockIO(enabled=True),
                                (VDB, VDA))[0])["/cg/blkio/kubepods/besteffort/podu1/a"]
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
    (block / "vda" / "queue").mkdir()
    (block / "vda" / "queue" / "max_sectors_kb").write_text("4096\n")
    assert node_disks(tmp_path) == (Disk("nvme0n1", "259:0"), Disk("vda", "254:0", 4096))


@pytest.mark.parametrize("version, requests, warned", [
    (CgroupVersion.V1, (4096,), ["vda takes requests up to 4096 KiB"]),
    (CgroupVersion.V1, (4096, 128), ["vda takes requests up to 4096 KiB", "vdb takes requests up to 128 KiB"]),
    (CgroupVersion.V1, (64, 4096), ["vdb takes requests up to 4096 KiB"]),
    (CgroupVersion.V1, (64, 32), []),
    (CgroupVersion.V1, (None,), []),  # not read: nothing said
    (CgroupVersion.V2, (4096,), []),  # v2 charges writeback to the BE pod's cgroup, where io.max holds it
])
def test_a_v1_node_whose_disks_take_large_requests_is_warned_about(version, requests, warned):
    disks = tuple(Disk(name, dev, kib) for (name, dev), kib in zip((("vda", "254:0"), ("vdb", "254:16")), requests))
    warning = large_requests(version, disks)
    if not warned:
        assert warning is None
        return
    assert warning.startswith("buffered writes of BE pods are not capped on cgroup v1")
    assert all(w in warning for w in warned) and "tidal.colocation.disk_queue role sets 64 KiB" in warning
    assert ("vda takes" in warning) == any(w.startswith("vda") for w in warned)


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
                      observed={feature.name: Observed(disks, {})})
        return [(r.level, r.message) for r in feature.plan(ctx).decisions if isinstance(r, Report)]

    assert reports((VDA,), BE1) == [(logging.INFO, "block I/O of BE pods capped on vda (254:0): read 100 MiB/s, "
                                                   "write 100 MiB/s per disk, shared by 2 BE container(s) as they use it")]
    assert reports((VDA,), BE1, LS) == []  # nothing changed
    assert reports((VDA,), BE1, BE2)[0][1].endswith("shared by 3 BE container(s) as they use it")
    assert reports((), BE1) == [(logging.WARNING, "block I/O of BE pods not capped: no disk with a driver in "
                                                  "/sys/block")]
    assert reports((), LS) == []  # no BE container: nothing to say
    # the disk's largest request is said with the caps; above 64 KiB on v1, with a warning
    assert reports((Disk("vda", "254:0", 64),), BE1) == [(logging.INFO, "block I/O of BE pods capped on vda (254:0, "
                                                          "requests ≤ 64 KiB): read 100 MiB/s, write 100 MiB/s per disk, "
                                                          "shared by 2 BE container(s) as they use it")]
    assert [level for level, _ in reports((Disk("vda", "254:0", 4096),), BE1)] == [logging.INFO, logging.WARNING]
    # and in a gauge per disk, every round (none for a disk whose value was not read)
    ctx = Context(NodeState((BE1,), 2.0, 0, on, {"blkio.throttle": True}, layout(CgroupVersion.V1)),
                  observed={feature.name: Observed((Disk("vda", "254:0", 4096), VDB), {})})
    assert [d for d in feature.plan(ctx).decisions if isinstance(d, Gauge)] == [Gauge("disk_max_request", ("vda",), 4096)]


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


@dataclass
class BlkioNode:
    layout: CgroupLayout
    disk: Disk
    data: Path
    #: each pod's container blkio dir, by pod uid
    dirs: dict[str, Path]

    def limits(self, uid: str) -> dict[str, str]:
        return device_lines((self.dirs[uid] / "blkio.throttle.read_bps_device").read_text())


BE_A, BE_B = pod("u1", QoSLevel.BE, "a"), pod("u2", QoSLevel.BE, "b")
LS_C = pod("u3", QoSLevel.LS, "c", qos_class=PodQOSClass.BURSTABLE)


@pytest.fixture
def blkio_node(hierarchy, blkio_root, real) -> BlkioNode:
    """Two BE containers and an LS one in a private kubelet-style blkio tree, and a 24 MiB file
    on a whole disk."""
    data = Path("/var/tmp") / f"{real.name}.img"
    disk = disk_holding(data.parent)
    if disk is None:
        pytest.skip(f"{data.parent} is not on a whole disk of /sys/block (a partition or a virtual device)")
    node = CgroupLayout(CgroupHierarchy(CgroupVersion.V1, hierarchy.cpu_root, hierarchy.memory_root, blkio_root),
                        CgroupDriver.CGROUPFS, kubelet_root=f"/{real.name}")
    dirs = {p.uid: real.make(node.blkio_dir(node.container_relpath(p.uid, p.qos_class, p.containers[0].id)))
            for p in (BE_A, BE_B, LS_C)}
    try:
        with open(data, "wb") as f:
            for _ in range(24):
                f.write(os.urandom(MiB))
            f.flush()
            os.fsync(f.fileno())
        yield BlkioNode(node, disk, data, dirs)
    finally:
        data.unlink(missing_ok=True)


def on_at(read_mib_per_second: int) -> ColocationPolicy:
    off = ColocationPolicy()
    return replace(off, features=replace(off.features, block_io=BlockIO(
        enabled=True, read_mib_per_second=read_mib_per_second, write_mib_per_second=0)))


def test_be_containers_are_throttled_on_the_real_disk_and_put_back_when_off(blkio_node, tmp_path):
    node, dirs, disk = blkio_node.layout, blkio_node.dirs, blkio_node.disk
    on, off = on_at(8), ColocationPolicy()
    engine = QoSEngine(tmp_path / "journal.json", features=[BEBlockIO()])
    caps = {"blkio.throttle": True}

    def run(policy, *pods, now=0.0):
        return engine.run(Context(NodeState(pods, 2.0, 0, policy, caps, node), now=now))

    limits = blkio_node.limits
    # a limit someone else set on another device (a loop device) is the file's original
    loop = Path("/sys/block/loop0/dev")
    foreign = loop.read_text().strip() if loop.exists() else None
    if foreign:
        (dirs["u1"] / "blkio.throttle.read_bps_device").write_text(f"{foreign} 1234")
    out = run(on, BE_A, BE_B, LS_C)
    assert out.changed == {"be-block-io": 2}, out
    assert limits("u1") == limits("u2") == {disk.device: str(4 * MiB)}  # 8 MiB/s, shared by two
    assert limits("u3") == {}  # an LS container keeps its disk
    assert run(on, BE_A, BE_B, LS_C, now=1.0).changed == {}  # idempotent (both idle: equal)
    assert run(on, BE_A, LS_C, now=2.0).changed == {"be-block-io": 1}  # one BE container left: all of it
    assert limits("u1") == {disk.device: str(8 * MiB)}

    # the kernel holds the BE container to its cap: 24 MiB at 8 MiB/s take 2 s and more (the
    # first slice's allowance aside); a load on the machine can only make it slower
    read, seconds = direct_read(blkio_node.data, dirs["u1"], 24 * MiB)
    assert read == 24 * MiB and seconds >= 1.5, (read, seconds)

    assert run(off, BE_A, LS_C, now=3.0).changed == {}
    # put back by the journal: the original line, or none (no limit)
    assert limits("u1") == ({foreign: "1234"} if foreign else {}) and limits("u2") == {}
    assert engine.journal.originals == {}


#: reads the file again and again in 64 KiB direct reads until killed (small reads: a steady rate
#: from one round to the next)
STREAM = r"""
import mmap, os, sys
with open(sys.argv[2], "w") as f:
    f.write(str(os.getpid()))
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)
buf, size, offset = mmap.mmap(-1, 1 << 16), os.fstat(fd).st_size, 0
print("ready", flush=True)
while True:
    os.preadv(fd, [buf], offset)
    offset = (offset + (1 << 16)) % size
"""


def test_the_shares_follow_the_kernel_counters_of_a_reading_container(blkio_node, tmp_path):
    """Two BE containers, one streaming: within a few rounds the reader holds nearly the whole
    cap (the idle one an eighth of its equal part), as the kernel's counters show it reading at
    its share; when it stops, the shares are equal again."""
    node, disk = blkio_node.layout, blkio_node.disk
    engine = QoSEngine(tmp_path / "journal.json", features=[BEBlockIO()])
    on = on_at(8)

    def run() -> None:
        engine.run(Context(NodeState((BE_A, BE_B, LS_C), 2.0, 0, on, {"blkio.throttle": True}, node),
                           now=time.monotonic()))

    def reader_share() -> int:
        run()
        return int(blkio_node.limits("u1")[disk.device])

    def shares() -> str:
        counted = (blkio_node.dirs["u1"] / "blkio.throttle.io_service_bytes").read_text().split("\n")[:2]
        return f"reader {blkio_node.limits('u1')} (counted {counted}), idle {blkio_node.limits('u2')}"

    run()
    assert blkio_node.limits("u1") == blkio_node.limits("u2") == {disk.device: str(4 * MiB)}
    stream = subprocess.Popen([sys.executable, "-c", STREAM, str(blkio_node.data),
                               str(blkio_node.dirs["u1"] / "cgroup.procs")], stdout=subprocess.PIPE, text=True)
    try:
        assert stream.stdout.readline() == "ready\n"
        wait_for(lambda: reader_share() == 8 * MiB - MiB // 2, 60,
                 "the reader's share at 7.5 MiB/s (the idle container keeps 0.5)", interval=1.0, describe=shares)
        assert blkio_node.limits("u2") == {disk.device: str(MiB // 2)}
    finally:
        stream.kill()
        stream.wait()
    wait_for(lambda: reader_share() == 4 * MiB, 60, "equal shares again once the reader stopped", interval=1.0,
             describe=shares)
    assert blkio_node.limits("u2") == {disk.device: str(4 * MiB)}
    engine.run(Context(NodeState((BE_A, BE_B, LS_C), 2.0, 0, ColocationPolicy(), {}, node), now=time.monotonic()))
    assert blkio_node.limits("u1") == blkio_node.limits("u2") == {} and engine.journal.originals == {}


def test_sense_reads_each_be_containers_counters_and_names_those_without_a_cgroup(tmp_path):
    """On a recorded v1 tree: the rates between two rounds, and a container with no cgroup."""
    node = CgroupLayout(CgroupHierarchy(CgroupVersion.V1, tmp_path / "cpu", tmp_path / "memory", tmp_path / "blkio"),
                        CgroupDriver.CGROUPFS)
    a = node.blkio_dir(node.container_relpath("u1", PodQOSClass.BEST_EFFORT, "containerd://a"))
    b = node.blkio_dir(node.container_relpath("u1", PodQOSClass.BEST_EFFORT, "containerd://b"))
    a.mkdir(parents=True)
    (tmp_path / "sys" / "block").mkdir(parents=True)
    feature = BEBlockIO(Options(sys_root=tmp_path / "sys"))

    def sense(read: int, ios: int, now: float, policy: ColocationPolicy = ColocationPolicy()) -> Observed:
        (a / "blkio.throttle.io_service_bytes").write_text(f"254:0 Read {read}\n254:0 Write 0\nTotal {read}\n")
        (a / "blkio.throttle.io_serviced").write_text(f"254:0 Read {ios}\n254:0 Write 0\nTotal {ios}\n")
        node_state = NodeState((BE1,), 2.0, 0, policy, {"blkio.throttle": True}, node)
        return feature.sense(Context(node_state, now=now))

    first = sense(1000, 10, 5.0)
    assert first == Observed((), {}, frozenset({str(b)}))  # one sample: nothing known yet
    # the default caps are bandwidth caps: only the byte counters are read
    second = sense(5000, 30, 7.0)
    assert second.used == {str(a): {("254:0", "rbps"): 2000.0, ("254:0", "wbps"): 0.0}}
    assert second.absent == {str(b)}
    # an IOPS cap set: the request counters are read too, rates again from the next round on (the
    # counters of the round before were not the same files)
    iops = ColocationPolicy.from_spec({"features": {"blockIO": {"readIOPS": 500}}})
    assert sense(9000, 50, 9.0, iops).used == {}
    assert sense(9400, 90, 11.0, iops).used == {str(a): {("254:0", "rbps"): 200.0, ("254:0", "wbps"): 0.0,
                                                       ("254:0", "riops"): 20.0, ("254:0", "wiops"): 0.0}}


@pytest.mark.parametrize("spec,v1,v2", [
    ({}, ("blkio.throttle.io_service_bytes",), ("io.stat",)),
    ({"readMiBPerSecond": 0, "writeMiBPerSecond": 0, "writeIOPS": 10}, ("blkio.throttle.io_serviced",), ("io.stat",)),
    ({"readIOPS": 10}, ("blkio.throttle.io_service_bytes", "blkio.throttle.io_serviced"), ("io.stat",)),
    ({"readMiBPerSecond": 0, "writeMiBPerSecond": 0}, (), ()),
])
def test_only_the_counters_of_the_capped_kinds_are_read(spec, v1, v2):
    config = ColocationPolicy.from_spec({"features": {"blockIO": spec}}).features.block_io
    assert counter_files(CgroupVersion.V1, config) == v1
    assert counter_files(CgroupVersion.V2, config) == v2
