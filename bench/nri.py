"""Benchmark of the NRI plugin: `make bench-nri`.

What the plugin adds to container creation, measured where the runtime measures it: NRI's own
runtime side (github.com/containerd/nri pkg/adaptation, in the Go harness of tests/nri) times
each CreateContainer call. Same run, same harness process, same BE pod and container:

1. baseline: 1,000 CreateContainer calls with no plugin connected;
2. 1,000 CreateContainer calls with the real `tidal-agent nri` process registered, answering
   each with the BE adjustments (the most work the plugin does per call).

Each phase starts with 100 unmeasured calls. ``p50_ms``/``p99_ms`` are the time the plugin adds:
the with-plugin quantile minus the baseline's. Progress on stderr, one JSON object last on stdout.
"""
from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "nri"))

from nri_harness import Runtime, build_harness  # noqa: E402

CALLS = 1000
WARMUP = 100
POD = {"id": "bench-pod", "name": "batch", "namespace": "bench", "uid": "bench-uid", "annotations": {
    "colocation.tidal.io/qos-level": "BE",
    "colocation.tidal.io/batch-resources": json.dumps(
        {"worker": {"kubernetes.io/batch-cpu": "1500", "kubernetes.io/batch-memory": "2Gi"}})}}
CONTAINER = {"id": "bench", "name": "worker", "linux": {"resources": {"cpu": {"shares": {"value": "2"}}}}}


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def phase(runtime: Runtime, name: str) -> list[float]:
    runtime.cmd("bench", n=WARMUP, pod_id=POD["id"], container={**CONTAINER, "id": f"warm-{name}"}, timeout=120)
    answer = runtime.cmd("bench", n=CALLS, pod_id=POD["id"], container={**CONTAINER, "id": name}, timeout=300)
    ms = [d / 1e6 for d in answer["durations_ns"]]
    print(f"{name}: {answer['plugins']} plugin(s), p50 {quantile(ms, .5):.3f} ms, "
          f"p99 {quantile(ms, .99):.3f} ms, max {max(ms):.3f} ms", file=sys.stderr)
    return ms


def main() -> int:
    binary = build_harness()
    with tempfile.TemporaryDirectory(prefix="nri-bench-", dir="/tmp") as tmp:
        runtime = Runtime(binary, Path(tmp) / "nri.sock")
        plugin = None
        try:
            runtime.cmd("start")
            runtime.cmd("run_pod", pod=POD)
            baseline = phase(runtime, "baseline")
            plugin = subprocess.Popen(
                [sys.executable, "-c", "from tidal.agent.main import main; raise SystemExit(main())",
                 "--log-level", "WARNING", "nri", "--socket", str(runtime.socket)],
                env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"})  # no API lookups
            runtime.cmd("wait_plugins", n=1, timeout_ms=30_000)
            with_plugin = phase(runtime, "with-plugin")
            check = runtime.cmd("create", pod_id=POD["id"], container={**CONTAINER, "id": "check"})
            assert check["adjust"]["linux"]["resources"]["cpu"]["quota"]["value"] == "150000", check
        finally:
            if plugin is not None:
                plugin.send_signal(signal.SIGTERM)
                plugin.wait(30)
            runtime.close()
    result = {
        "calls": CALLS,
        "p50_ms": round(quantile(with_plugin, .5) - quantile(baseline, .5), 3),
        "p99_ms": round(quantile(with_plugin, .99) - quantile(baseline, .99), 3),
        "with_plugin_p50_ms": round(quantile(with_plugin, .5), 3),
        "with_plugin_p99_ms": round(quantile(with_plugin, .99), 3),
        "with_plugin_mean_ms": round(statistics.fmean(with_plugin), 3),
        "baseline_p50_ms": round(quantile(baseline, .5), 3),
        "baseline_p99_ms": round(quantile(baseline, .99), 3),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
