"""Scale benchmark of the oversell master: `make bench-oversell`.

A private lab (its own directory, wiped afterwards) holds N fake nodes (default 5,000,
64 CPU / 256 GiB each, labelled for overselling) and one NodeProfile per node whose
predicted online peak is the replayed usage of 50 online pods: each pod replays one VM of
the Azure 2019 trace (strict variant, `max_cpu` × vCPUs) from a random point in time, and
the node's peak is the sum over its pods. The master then runs, in a child process so its
RSS is its own:

1. a cold cycle: the master lists nodes and NodeProfiles into its watch caches (`start`, as
   when it becomes leader) and every node gets batch resources (every node written);
2. a steady cycle: nothing changed, nothing may be written (decided on the caches: no reads);
3. a cycle after 10 % of the profiles moved by 30 % (and their watch events arrived): only
   those nodes may be written.

Baseline measured in the same run: the time of a bare `list nodes` + `list NodeProfiles`
(what every cycle read before the master kept watch caches), so the ratio shows the cycle
against that I/O floor.
Progress on stderr; one JSON object as the last line of stdout.
"""
from __future__ import annotations

import argparse
import asyncio
import csv
import datetime
import gzip
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PODS_PER_NODE = 50
GiB = 1024**3


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load_vm_series() -> list[tuple[int, list[float]]]:
    """(vCPUs, strict usage in cores per 5-minute step) for each Azure VM."""
    from tidal.predict import shared_traces_dir
    TRACE = shared_traces_dir()
    if TRACE is None:
        raise SystemExit("the Azure 2019 traces are not found: set TIDAL_TRACES_DIR")
    cores = {}
    with open(TRACE / "azure2019_20vms_meta.csv") as meta:
        for row in csv.DictReader(meta):
            cores[row["vm_id"]] = int(row["vm_virtual_core_count_bucket"])
    series: dict[str, dict[int, float]] = {}
    with gzip.open(TRACE / "azure2019_20vms_cpu_5min.csv.gz", "rt") as data:
        for row in csv.DictReader(data):
            series.setdefault(row["vm_id"], {})[int(row["timestamp"])] = float(row["max_cpu"])
    out = []
    for vm, points in series.items():
        steps = [points.get(t, 0.0) / 100 * cores[vm] for t in sorted(points)]
        out.append((cores[vm], steps))
    return out


def replayed_peak_millicores(rng: random.Random, vms, window_steps: int = 12) -> int:
    """Σ over the node's pods of each pod's peak over one hour of replay."""
    total = 0.0
    for _ in range(PODS_PER_NODE):
        _, steps = vms[rng.randrange(len(vms))]
        start = rng.randrange(len(steps) - window_steps)
        # Scale a VM (up to 8 vCPUs) down to a pod of about a quarter of its size, so 50 pods fit a node.
        total += max(steps[start:start + window_steps]) / 4
    return int(total * 1000)


