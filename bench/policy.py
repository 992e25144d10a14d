"""make bench-policy: how fast a ColocationPolicy change reaches every node agent.

A private lab holds N kwok nodes labelled for colocation (default 50); replay agents act for them
(``tidal-agent replay``, 10 processes of N/10 nodes each, watching the policy like ``tidal-agent
run`` does) and tidal-manager runs the policy reconciler. Each round writes a policy change and
measures, polling every 50 ms:

* ``propagation``: until every node's NodeProfile reports the new generation;
* ``rollout``: until the policy's status shows every node on it (the reconciler's view).

Baseline in the same run: the time until a bare watch on the policy sees the write (the API
server's own delivery latency, which every agent pays too).

Last line: ``{"nodes": N, "propagation_p50_s": …, "propagation_max_s": …, ...}``.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

BIN = Path(sys.executable).parent
POLICY = ("colocation.tidal.io", "v1alpha1", "colocationpolicies", "default")


def log(msg: str) -> None:
    print(f"[bench-policy] {msg}", file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--processes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()

    from kubernetes import client, watch

    from tidal.api import qos
    from tidal.crds import crd_manifests
    from tidal_dev.lab import processes
    from tidal_dev.lab.apply import create_or_replace_all
    from tidal_dev.lab.lab import Lab
    from tidal_dev.testing.kwok import kwok_node
    from tidal_dev.lab.pki import ensure_ca, issue
    from tidal_dev.lab.ports import free_ports

    workdir = Path(tempfile.mkdtemp(prefix="tidal-bench-policy-"))
    lab = Lab(workdir / "lab")
    started: list = []
    rounds = []
    try:
        log(f"starting a private lab in {lab.dir}")
        lab.up(nodes=0, real_nodes=0)  # kwok nodes only: the bench needs no kubelet, containerd or kube-proxy
        with lab.api_client() as api:
            create_or_replace_all(api, crd_manifests(), wait_established=True)
            core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
            core.create_namespace({"metadata": {"name": qos.NAMESPACE}})
            custom.create_cluster_custom_object(*POLICY[:3], {
                "apiVersion": qos.API_GROUP_VERSION, "kind": "ColocationPolicy",
                "metadata": {"name": "default"}, "spec": {}})
            names = [f"bench-node-{i:03d}" for i in range(args.nodes)]
            capacity = {"cpu": "16", "memory": "64Gi", "pods": "110"}
            for name in names:
                kwok_node(core, name, capacity, {qos.COLOCATION_NODE_LABEL: "true"})
            trace = workdir / "trace.csv"
            trace.write_text("timestamp,series_id,usage,request\n" + "".join(
                f"{step * 300},web,{1 + step % 3},4\n" for step in range(12)))
            per = -(-args.nodes // args.processes)
            for i in range(0, args.nodes, per):
                started.append(processes.start(f"replay-{i}", [
                    str(BIN / "tidal-agent"), "replay", "--kubeconfig", str(lab.kubeconfig_path),
                    "--trace", str(trace), "--nodes", ",".join(names[i:i + per]), "--report-interval", "30"],
                    workdir / f"replay-{i}.log"))
            cert = issue(ensure_ca(workdir), workdir, "webhook", "tidal-manager", server=True,
                         ip_addresses=("127.0.0.1",))
            port, health = free_ports(2)
            started.append(processes.start("manager", [
                str(BIN / "tidal-manager"), "--kubeconfig", str(lab.kubeconfig_path), "--identity", "bench",
                "--webhook-cert-file", str(cert.cert), "--webhook-key-file", str(cert.key),
                "--webhook-address", "127.0.0.1", "--webhook-port", str(port),
                "--health-address", "127.0.0.1", "--health-port", str(health)], workdir / "manager.log"))

            def generations() -> dict[str, int | None]:
                items = custom.list_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "nodeprofiles")["items"]
                return {p["metadata"]["name"]: ((p.get("status") or {}).get("policy") or {}).get("appliedGeneration")
                        for p in items}

            def rolled_out(gen: int) -> bool:
                status = custom.get_cluster_custom_object(*POLICY).get("status") or {}
                return status.get("observedGeneration") == gen and status.get("appliedNodes") == args.nodes

            def wait(predicate, timeout: float, what: str) -> float:
                t0 = time.monotonic()
                while not predicate():
                    if time.monotonic() - t0 > timeout:
                        raise SystemExit(f"timed out after {timeout:g}s waiting for {what} (logs in {workdir})")
                    time.sleep(0.05)
                return time.monotonic()

            first = custom.get_cluster_custom_object(*POLICY)["metadata"]["generation"]
            wait(lambda: all(g == first for g in generations().values()) and len(generations()) == args.nodes,
                 180, "every agent's first report")
            wait(lambda: rolled_out(first), 60, "the first rollout status")
            log(f"{args.nodes} nodes, {len(started) - 1} replay processes and the manager are up")

            for r in range(args.rounds):
                seen = threading.Event()
                current = custom.get_cluster_custom_object(*POLICY)
                rv = current["metadata"]["resourceVersion"]

                def watch_policy():
                    w = watch.Watch()
                    for event in w.stream(custom.list_cluster_custom_object, *POLICY[:3], resource_version=rv,
                                          field_selector="metadata.name=default", timeout_seconds=30):
                        if event["type"] == "MODIFIED" and event["object"]["metadata"]["generation"] > current["metadata"]["generation"]:
                            seen_at.append(time.monotonic())
                            seen.set()
                            w.stop()
                seen_at: list[float] = []
                watcher = threading.Thread(target=watch_policy, daemon=True)
                watcher.start()
                time.sleep(0.3)
                body = dict(current, spec={"evictionWatermarks": {"dwellSeconds": 10 + r + 1}})
                t0 = time.monotonic()
                custom.replace_cluster_custom_object(*POLICY, body)
                gen = current["metadata"]["generation"] + 1
                t_nodes = wait(lambda: all(g == gen for g in generations().values()), 60, f"generation {gen} on every node")
                t_rollout = wait(lambda: rolled_out(gen), 60, f"rollout of generation {gen}")
                seen.wait(10)
                row = {"round": r + 1, "propagation_s": round(t_nodes - t0, 3),
                       "rollout_s": round(t_rollout - t0, 3),
                       "watch_baseline_s": round(seen_at[0] - t0, 3) if seen_at else None}
                rounds.append(row)
                print(json.dumps(row), flush=True)
                time.sleep(1)
    finally:
        for record in started:
            processes.stop(record)
        lab.down(wipe=True)
        shutil.rmtree(workdir, ignore_errors=True)
    prop = [r["propagation_s"] for r in rounds]
    roll = [r["rollout_s"] for r in rounds]
    base = [r["watch_baseline_s"] for r in rounds if r["watch_baseline_s"] is not None]
    print(json.dumps({"nodes": args.nodes, "propagation_p50_s": round(statistics.median(prop), 3),
                      "propagation_max_s": max(prop), "rollout_p50_s": round(statistics.median(roll), 3),
                      "rollout_max_s": max(roll),
                      "watch_baseline_p50_s": round(statistics.median(base), 3) if base else None,
                      "rounds": len(rounds), "replay_processes": len(started) - 1}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
