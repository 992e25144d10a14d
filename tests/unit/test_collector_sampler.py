"""tidal.agent.collector.sampler: sampling steps over recorded cgroup trees with a fake clock."""

from __future__ import annotations

import json
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from tidal.agent.collector.cgroups import PodQOSClass, detect_layout
from tidal.agent.collector.sampler import REASON_FIRST_SAMPLE, PodInfo, Sampler, system_usage
from tidal.api.qos import QoSLevel

DATA = Path(__file__).resolve().parents[1] / "data" / "cgroups"
CRD = Path(__file__).resolve().parents[2] / "controllers" / "tidal" / "crds" / "colocation.tidal.io_nodeprofiles.yaml"
TREES = ("v1-cgroupfs", "v1-systemd", "v2-cgroupfs", "v2-systemd")
MS = 1_000_000  # nanoseconds per CPU-millisecond: over one second, 1 ms of CPU = 1 millicore
MiB = 1 << 20
NODE_MEMORY_USED = (16310948 - 11068260) * 1024  # recorded /proc/meminfo

# name -> (Tidal level, CPU ns added per step, cpu request m, memory request bytes)
PLAN = {
    "web-0": (QoSLevel.HLS, 500 * MS, 1000, 512 * MiB),
    "db-0": (QoSLevel.LS, 1500 * MS, 2000, 4096 * MiB),
    "api-7d9f": (QoSLevel.LS, 250 * MS, 500, 256 * MiB),
    "cache-1": (None, 100 * MS, 250, 1024 * MiB),  # no Tidal annotation: in node and system usage
    "batch-job-x2k": (QoSLevel.BE, 2000 * MS, 4000, 8192 * MiB),
    "etl-q8w": (QoSLevel.BE, 10 * MS, 100, 128 * MiB),
}
PENDING = PodInfo(  # scheduled, cgroup not created yet
    uid="77777777-6666-4555-8444-333322221111",
    namespace="jobs",
    name="new-job",
    qos_class=PodQOSClass.BEST_EFFORT,
    tidal_level=QoSLevel.BE,
    cpu_request_millicores=1000,
    memory_request_bytes=2048 * MiB,
)


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Node:
    """A copy of a recorded tree and /proc whose counters the test advances."""

    def __init__(self, tree: str, tmp_path: Path) -> None:
        self.root = tmp_path / tree
        shutil.copytree(DATA / tree, self.root)
        self.proc = tmp_path / "proc"
        shutil.copytree(DATA / "proc", self.proc)
        self.expected = json.loads((DATA / f"{tree}.expected.json").read_text())
        self.layout = detect_layout(self.root)
        self.clock = FakeClock()
        self.sampler = Sampler(
            self.layout,
            proc_root=self.proc,
            windows=(60, 300),
            clock=self.clock,
            wall_clock=lambda: datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
        )
        self.pods = []
        for uid, pod in self.expected["pods"].items():
            level, _, cpu, memory = PLAN[pod["name"]]
            self.pods.append(
                PodInfo(
                    uid=uid,
                    namespace="default",
                    name=pod["name"],
                    qos_class=PodQOSClass(pod["qosClass"]),
                    tidal_level=level,
                    container_ids=tuple(c["containerID"] for c in pod["containers"].values()),
                    cpu_request_millicores=cpu,
                    memory_request_bytes=memory,
                )
            )

    def pod(self, name: str) -> PodInfo:
        return next(p for p in self.pods if p.name == name)

    def advance(self, seconds: float = 1.0, scale: float = 1.0, busy_ticks: int = 250, idle_ticks: int = 150) -> None:
        """Every pod uses its PLAN CPU (times ``scale``) per second; the node busy_ticks."""
        self.clock.t += seconds
        for uid, pod in self.expected["pods"].items():
            delta = int(PLAN[pod["name"]][1] * scale * seconds)
            cpu_dir = self.layout.cpu_dir(self.layout.pod_relpath(uid, PodQOSClass(pod["qosClass"])))
            if self.layout.version == "v1":
                path = cpu_dir / "cpuacct.usage"
                path.write_text(f"{int(path.read_text()) + delta}\n")
            else:
                path = cpu_dir / "cpu.stat"
                path.write_text(
                    re.sub(r"usage_usec (\d+)", lambda m: f"usage_usec {int(m[1]) + delta // 1000}", path.read_text())
                )
        stat = self.proc / "stat"
        lines = stat.read_text().splitlines()
        fields = lines[0].split()
        fields[1] = str(int(fields[1]) + busy_ticks)  # user
        fields[4] = str(int(fields[4]) + idle_ticks)  # idle
        lines[0] = " ".join(fields)
        stat.write_text("\n".join(lines) + "\n")

    def working_set(self, name: str) -> int:
        return next(p for p in self.expected["pods"].values() if p["name"] == name)["workingSetBytes"]


