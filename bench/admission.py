"""Benchmark of the admission webhook over TLS: `make bench-admission`.

Starts the real `tidal-manager` and, as the baseline measured in the same run, a bare
aiohttp TLS server that answers every review with a constant allowed response (the
cost of HTTP + TLS + JSON framing with no review logic). Then:

1. latency at a fixed 500 reviews/s, open loop (requests leave on schedule whether or
   not earlier ones have returned), sent by bench/loadgen (Go: its client adds far less
   latency than a Python one would), 3 rounds, medians of p50/p99 — for both servers;
2. the highest sustained reviews/s, closed loop with wrk (C, keep-alive TLS) so the
   load generator is not the bottleneck, 3 rounds, median — for both servers.

The request is a BE pod that needs every mutation (the most expensive review).
Prints progress on stderr and exactly one JSON object as the last line of stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

RATE = 500
ROUNDS = 3
FIXED_RATE_SECONDS = 8
WRK_SECONDS = 8

BE_POD_REVIEW = {
    "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
    "request": {
        "uid": "bench-0000", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "bench", "operation": "CREATE", "userInfo": {"username": "bench"},
        "object": {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "transcode-7f9c", "namespace": "bench",
                         "labels": {"app": "transcode"},
                         "annotations": {"colocation.tidal.io/qos-level": "BE"}},
            "spec": {"containers": [
                {"name": "worker", "image": "registry.invalid/transcode:1",
                 "resources": {"requests": {"cpu": "2", "memory": "4Gi"},
                               "limits": {"cpu": "4", "memory": "8Gi"}}},
                {"name": "sidecar", "image": "registry.invalid/log:1",
                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]},
        },
        "dryRun": False,
    },
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def baseline_server(port: int, cert: str, key: str) -> None:
    from aiohttp import web
    answer = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                         "response": {"uid": "bench-0000", "allowed": True}})

    async def handle(request: web.Request) -> web.Response:
        json.loads(await request.read())
        return web.Response(text=answer, content_type="application/json")

    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    app = web.Application(client_max_size=4 * 1024 * 1024)
    app.router.add_post("/mutate", handle)
    app.router.add_get("/readyz", lambda _: web.Response(text="ok"))
    # The same event loop as tidal-manager, so the ratio isolates the review's own cost.
    import uvloop
    web.run_app(app, host="127.0.0.1", port=port, ssl_context=tls, access_log=None, print=None,
                loop=uvloop.new_event_loop())


def wait_ready(url: str, context: ssl.SSLContext | None = None, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1, context=context):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"server at {url} not ready after {timeout}s")


def build_loadgen() -> Path:
    """Build bench/loadgen (Go, standard library only) into the cache, once per version of its
    sources (named by their hash: checkouts with different versions never overwrite each other)."""
    import hashlib
    from tidal_dev.lab.versions import cache_root
    source = Path(__file__).resolve().parent / "loadgen"
    digest = hashlib.sha256()
    for path in sorted(source.iterdir()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    out = cache_root().parent / "bench" / f"loadgen-{digest.hexdigest()[:16]}"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, GOTOOLCHAIN="local", CGO_ENABLED="0", GOFLAGS="-mod=mod")
        partial = out.with_name(f"{out.name}.{os.getpid()}")  # renamed when complete
        subprocess.run(["go", "build", "-trimpath", "-o", str(partial), "."], cwd=source, env=env, check=True)
        os.replace(partial, out)
    return out


def fixed_rate(loadgen: Path, url: str, ca: str, body: Path) -> dict:
    out = subprocess.run([str(loadgen), "-url", url, "-ca", ca, "-body", str(body), "-rate", str(RATE),
                          "-duration", f"{FIXED_RATE_SECONDS}s"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"loadgen failed: {out.stderr}")
    result = json.loads(out.stdout)
    if result["errors"]:
        raise SystemExit(f"loadgen saw {result['errors']} failed requests against {url}")
    return result


WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [[%s]]
"""


