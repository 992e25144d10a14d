"""Latency benchmark of tidal-console's node list: `make bench-console`.

A private lab (its own directory, wiped afterwards) holds N nodes (default 500) with one
NodeProfile each. Measured in the same run, sequential requests after 5 warm-up calls:

- baseline: the reads the endpoint must make, straight to the API server as the admin
  (list nodes, NodeProfiles and pods, concurrently, raw JSON) — the I/O floor;
- `GET /api/v1/nodes` through tidal-console with its auth cache (10 s, the default);
- the same with the cache off (`--auth-cache-seconds 0`): a TokenReview and a
  SubjectAccessReview on every call;
- `GET /api/v1/policy/schema` (no API reads besides the reviews) with the cache on and off,
  which isolates what the two reviews cost.

Progress on stderr; one JSON object as the last line of stdout.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def summary(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered) * 1000, 2),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 2)}


async def populate(kubeconfig: Path, count: int) -> None:
    from tidal.api import qos
    from tidal.kube import KubeAPI, custom_path
    async with KubeAPI.from_kubeconfig(kubeconfig) as api:
        semaphore = asyncio.Semaphore(32)

        async def one(i: int) -> None:
            name = f"bench-node-{i:05d}"
            async with semaphore:
                await api.create("/api/v1/nodes", {"metadata": {"name": name, "labels": {
                    qos.COLOCATION_NODE_LABEL: "true"} if i % 2 else {}},
                    "status": {"capacity": {"cpu": "64", "memory": "256Gi"},
                               "allocatable": {"cpu": "64", "memory": "256Gi"}}})
                await api.create(custom_path("nodeprofiles"), {
                    "apiVersion": qos.API_GROUP_VERSION, "kind": "NodeProfile", "metadata": {"name": name}})
                await api.merge_patch(custom_path("nodeprofiles", name, "status"), {"status": {"capabilities": [
                    {"name": "cpuBurst", "supported": True, "reason": ""},
                    {"name": "cacheLimits", "supported": False, "reason": "resctrl not mounted"}]}})
        await asyncio.gather(*(one(i) for i in range(count)))


async def baseline(kubeconfig: Path, rounds: int) -> list[float]:
    from tidal.kube import KubeAPI, custom_path
    async with KubeAPI.from_kubeconfig(kubeconfig) as api:

        async def reads():
            await asyncio.gather(
                api.get("/api/v1/nodes"), api.get(custom_path("nodeprofiles")),
                api.get("/api/v1/pods", {"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"}))
        samples = []
        for i in range(rounds + 5):
            start = time.perf_counter()
            await reads()
            if i >= 5:
                samples.append(time.perf_counter() - start)
        return samples


def through_console(url: str, token: str, rounds: int, path: str = "/api/v1/nodes") -> tuple[list[float], int]:
    samples = []
    for i in range(rounds + 5):
        request = urllib.request.Request(f"{url}{path}", headers={"Authorization": f"Bearer {token}"})
        start = time.perf_counter()
        with urllib.request.urlopen(request, timeout=60) as resp:
            body = resp.read()
            assert resp.status == 200
        if i >= 5:
            samples.append(time.perf_counter() - start)
    return samples, len(json.loads(body).get("items", ()))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    from kubernetes import client

    from tidal.console.rbac import EDITOR_ROLE, cluster_roles
    from tidal.crds import crd_manifests
    from tidal_dev.lab import processes
    from tidal_dev.lab.apply import create_or_replace_all
    from tidal_dev.lab.lab import Lab
    from tidal_dev.lab.ports import free_ports

    lab = Lab(Path(tempfile.mkdtemp(prefix="tidal-bench-console-")))
    consoles = []
    try:
        log(f"starting a private lab in {lab.dir}")
        lab.up(nodes=0, real_nodes=0)  # kwok nodes only: the bench needs no kubelet, containerd or kube-proxy
        with lab.api_client() as api:
            create_or_replace_all(api, crd_manifests() + cluster_roles(), wait_established=True)
            core = client.CoreV1Api(api)
            core.create_namespace({"metadata": {"name": "bench"}})
            core.create_namespaced_service_account("bench", {"metadata": {"name": "editor"}})
            client.RbacAuthorizationV1Api(api).create_cluster_role_binding({
                "metadata": {"name": "bench-editor"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": EDITOR_ROLE},
                "subjects": [{"kind": "ServiceAccount", "name": "editor", "namespace": "bench"}]})
            token = core.create_namespaced_service_account_token(
                "editor", "bench", {"spec": {"expirationSeconds": 3600}}).status.token
        log(f"creating {args.nodes} nodes and NodeProfiles")
        asyncio.run(populate(lab.kubeconfig_path, args.nodes))
        urls = {}
        for label, ttl in (("cached", "10"), ("uncached", "0")):
            port, = free_ports(1)
            consoles.append(processes.start(f"console-{label}", [
                str(Path(sys.executable).parent / "tidal-console"), "--log-level", "WARNING", "serve",
                "--kubeconfig", str(lab.kubeconfig_path), "--prometheus-url", "http://127.0.0.1:1",
                "--port", str(port), "--auth-cache-seconds", ttl], lab.dir / f"console-{label}.log"))
            urls[label] = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if all(urllib.request.urlopen(f"{u}/healthz", timeout=2).status == 200 for u in urls.values()):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        log("baseline: direct API server reads")
        base = asyncio.run(baseline(lab.kubeconfig_path, args.rounds))
        log("GET /api/v1/nodes, auth cache on")
        cached, items = through_console(urls["cached"], token, args.rounds)
        log("GET /api/v1/nodes, auth cache off")
        uncached, _ = through_console(urls["uncached"], token, args.rounds)
        log("GET /api/v1/policy/schema (no API reads but the reviews), auth cache on and off")
        schema_cached, _ = through_console(urls["cached"], token, args.rounds, "/api/v1/policy/schema")
        schema_uncached, _ = through_console(urls["uncached"], token, args.rounds, "/api/v1/policy/schema")
    finally:
        for record in consoles:
            processes.stop(record)
        lab.down(wipe=True)
    result = {"nodes": items, "rounds": args.rounds, "baseline_api_reads": summary(base),
              "console_cached_auth": summary(cached), "console_uncached_auth": summary(uncached)}
    result["ratio_cached_to_baseline_p50"] = round(result["console_cached_auth"]["p50_ms"]
                                                   / result["baseline_api_reads"]["p50_ms"], 2)
    result["schema_cached_auth"] = summary(schema_cached)
    result["schema_uncached_auth"] = summary(schema_uncached)
    result["auth_reviews_p50_ms"] = round(result["schema_uncached_auth"]["p50_ms"]
                                          - result["schema_cached_auth"]["p50_ms"], 2)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