def validate(value, schema, path="status"):
    """The parts of OpenAPI v3 structural-schema validation the summary must pass."""
    kind = schema.get("type")
    if kind == "object":
        assert isinstance(value, dict), path
        for key in schema.get("required", []):
            assert key in value, f"{path}.{key} is required"
        props = schema.get("properties")
        for key, item in value.items():
            if props is not None and key in props:
                validate(item, props[key], f"{path}.{key}")
            else:
                assert schema.get("x-kubernetes-preserve-unknown-fields"), f"{path}.{key} would be pruned"
    elif kind == "array":
        assert isinstance(value, list), path
        keys = schema.get("x-kubernetes-list-map-keys", [])
        assert len({tuple(v[k] for k in keys) for v in value}) == len(value), f"{path}: duplicate map keys"
        for i, item in enumerate(value):
            validate(item, schema["items"], f"{path}[{i}]")
    elif kind == "integer":
        assert isinstance(value, int) and not isinstance(value, bool), f"{path}: {value!r} is not an integer"
        assert value >= schema.get("minimum", value), f"{path}: {value} < minimum"
    elif kind == "string":
        assert isinstance(value, str), path


STATUS_SCHEMA = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
    "properties"
]["status"]


@pytest.fixture(params=TREES)
def node(request, tmp_path):
    return Node(request.param, tmp_path)


def test_first_step_has_no_window_samples_and_counts_cpu_at_request(node):
    node.sampler.sample(node.pods)
    summary = node.sampler.summary()
    validate(summary, STATUS_SCHEMA)
    assert summary["observedAt"] == "2025-01-02T03:04:05Z"
    assert summary["usage"] == [{"windowSeconds": 60, "samples": 0}, {"windowSeconds": 300, "samples": 0}]
    hls = summary["perQoS"]["HLS"]
    assert hls["current"] == {"cpuMillicores": 1000, "memoryBytes": node.working_set("web-0")}
    assert hls["podsAtRequest"] == [
        {
            "namespace": "default",
            "name": "web-0",
            "uid": node.pod("web-0").uid,
            "resources": ["cpu"],
            "reason": REASON_FIRST_SAMPLE,
        }
    ]