def wrk_rps(url: str, script: Path) -> float:
    out = subprocess.run(["wrk", "-t1", "-c32", f"-d{WRK_SECONDS}s", "-s", str(script), url],
                         capture_output=True, text=True, check=True).stdout
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise SystemExit(f"wrk saw {errors.group(1)} failed responses:\n{out}")
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline-server", nargs=3, metavar=("PORT", "CERT", "KEY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline_server:
        port, cert, key = args.baseline_server
        baseline_server(int(port), cert, key)
        return 0
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: install the Debian package `wrk` (make bench-admission does)")

    from tidal_dev.lab.pki import ensure_ca, issue
    from tidal_dev.lab.ports import free_ports
    work = Path(tempfile.mkdtemp(prefix="tidal-bench-"))
    ca = ensure_ca(work)
    cert = issue(ca, work, "server", "bench", server=True, ip_addresses=("127.0.0.1",))
    manager_bin = str(Path(sys.executable).with_name("tidal-manager"))
    tidal_port, health_port, base_port = free_ports(3)
    servers = {
        "tidal": subprocess.Popen([manager_bin, "--webhook-cert-file", str(cert.cert), "--webhook-key-file",
                                   str(cert.key), "--webhook-address", "127.0.0.1", "--webhook-port", str(tidal_port),
                                   "--health-address", "127.0.0.1", "--health-port", str(health_port),
                                   "--log-level", "WARNING"]),
        "baseline": subprocess.Popen([sys.executable, __file__, "--baseline-server", str(base_port),
                                      str(cert.cert), str(cert.key)]),
    }
    urls = {"tidal": f"https://127.0.0.1:{tidal_port}/mutate", "baseline": f"https://127.0.0.1:{base_port}/mutate"}
    try:
        wait_ready(f"http://127.0.0.1:{health_port}/readyz")
        wait_ready(f"https://127.0.0.1:{base_port}/readyz", ssl.create_default_context(cafile=str(ca.cert)))
        script = work / "post.lua"
        script.write_text(WRK_SCRIPT % json.dumps(BE_POD_REVIEW))
        body = work / "review.json"
        body.write_text(json.dumps(BE_POD_REVIEW))
        loadgen = build_loadgen()
        latency = {"tidal": [], "baseline": []}
        for round_ in range(ROUNDS):
            for name in ("baseline", "tidal"):  # interleaved, so noise hits both alike
                latency[name].append(fixed_rate(loadgen, urls[name], str(ca.cert), body))
            t, b = latency["tidal"][-1], latency["baseline"][-1]
            log(f"round {round_ + 1}: {t['requests']} reviews at {RATE}/s: p50 {t['p50_ms']:.3f} ms, "
                f"p99 {t['p99_ms']:.3f} ms (baseline p50 {b['p50_ms']:.3f}, p99 {b['p99_ms']:.3f})")
        rps = {"tidal": [], "baseline": []}
        for round_ in range(ROUNDS):
            for name in ("baseline", "tidal"):
                rps[name].append(wrk_rps(urls[name], script))
            log(f"round {round_ + 1}: max {rps['tidal'][-1]:.0f} reviews/s (baseline {rps['baseline'][-1]:.0f}/s)")
    finally:
        for proc in servers.values():
            proc.terminate()
            proc.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    def median(name: str, key: str) -> float:
        return round(statistics.median(r[key] for r in latency[name]), 3)

    max_rps = statistics.median(rps["tidal"])
    baseline = statistics.median(rps["baseline"])
    print(json.dumps({"rate": RATE, "p50_ms": median("tidal", "p50_ms"), "p99_ms": median("tidal", "p99_ms"),
                      "max_rps": round(max_rps), "baseline_p50_ms": median("baseline", "p50_ms"),
                      "baseline_p99_ms": median("baseline", "p99_ms"), "baseline_max_rps": round(baseline),
                      "max_rps_ratio_to_baseline": round(max_rps / baseline, 3), "rounds": ROUNDS}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
