"""make bench-burst: latency of a bursty LS server under its CPU limit, without and with CPU burst.

The LS "pod" is a kubelet-style cgroup tree below a private cgroup root (tidal_dev.testing.local_kubelet)
with a 200m CPU limit (``cpu.cfs_quota_us`` 20000 per 100 ms, as the kubelet writes it). The server
(tidal_dev.testing.bursty) burns the CPU time each request asks for, one request at a time. Every
``--gap-ms`` the bench sends a burst of ``--requests`` requests of ``--cpu-ms`` each at once:
with the defaults (4 × 8 ms every 250 ms) the server uses 0.13 CPU on average, well under its
limit, but a burst needs 32 ms of CPU, more than one period's 20 ms quota.

Two treatments, interleaved over ``--rounds`` rounds (the machine is shared and noisy):

* ``no_burst``: ``cpu.cfs_burst_us`` 0 (the kernel's default, and what the engine restores when
  ``features.cpuBurst`` is off);
* ``burst``:    the QoS engine's CPU burst strategy with the default policy (burst = quota for a pod
  annotated ``colocation.tidal.io/cpu-burst: "true"``; node load 0 so the full burst).

Output: one JSON line per treatment and round, then as the last line the medians per treatment of
``p50_ms``, ``p95_ms``, ``p99_ms`` (per-request latency from the burst's send) and
``throttled_per_burst`` (``nr_throttled`` from cpu.stat: the pod's or the container's cgroup, whichever
counted more, as the kernel throttles the level that runs out first), plus ``p50_ratio``/``p95_ratio``/
``p99_ratio`` = burst / no_burst.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tidal.agent.collector.cgroups import CgroupVersion, PodQOSClass
from tidal.agent.qos.capabilities import probe, supported_map
from tidal.agent.qos.engine import QoSEngine
from tidal.agent.qos.pod_features import ContainerCPU, FeaturePodState
from tidal.agent.qos.strategy import NodeState
from tidal.api.policy import ColocationPolicy
from tidal.api.qos import CPUBurstRequest, QoSLevel
from tidal_dev.testing.bursty import BurstyServer, ThrottleMeter
from tidal_dev.testing.local_kubelet import LocalKubelet
from tidal_dev.testing.real_cgroups import RealCgroups

LIMIT_MILLICORES = 200


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bursts", type=int, default=40, help="bursts per treatment and round")
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--cpu-ms", type=float, default=8.0)
    parser.add_argument("--gap-ms", type=float, default=250.0)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench-burst needs root (cgroups)", file=sys.stderr)
        return 2
    caps = supported_map(probe())
    if not caps.get("cpu.cfs_burst"):
        print("bench-burst: this kernel has no CFS burst (cpu.cfs_burst_us / cpu.max.burst)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="tidal-bench-burst-") as tmp:
        real = RealCgroups(Path(tmp))
        try:
            return run(args, caps, real, Path(tmp))
        finally:
            real.cleanup()


def run(args, caps, real: RealCgroups, tmp: Path) -> int:
    kubelet = LocalKubelet(real)
    layout = kubelet.layout
    uid, cid = f"{secrets.token_hex(4)}-bench-burst", f"containerd://{secrets.token_hex(32)}"
    dirs = kubelet.create_pod(uid, PodQOSClass.BURSTABLE, [cid])[cid]
    pod_cpu = kubelet.cpu_root / layout.pod_relpath(uid, PodQOSClass.BURSTABLE)
    container_cpu = kubelet.cpu_root / layout.container_relpath(uid, PodQOSClass.BURSTABLE, cid)
    quota_file = "cpu.cfs_quota_us" if layout.version is CgroupVersion.V1 else "cpu.max"
    quota = str(LIMIT_MILLICORES * 100) if layout.version is CgroupVersion.V1 else f"{LIMIT_MILLICORES * 100} 100000"
    for d in (pod_cpu, container_cpu):
        (d / quota_file).write_text(quota)
    pod = FeaturePodState(uid=uid, qos_class=PodQOSClass.BURSTABLE, tidal_level=QoSLevel.LS,
                          cpu_burst=CPUBurstRequest(True), cpu=(ContainerCPU(cid, 100, LIMIT_MILLICORES),))
    engine = QoSEngine(tmp / "journal.json")
    policies = {"no_burst": ColocationPolicy.from_spec({"features": {"cpuBurst": {"enabled": False}}}),
                "burst": ColocationPolicy()}
    results: dict[str, list[dict]] = {name: [] for name in policies}
    meter = ThrottleMeter((pod_cpu, container_cpu))
    with BurstyServer(dirs) as server:
        try:
            for rnd in range(args.rounds):
                for name, policy in policies.items():
                    state = NodeState(pods=(pod,), node_cpus=float(os.cpu_count() or 1),
                                      online_usage_millicores=0, policy=policy, capabilities=caps,
                                      layout=layout, cpu_controller_root=kubelet.cpu_root)
                    result, _ = engine.reconcile(state, enabled=True)
                    assert not result.errors, result.errors
                    meter.start()
                    latencies: list[float] = []
                    for _ in range(args.bursts):
                        time.sleep(args.gap_ms / 1000)
                        latencies += server.request([args.cpu_ms] * args.requests)
                    counts = meter.counts()
                    row = {"treatment": name, "round": rnd,
                           "p50_ms": round(statistics.median(latencies), 2),
                           "p95_ms": round(percentile(latencies, 95), 2),
                           "p99_ms": round(percentile(latencies, 99), 2),
                           "throttled_per_burst": round(counts["nr_throttled"] / args.bursts, 2),
                           "nr_bursts": counts["nr_bursts"]}
                    results[name].append(row)
                    print(json.dumps(row), flush=True)
        finally:
            engine.disable()
    summary = {name: {key: round(statistics.median(r[key] for r in rows), 2)
                      for key in ("p50_ms", "p95_ms", "p99_ms", "throttled_per_burst")}
               for name, rows in results.items()}
    for key in ("p50", "p95", "p99"):
        summary[f"{key}_ratio"] = round(summary["burst"][f"{key}_ms"] / summary["no_burst"][f"{key}_ms"], 3)
    summary["config"] = {"limit_millicores": LIMIT_MILLICORES, "requests": args.requests,
                         "cpu_ms": args.cpu_ms, "gap_ms": args.gap_ms, "bursts": args.bursts,
                         "rounds": args.rounds}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