def test_second_step_measures_pods_node_and_levels(node):
    node.sampler.sample(node.pods + [PENDING])
    node.advance()
    node.sampler.sample(node.pods + [PENDING])
    summary = node.sampler.summary()
    validate(summary, STATUS_SCHEMA)

    usage = {u["windowSeconds"]: u for u in summary["usage"]}
    # 250 busy ticks of 400 on 4 CPUs
    stats = {"avg": 2500, "p50": 2500, "p90": 2500, "p95": 2500, "p99": 2500, "max": 2500}
    assert usage[60] == {
        "windowSeconds": 60,
        "samples": 1,
        "cpuMillicores": stats,
        "memoryBytes": dict.fromkeys(stats, NODE_MEMORY_USED),
    }

    for name in PLAN:
        pod_usage = node.sampler.pod_usage(node.pod(name).uid)
        assert pod_usage.cpu_millicores == pytest.approx(PLAN[name][1] / MS), name
        assert pod_usage.memory_bytes == node.working_set(name)

    per_qos = summary["perQoS"]
    assert per_qos["HLS"]["current"] == {"cpuMillicores": 500, "memoryBytes": node.working_set("web-0")}
    assert per_qos["LS"]["current"] == {
        "cpuMillicores": 1500 + 250,
        "memoryBytes": node.working_set("db-0") + node.working_set("api-7d9f"),
    }
    assert per_qos["LS"]["pods"] == 2 and per_qos["LS"]["podsAtRequest"] == []
    assert per_qos["LS"]["requests"] == {"cpuMillicores": 2500, "memoryBytes": (4096 + 256) * MiB}
    # BE: measured pods plus the pending pod at its request, flagged
    assert per_qos["BE"]["current"] == {
        "cpuMillicores": 2000 + 10 + 1000,
        "memoryBytes": node.working_set("batch-job-x2k") + node.working_set("etl-q8w") + 2048 * MiB,
    }
    (flagged,) = per_qos["BE"]["podsAtRequest"]
    assert (flagged["name"], flagged["resources"]) == ("new-job", ["cpu", "memory"])
    relpath = node.layout.pod_relpath(PENDING.uid, PENDING.qos_class)
    missing = dict.fromkeys([node.layout.cpu_dir(relpath), node.layout.memory_dir(relpath)])  # one dir on v2
    assert flagged["reason"] == "; ".join(f"no cgroup {d}" for d in missing)
    be_window = {u["windowSeconds"]: u for u in per_qos["BE"]["usage"]}[300]
    assert be_window["samples"] == 1 and be_window["cpuMillicores"]["max"] == 3010

    # online = HLS + LS: web-0, db-0 and api-7d9f (cache-1 has no Tidal level)
    online_cpu, online_memory = node.sampler.online_stats(60)
    assert online_cpu.samples == 1 and online_cpu.max == pytest.approx(500 + 1500 + 250)
    assert online_memory.max == sum(node.working_set(n) for n in ("web-0", "db-0", "api-7d9f"))
    level_cpu, _ = node.sampler.level_stats(QoSLevel.BE, 60)
    assert level_cpu.max == pytest.approx(3010)


def test_window_statistics_follow_the_steps(node):
    node.sampler.sample(node.pods)
    for scale in (1, 2, 3, 4):  # HLS web-0 uses 500, 1000, 1500, 2000 millicores
        node.advance(scale=scale)
        node.sampler.sample(node.pods)
        summary = node.sampler.summary()
    hls = {u["windowSeconds"]: u for u in summary["perQoS"]["HLS"]["usage"]}[60]
    assert hls["samples"] == 4
    assert hls["cpuMillicores"] == {"avg": 1250, "p50": 1250, "p90": 1850, "p95": 1925, "p99": 1985, "max": 2000}
    histograms = node.sampler.pod_histograms(node.pod("web-0").uid)
    assert histograms.cpu_millicores.max() == pytest.approx(2000)
    assert histograms.cpu_millicores.percentile(0.0) == pytest.approx(500)
    assert histograms.memory_bytes.max() == node.working_set("web-0")
    # after 61 more seconds of idleness the first samples have left the 60 s window
    node.advance(seconds=61, scale=0)
    node.sampler.sample(node.pods)
    hls = {u["windowSeconds"]: u for u in node.sampler.summary()["perQoS"]["HLS"]["usage"]}
    assert hls[60]["samples"] == 1 and hls[60]["cpuMillicores"]["max"] == 0
    assert hls[300]["samples"] == 5 and hls[300]["cpuMillicores"]["max"] == 2000


def test_online_peak_includes_a_new_online_pod_at_its_request(node):
    node.sampler.sample(node.pods)
    node.advance()
    node.sampler.sample(node.pods)
    new_ls = PodInfo(uid="12345678-0000-4000-8000-000000000001", namespace="shop", name="checkout",
                     qos_class=PodQOSClass.BURSTABLE, tidal_level=QoSLevel.LS,
                     cpu_request_millicores=3000, memory_request_bytes=MiB)
    node.advance()
    node.sampler.sample(node.pods + [new_ls])
    cpu, _ = node.sampler.online_stats(60)
    assert cpu.samples == 2 and cpu.max == pytest.approx(2250 + 3000) and cpu.p50 == pytest.approx(2250 + 1500)


