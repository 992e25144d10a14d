"""make bench-psi: time from the start of interference to the PSI eviction decision.

A BE "pod" (kubelet-style cgroups below a private root, tidal_dev.testing.local_kubelet) starts to
thrash its page cache against the node's memory: the private root is the node's memory cgroup
(as with ``tidal-agent run --node-memory-cgroup``) with a 24 MiB limit (tidal_dev.testing.pressure),
so the node reclaims and its memory pressure rises (a BE pod thrashing inside its own limit, with
the node at ease, is not interference: no decision). The node QoS round (``NodeQoS.round`` with the real sampler, PSI interference on
with the policy defaults: threshold 5.0 %, resource memory) runs every second, as in
``tidal-agent run``. Per trial:

* ``kernel_s``:   when ``/proc/pressure/memory`` ``some avg10`` first reads above the threshold
  (polled every 0.1 s) — the baseline: no agent reading that signal can decide earlier;
* ``decision_s``: when the round decided to evict the thrashing pod;
* ``lag_s``:      decision_s - kernel_s (the agent's own delay: at most one round period).

Between trials the bench waits for the pressure to fall below 1 %. Output: one JSON line per trial,
then as the last line the medians of the three figures and the number of trials.
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

from tidal.api import qos
from tidal.agent.collector.cgroups import PodQOSClass
from tidal.agent.collector.sampler import PodInfo, Sampler
from tidal.agent.qos.capabilities import probe, supported_map
from tidal.agent.qos.engine import QoSEngine
from tidal.agent.qos.node_qos import NodeQoS
from tidal.agent.qos.psi_interference import PSIDecision, parse_some_avg10
from tidal.agent.qos.strategy import ContainerState, PodState
from tidal.api.qos import QoSLevel
from tidal_dev.testing.local_kubelet import LocalKubelet
from tidal_dev.testing.pressure import Thrasher
from tidal_dev.testing.real_cgroups import RealCgroups

THRESHOLD = 5.0
ROUND_SECONDS = 1.0


def avg10() -> float:
    return parse_some_avg10(Path("/proc/pressure/memory").read_text())


def trial(tmp: Path, real: RealCgroups, caps) -> dict:
    kubelet = LocalKubelet(real)
    uid, cid = f"{secrets.token_hex(4)}-thrash", f"containerd://{secrets.token_hex(32)}"
    dirs = kubelet.create_pod(uid, PodQOSClass.BEST_EFFORT, [cid])[cid]
    pod = PodState(uid, PodQOSClass.BEST_EFFORT, QoSLevel.BE, (ContainerState(cid),), "batch", "thrash")
    info = PodInfo(uid, "batch", "thrash", PodQOSClass.BEST_EFFORT, QoSLevel.BE, (cid,))
    node_cgroup = kubelet.layout.hierarchy.memory_root / kubelet.kubelet_root.lstrip("/")
    sampler = Sampler(kubelet.layout, node_memory_cgroup=node_cgroup)
    node_qos = NodeQoS("bench", kubelet.layout, QoSEngine(tmp / f"journal-{uid}.json"), caps,
                       cpu_controller_root=kubelet.cpu_root)
    node_qos.observe_node({"metadata": {"labels": {qos.COLOCATION_NODE_LABEL: "true"}}})
    node_qos.observe_policy({"metadata": {"resourceVersion": "1"}, "spec": {
        "evictionWatermarks": {"enabled": False},
        "features": {"psiInterference": {"enabled": True, "resources": ["memory"],
                                         "avg10ThresholdPercent": THRESHOLD}}}})
    sampler.sample([info])
    kernel_s = decision_s = None
    with Thrasher(tmp, dirs, node_cgroup):
        start = time.monotonic()
        next_round = start + ROUND_SECONDS
        while decision_s is None and time.monotonic() - start < 60:
            now = time.monotonic()
            if kernel_s is None and avg10() > THRESHOLD:
                kernel_s = now - start
            if now >= next_round:
                next_round += ROUND_SECONDS
                sampler.sample([info])
                if any(isinstance(d, PSIDecision) for d in node_qos.round(sampler, [pod]).decisions):
                    decision_s = time.monotonic() - start
            time.sleep(0.1)
    node_qos.engine.disable()
    if kernel_s is None or decision_s is None:
        raise RuntimeError(f"no decision within 60 s (avg10 {avg10():.2f}%)")
    return {"kernel_s": round(kernel_s, 2), "decision_s": round(decision_s, 2),
            "lag_s": round(decision_s - kernel_s, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench-psi needs root (cgroups)", file=sys.stderr)
        return 2
    caps = supported_map(probe())
    if not caps.get("psi"):
        print("bench-psi: no PSI on this kernel (/proc/pressure)", file=sys.stderr)
        return 2
    rows = []
    for n in range(args.trials):
        while avg10() >= 1.0:  # the previous trial's pressure decays (avg10: ~10 s)
            time.sleep(1)
        with tempfile.TemporaryDirectory(prefix="tidal-bench-psi-") as tmp:
            real = RealCgroups(Path(tmp))
            try:
                row = {"trial": n, **trial(Path(tmp), real, caps)}
            finally:
                real.cleanup()
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps({key: round(statistics.median(r[key] for r in rows), 2)
                      for key in ("kernel_s", "decision_s", "lag_s")}
                     | {"trials": len(rows), "threshold_percent": THRESHOLD, "round_seconds": ROUND_SECONDS}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