async def populate(kubeconfig: str, nodes: int, peaks: list[int]) -> None:
    from tidal.api import qos
    from tidal.kube import KubeAPI, custom_path
    async with KubeAPI.from_kubeconfig(kubeconfig) as api:
        semaphore = asyncio.Semaphore(48)
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        done = 0

        async def one(index: int) -> None:
            nonlocal done
            name = f"scale-node-{index:05d}"
            async with semaphore:
                await api.create("/api/v1/nodes", {"metadata": {"name": name, "labels": {
                    qos.OVERSUBSCRIPTION_NODE_LABEL: "true", qos.COLOCATION_NODE_LABEL: "true"}},
                    "status": {"capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                               "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}})
                # the API server ignores status on create: set it through the subresource
                await api.json_patch(f"/api/v1/nodes/{name}/status", [
                    {"op": "add", "path": "/status/capacity", "value": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
                    {"op": "add", "path": "/status/allocatable", "value": {"cpu": "64", "memory": "256Gi", "pods": "110"}}])
                await api.create(custom_path("nodeprofiles"), {
                    "apiVersion": qos.API_GROUP_VERSION, "kind": "NodeProfile", "metadata": {"name": name}})
                await set_peak(api, name, peaks[index], now)
            done += 1
            if done % 500 == 0:
                log(f"  populated {done}/{nodes} nodes")

        await asyncio.gather(*(one(i) for i in range(nodes)))


async def set_peak(api, name: str, peak: int, now: str) -> None:
    from tidal.kube import custom_path
    await api.merge_patch(custom_path("nodeprofiles", name, "status"), {"status": {"observedAt": now, "predictions": {
        "predictor": "replay", "onlinePeak": {"cpuMillicores": peak, "memoryBytes": peak * 4 * 1024**2}}}})


async def move_profiles(kubeconfig: str, names: list[str], peaks: dict[str, int]) -> None:
    from tidal.kube import KubeAPI
    async with KubeAPI.from_kubeconfig(kubeconfig) as api:
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        semaphore = asyncio.Semaphore(48)

        async def one(name):
            async with semaphore:
                await set_peak(api, name, int(peaks[name] * 1.3), now)
        await asyncio.gather(*(one(n) for n in names))


async def run_master_cycles(kubeconfig: str, pause_file: str) -> None:
    """Child process: cycles on demand (one line on stdin each), JSON result per cycle. The
    first cycle starts the master's watch caches, as the manager's loop does."""
    from tidal.kube import KubeAPI
    from tidal.manager.oversell.master import NODE_PROFILES, NODES, OversellMaster
    from tidal.manager.oversell.node_decision import OversellSettings
    loop = asyncio.get_running_loop()
    async with KubeAPI.from_kubeconfig(kubeconfig) as api:
        master = OversellMaster(api, OversellSettings())
        try:
            while True:
                # read stdin off the loop, so the watches keep receiving events between cycles
                line = await loop.run_in_executor(None, sys.stdin.readline)
                if not line:
                    break
                if line.strip() == "baseline":
                    start = time.perf_counter()
                    await api.get(NODES)
                    await api.get(NODE_PROFILES)
                    print(json.dumps({"baseline_s": time.perf_counter() - start}), flush=True)
                    continue
                start = time.perf_counter()
                if not master.running:
                    await master.start()
                result = await master.cycle()
                print(json.dumps({"cycle_s": time.perf_counter() - start, "nodes": result.nodes,
                                  "patches": result.node_patches,
                                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), flush=True)
        finally:
            await master.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--master", metavar="KUBECONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.master:
        asyncio.run(run_master_cycles(args.master, ""))
        return 0

    from tidal.crds import crd_manifests
    from tidal_dev.lab.apply import create_or_replace_all
    from tidal_dev.lab.lab import Lab

    rng = random.Random(20261122)
    vms = load_vm_series()
    peaks = [replayed_peak_millicores(rng, vms) for _ in range(args.nodes)]
    lab = Lab(Path(tempfile.mkdtemp(prefix="tidal-bench-oversell-")))
    log(f"starting a private lab in {lab.dir}")
    try:
        lab.up(nodes=0, real_nodes=0)  # fake nodes only: no kubelet, containerd or kube-proxy
        with lab.api_client() as api:
            create_or_replace_all(api, crd_manifests(), wait_established=True)
        start = time.perf_counter()
        asyncio.run(populate(str(lab.kubeconfig_path), args.nodes, peaks))
        log(f"populated {args.nodes} nodes × {PODS_PER_NODE} replayed pods in {time.perf_counter() - start:.0f}s")
        child = subprocess.Popen([sys.executable, __file__, "--master", str(lab.kubeconfig_path)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

        def ask(command: str) -> dict:
            child.stdin.write(command + "\n")
            child.stdin.flush()
            return json.loads(child.stdout.readline())

        baselines = [ask("baseline")["baseline_s"] for _ in range(3)]
        cold = ask("cycle")
        log(f"cold cycle: {cold}")
        steady = [ask("cycle") for _ in range(3)]
        log(f"steady cycles: {steady}")
        names = [f"scale-node-{i:05d}" for i in rng.sample(range(args.nodes), args.nodes // 10)]
        asyncio.run(move_profiles(str(lab.kubeconfig_path), names,
                                  {f"scale-node-{i:05d}": p for i, p in enumerate(peaks)}))
        time.sleep(3)  # the master's watch receives the moved profiles (its 5-second cycle would wait too)
        moved = ask("cycle")
        log(f"cycle after moving {len(names)} profiles by 30 %: {moved}")
        child.stdin.close()
        child.wait(timeout=60)
    finally:
        lab.down(wipe=True)
    steady_s = sorted(s["cycle_s"] for s in steady)[1]
    baseline_s = sorted(baselines)[1]
    print(json.dumps({
        "nodes": args.nodes, "pods_per_node": PODS_PER_NODE,
        "cycle_s": round(steady_s, 3), "cold_cycle_s": round(cold["cycle_s"], 3),
        "changed_cycle_s": round(moved["cycle_s"], 3),
        "rss_mib": round(max(r["rss_mib"] for r in [cold, moved, *steady]), 1),
        "patches": steady[1]["patches"], "cold_patches": cold["patches"], "changed_patches": moved["patches"],
        "changed_profiles": len(names), "reads_baseline_s": round(baseline_s, 3),
        "cycle_to_reads_ratio": round(steady_s / baseline_s, 2)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