def test_online_stats_before_any_sample_are_none(node):
    assert node.sampler.online_stats(60) == (None, None)


def test_a_counter_reset_counts_the_pod_at_request_for_one_step(node):
    node.sampler.sample(node.pods)
    node.advance()
    node.sampler.sample(node.pods)
    web = node.pod("web-0")
    cpu_dir = node.layout.cpu_dir(node.layout.pod_relpath(web.uid, web.qos_class))
    (cpu_dir / ("cpuacct.usage" if node.layout.version == "v1" else "cpu.stat")).write_text(
        "5000\n" if node.layout.version == "v1" else "usage_usec 5\n"
    )  # pod cgroup recreated: counter restarted
    node.clock.t += 1
    node.sampler.sample(node.pods)
    summary = node.sampler.summary()
    (flagged,) = summary["perQoS"]["HLS"]["podsAtRequest"]
    assert flagged["resources"] == ["cpu"] and "counter went back" in flagged["reason"]
    assert summary["perQoS"]["HLS"]["current"]["cpuMillicores"] == web.cpu_request_millicores


def test_state_of_pods_that_left_is_dropped_and_memory_stays_bounded(node):
    node.sampler.sample(node.pods)
    uid = node.pod("web-0").uid
    assert node.sampler.pod_histograms(uid) is not None
    aggregates = 12 * 2 * 8 * 375  # 12 series, windows up to 300 s at 1 s: 375 slots of 16 bytes
    assert node.sampler.memory_bytes == aggregates + len(node.pods) * 2 * 4224
    remaining = [p for p in node.pods if p.uid != uid]
    for _ in range(3):
        node.advance()
        node.sampler.sample(remaining)
    assert node.sampler.pod_histograms(uid) is None and node.sampler.pod_usage(uid) is None
    assert node.sampler.memory_bytes == aggregates + len(remaining) * 2 * 4224
    # when it comes back it starts over: first sample again
    node.advance()
    node.sampler.sample(node.pods)
    summary = node.sampler.summary()
    assert summary["perQoS"]["HLS"]["podsAtRequest"][0]["reason"] == REASON_FIRST_SAMPLE


def test_unreadable_pod_file_is_reported_not_raised(node):
    node.sampler.sample(node.pods)
    web = node.pod("web-0")
    memory_dir = node.layout.memory_dir(node.layout.pod_relpath(web.uid, web.qos_class))
    (memory_dir / "memory.stat").write_text("garbage\n")
    # memory.stat is re-read every stat_every steps (its inactive page cache moves slowly)
    for _ in range(node.sampler.stat_every):
        node.advance()
        node.sampler.sample(node.pods)
        summary = node.sampler.summary()
    (flagged,) = summary["perQoS"]["HLS"]["podsAtRequest"]
    assert flagged["resources"] == ["memory"]
    # the one line the agent needs is missing: named, with the file's path
    key = "total_inactive_file" if "v1" in str(memory_dir) else "inactive_file"
    assert f"{memory_dir / 'memory.stat'}: no '{key}' line" in flagged["reason"]
    assert summary["perQoS"]["HLS"]["current"]["memoryBytes"] == web.memory_request_bytes


@pytest.mark.parametrize(
    ("node_usage", "pods", "expected"),
    [
        (3000.0, 2180.0, 820.0),  # daemons and kernel use what the pods do not
        (3000, 3000, 0.0),
        (2500.0, 4360.0, 0.0),  # pods' sum above the node's: read ms apart (skew), never negative
        (2500.0, 0.0, 2500.0),  # no pods: everything is the system's
        (2500.0, -5.0, 2500.0),  # a negative pods' sum cannot add to the system
        (None, 1000.0, None),  # no node sample yet (first CPU step): nothing to subtract from
        (float("nan"), 1000.0, None),
        (float("inf"), 1000.0, None),
        (3000.0, None, None),
        (3000.0, float("nan"), None),
        (True, 0.0, None),
    ],
)
def test_system_usage_is_node_minus_every_pod_clamped_at_zero(node_usage, pods, expected):
    assert system_usage(node_usage, pods) == expected


