"""Scale benchmark of the oversell master: `make bench-oversell`.

A private lab (its own directory, wiped afterwards) holds N fake nodes (default 5,000,
64 CPU / 256 GiB each, labelled for overselling) and one NodeProfile per node whose
predicted online peak is the replayed usage of 50 online pods: each pod replays one VM of
the Azure 2019 trace (strict variant, `max_cpu` × vCPUs) from a random point in time, and
the node's peak is the sum over its pods. The master then runs, in a child process so its
RSS is its own:

1. a cold cycle: every node gets batch resources (every node written);
2. a steady cycle: nothing changed, nothing may be written;
3. a cycle after 10 % of the profiles moved by 30 %: only those nodes may be written.

Baseline measured in the same run: the time of a bare `list nodes` + `list NodeProfiles`
(the reads every cycle must do), so the ratio shows what the master adds to the I/O floor.
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
    from kubernetes_asyncio import client, config
    from tidal.api import qos
    from tidal.kube import raw
    api = await config.new_client_from_config(config_file=kubeconfig)
    async with api:
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        semaphore = asyncio.Semaphore(48)
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        done = 0

        async def one(index: int) -> None:
            nonlocal done
            name = f"scale-node-{index:05d}"
            async with semaphore:
                await raw(core.create_node({"metadata": {"name": name, "labels": {
                    qos.OVERSUBSCRIPTION_NODE_LABEL: "true", qos.COLOCATION_NODE_LABEL: "true"}},
                    "status": {"capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                               "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}},
                    _preload_content=False))
                # the API server ignores status on create: set it through the subresource
                await raw(core.patch_node_status(name, [
                    {"op": "add", "path": "/status/capacity", "value": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
                    {"op": "add", "path": "/status/allocatable", "value": {"cpu": "64", "memory": "256Gi", "pods": "110"}}],
                    _preload_content=False))
                await raw(custom.create_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "nodeprofiles", {
                    "apiVersion": qos.API_GROUP_VERSION, "kind": "NodeProfile", "metadata": {"name": name}},
                    _preload_content=False))
                await set_peak(custom, name, peaks[index], now)
            done += 1
            if done % 500 == 0:
                log(f"  populated {done}/{nodes} nodes")

        await asyncio.gather(*(one(i) for i in range(nodes)))


async def set_peak(custom, name: str, peak: int, now: str) -> None:
    from tidal.api import qos
    from tidal.kube import raw
    await raw(custom.patch_cluster_custom_object_status(
        qos.API_GROUP, qos.API_VERSION, "nodeprofiles", name,
        {"status": {"observedAt": now, "predictions": {
            "predictor": "replay", "onlinePeak": {"cpuMillicores": peak, "memoryBytes": peak * 4 * 1024**2}}}},
        _content_type="application/merge-patch+json", _preload_content=False))


async def move_profiles(kubeconfig: str, names: list[str], peaks: dict[str, int]) -> None:
    from kubernetes_asyncio import client, config
    api = await config.new_client_from_config(config_file=kubeconfig)
    async with api:
        custom = client.CustomObjectsApi(api)
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        semaphore = asyncio.Semaphore(48)

        async def one(name):
            async with semaphore:
                await set_peak(custom, name, int(peaks[name] * 1.3), now)
        await asyncio.gather(*(one(n) for n in names))


async def run_master_cycles(kubeconfig: str, pause_file: str) -> None:
    """Child process: cycles on demand (one line on stdin each), JSON result per cycle."""
    from kubernetes_asyncio import client, config
    from tidal.kube import raw_json
    from tidal.manager.oversell.master import NODE_PROFILES, OversellMaster
    from tidal.manager.oversell.node_decision import OversellSettings
    api = await config.new_client_from_config(config_file=kubeconfig)
    async with api:
        master = OversellMaster(api, OversellSettings())
        for line in sys.stdin:
            if line.strip() == "baseline":
                start = time.perf_counter()
                await raw_json(client.CoreV1Api(api).list_node(_preload_content=False))
                await raw_json(client.CustomObjectsApi(api).list_cluster_custom_object(
                    *NODE_PROFILES, _preload_content=False))
                print(json.dumps({"baseline_s": time.perf_counter() - start}), flush=True)
                continue
            start = time.perf_counter()
            result = await master.cycle()
            print(json.dumps({"cycle_s": time.perf_counter() - start, "nodes": result.nodes,
                              "patches": result.node_patches,
                              "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), flush=True)


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
        lab.up(nodes=0)
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
