"""make bench-agent: the footprint of tidal-agent run with 100 pods at 1 s sampling.

A private lab holds a kwok node standing for this machine with 100 pods bound to it (50 BE with
batch resources, 40 LS, 10 HLS); each has kubelet-style cgroups here (tidal_dev.testing.local_kubelet)
with real files, so every round reads and enforces 100 pods' cgroups, and the agent is labelled
for colocation (the QoS engine runs). Baseline in the same run: the same agent on a second node
with no pods. After a warm-up, CPU time (utime + stime of the process) and RSS are measured over
a window; medians of several windows are reported.

Every online pod (HLS, LS) runs ``--online-threads`` sleeping processes in total (default 600,
spread evenly: more than the 512 threads the run-queue delay control reads a round, so its
sampling cap is what is measured); ``--cpu-interference off`` switches that control off in the
policy (the difference between the two runs is its cost). ``--policy JSON`` merges a
ColocationPolicy spec of its own (e.g. ``'{"features":{"blockIO":{"enabled":true}}}'``: every BE
pod's read and write caps on every disk of this machine, each round), to measure what a feature
adds.

Last line: ``{"pods": 100, "cpu_pct_of_core": …, "rss_mib": …, "baseline_0_pods": {…}}``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(f"[bench-agent] {msg}", file=sys.stderr, flush=True)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def in_cgroups(dirs):
    """preexec_fn: the child joins the cgroups before it execs."""
    def join():
        for d in dirs:
            with open(d / "cgroup.procs", "w") as f:
                f.write(str(os.getpid()))
    return join


def footprint(pid: int, windows: int, seconds: float) -> dict:
    cpu, rss = [], []
    for _ in range(windows):
        c0, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(seconds)
        cpu.append((cpu_seconds(pid) - c0) / (time.monotonic() - t0) * 100)
        rss.append(rss_mib(pid))
    return {"cpu_pct_of_core": round(statistics.median(cpu), 2), "rss_mib": round(max(rss), 1),
            "cpu_windows": [round(c, 2) for c in cpu]}


def policy_spec(cpu_interference: str, policy: dict) -> dict:
    """The agents' ColocationPolicy spec: empty (no policy: the defaults) unless asked."""
    from tidal.console.policy_update import merge_patch  # RFC 7386

    base = {"beIsolation": {"cpuInterference": {"enabled": False}}} if cpu_interference == "off" else {}
    return merge_patch(base, policy)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--warmup", type=float, default=20)
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--window-seconds", type=float, default=10)
    parser.add_argument("--online-threads", type=int, default=600,
                        help="sleeping processes spread over the online pods' containers")
    parser.add_argument("--cpu-interference", choices=("on", "off"), default="on",
                        help="beIsolation.cpuInterference.enabled in the policy")
    parser.add_argument("--policy", type=json.loads, default={},
                        help="a ColocationPolicy spec (JSON) for the agents, merged over --cpu-interference's")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench-agent needs root: it creates cgroups")

    from kubernetes import client

    from tidal.api import qos
    from tidal.crds import crd_manifests
    from tidal_dev.lab import processes
    from tidal_dev.lab.apply import create_or_replace_all
    from tidal_dev.lab.lab import Lab
    from tidal_dev.testing.kwok import kwok_node
    from tidal_dev.lab.ports import free_port
    from tidal_dev.testing.local_kubelet import LocalKubelet
    from tidal_dev.testing.real_cgroups import RealCgroups

    workdir = Path(tempfile.mkdtemp(prefix="tidal-bench-agent-"))
    cgroups = RealCgroups(workdir)
    kubelet = LocalKubelet(cgroups)
    lab = Lab(workdir / "lab")
    agents = []
    sleepers: list = []
    try:
        log(f"starting a private lab in {lab.dir}")
        lab.up(nodes=0, real_nodes=0)  # kwok nodes only: the bench needs no kubelet, containerd or kube-proxy
        with lab.api_client() as api:
            create_or_replace_all(api, crd_manifests(), wait_established=True)
            core = client.CoreV1Api(api)
            cpus = os.cpu_count() or 1
            capacity = {"cpu": str(cpus), "memory": "24Gi", "pods": "250",
                        qos.BATCH_CPU_RESOURCE: str(cpus * 1000), qos.BATCH_MEMORY_RESOURCE: str(8 << 30)}
            for node in ("bench-node", "bench-empty"):
                kwok_node(core, node, capacity, {qos.COLOCATION_NODE_LABEL: "true"})
            core.create_namespace({"metadata": {"name": "bench"}})
            while not core.list_namespaced_service_account("bench").items:
                time.sleep(0.2)
            started = time.monotonic()
            spec = policy_spec(args.cpu_interference, args.policy)
            if spec:
                client.CustomObjectsApi(api).create_cluster_custom_object(
                    qos.API_GROUP, qos.API_VERSION, "colocationpolicies", {
                        "apiVersion": qos.API_GROUP_VERSION, "kind": "ColocationPolicy",
                        "metadata": {"name": "default"}, "spec": spec})
            online_dirs = []
            for i in range(args.pods):
                if i % 10 == 0:
                    level, requests, limits = "HLS", {"cpu": "1", "memory": "256Mi"}, {"cpu": "1", "memory": "256Mi"}
                elif i % 2:
                    level, requests, limits = "LS", {"cpu": "100m", "memory": "64Mi"}, {}
                else:
                    batch = {qos.BATCH_CPU_RESOURCE: "200", qos.BATCH_MEMORY_RESOURCE: str(128 << 20)}
                    level, requests, limits = "BE", batch, dict(batch)
                running = kubelet.run_pod(core, "bench", {
                    "metadata": {"name": f"pod-{i:03d}", "annotations": {qos.QOS_ANNOTATION: level}},
                    "spec": {"nodeName": "bench-node", "automountServiceAccountToken": False,
                             "containers": [{"name": "main", "image": "registry.invalid/app:1",
                                             "resources": {"requests": requests, "limits": limits}}]}})
                if level != "BE":
                    online_dirs.append(running.dirs)
            for n in range(args.online_threads):
                sleepers.append(subprocess.Popen(["sleep", "infinity"], preexec_fn=in_cgroups(online_dirs[n % len(online_dirs)])))
            log(f"{args.pods} pods running with cgroups in {time.monotonic() - started:.0f}s")
        tidal_agent = str(Path(sys.executable).with_name("tidal-agent"))
        for node in ("bench-node", "bench-empty"):
            agents.append(processes.start(f"agent-{node}", [
                tidal_agent, "run", "--node", node, "--kubeconfig", str(lab.kubeconfig_path),
                "--cgroup-driver", "cgroupfs", "--kubelet-cgroup-root", kubelet.kubelet_root,
                "--state-dir", str(workdir / node), "--metrics-address", "127.0.0.1",
                "--metrics-port", str(free_port())], workdir / f"{node}.log"))
        log(f"agents started; warm-up {args.warmup:g}s, then {args.windows} windows of {args.window_seconds:g}s")
        time.sleep(args.warmup)
        measured = footprint(agents[0].pid, args.windows, args.window_seconds)
        baseline = footprint(agents[1].pid, args.windows, args.window_seconds)
        log_text = (workdir / "bench-node.log").read_text()
        if "Traceback" in log_text:
            raise SystemExit(f"the agent failed:\n{log_text[-3000:]}")
    finally:
        for agent in agents:
            processes.stop(agent)
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()
        lab.down(wipe=True)
        cgroups.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps({"pods": args.pods, "online_threads": args.online_threads,
                      "cpu_interference": args.cpu_interference, "policy": args.policy,
                      "cpu_pct_of_core": measured["cpu_pct_of_core"],
                      "rss_mib": measured["rss_mib"], "cpu_windows": measured["cpu_windows"],
                      "baseline_0_pods": baseline}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