def test_system_usage_is_outside_tidals_pods_and_is_summarised_per_window(node):
    """System usage is the node's minus the pods with a QoS level: a pod without one (cache-1) is
    not Tidal's to predict or reclaim, so its usage counts with the daemons' (subtracted with the
    pods it would be counted nowhere, and BE could be offered what it uses)."""
    meminfo = node.proc / "meminfo"
    pods_memory = sum(p["workingSetBytes"] for p in node.expected["pods"].values())
    # the node's working set, on the pods' basis (MemTotal − MemFree − Inactive(file)): 300 MiB
    # outside the pods; MemAvailable (which counts all page cache as free) plays no part
    free_kb = 16310948 - 288704 - (pods_memory + 300 * MiB) // 1024
    meminfo.write_text(re.sub(r"MemFree:\s+\d+", f"MemFree:   {free_kb}", meminfo.read_text()))
    node.sampler.sample(node.pods)
    first = node.sampler.summary()
    assert node.sampler.system_cpu_millicores is None  # no node CPU rate on the first step
    assert first["systemUsage"] == [{"windowSeconds": 60, "samples": 0}, {"windowSeconds": 300, "samples": 0}]
    node.advance(scale=0.5, busy_ticks=300, idle_ticks=100)  # pods 2180 m of the node's 3000 m
    node.sampler.sample(node.pods)
    summary = node.sampler.summary()
    validate(summary, STATUS_SCHEMA)
    # the pods' sum (the watermarks' without system usage) has every pod, cache-1 included
    assert node.sampler.pods_cpu_millicores == pytest.approx(sum(plan[1] for plan in PLAN.values()) / MS / 2)
    assert node.sampler.pods_memory_bytes == pods_memory
    # the system's: 820 m outside every pod + cache-1's 50 m; 300 MiB + cache-1's working set
    assert node.sampler.system_cpu_millicores == pytest.approx(3000 - 2180 + 50)
    system_memory = (16310948 - free_kb - 288704) * 1024 - pods_memory + node.working_set("cache-1")
    assert node.sampler.system_memory_bytes == system_memory
    window = {u["windowSeconds"]: u for u in summary["systemUsage"]}[60]
    assert window["samples"] == 1 and window["cpuMillicores"]["p95"] == 870
    assert window["memoryBytes"]["max"] == system_memory
    cpu, memory = node.sampler.system_stats(300)
    assert cpu.p95 == pytest.approx(870) and memory.p95 == system_memory
    # a pod starting between the reads: the pods' sum passes the node's, the system is 0, not less
    node.advance(scale=2.0, busy_ticks=300, idle_ticks=100)
    node.sampler.sample(node.pods)
    assert node.sampler.system_cpu_millicores == 0.0


def test_summary_before_any_sample_is_an_error(node):
    with pytest.raises(RuntimeError, match="before the first sample"):
        node.sampler.summary()


@pytest.mark.parametrize(
    ("field", "value"),
    [("cpu_request_millicores", -1), ("memory_request_bytes", 1.5), ("cpu_request_millicores", True)],
)
def test_pod_info_rejects_bad_requests(field, value):
    kwargs = dict(uid="u", namespace="n", name="p", qos_class="Burstable")
    with pytest.raises(ValueError, match=field):
        PodInfo(**kwargs, **{field: value})


def test_pod_info_accepts_kubernetes_and_tidal_spellings():
    pod = PodInfo(uid="u", namespace="n", name="p", qos_class="BestEffort", tidal_level="BE", container_ids=["a://b"])
    assert (pod.qos_class, pod.tidal_level, pod.container_ids) == (PodQOSClass.BEST_EFFORT, QoSLevel.BE, ("a://b",))
