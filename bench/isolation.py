"""make bench-isolation: does an online server keep its latency next to a CPU-hogging BE job?

One run measures five treatments on this machine, interleaved over several rounds (the machine
is shared and noisy: medians per treatment, and the solo figures of the same run are the
reference); by default the order is carry-over balanced (``--order balanced``, bench/round_order.py:
every treatment follows every other one equally often, so what one leaves behind does not always
land on the same next one):

* ``solo``          the online server alone;
* ``no_isolation``  plus a BE "pod" burning every CPU (stress-ng), with default cgroup weights;
* ``k8s_default``   the same BE pod treated as Kubernetes treats BestEffort pods (``cpu.shares=2``
                    on the pod and on the besteffort parent);
* ``tidal_usage``   the same BE pod with ``tidal-agent run`` enforcing (cpu.idle, batch
                    resources, suppression quota on the BE parent) with the run-queue delay
                    control off (``beIsolation.cpuInterference.enabled: false``): the quota
                    follows node usage only, as before issue 14;
* ``tidal``         the same with the policy's defaults: the BE quota also follows the online
                    threads' run-queue delay (``beIsolation.cpuInterference``), and since
                    2026-11-29 is in force only while that delay shows BE delaying the server
                    (``cpuSuppression.quota: onInterference``); since 2026-12-05 the BE container's
                    cgroup is in the BE idle group (``beIsolation.cpuPriority.idleGroup``, on by
                    default: ``/tidal-be/pod<uid>/<id>``, where the NRI plugin creates it; the bench
                    stands in for the runtime), the agent keeping the group idle and the container
                    at its batch resources. Every Tidal treatment but ``tidal_kubepods`` puts it
                    there unless ``--policy`` (or ``--variant-policy`` for ``tidal_variant``) turns
                    the switch off;
* ``tidal_slice``   (only when named in ``--treatments``) ``tidal`` with the online wake-up slice
                    on (``features.onlineSchedSlice``: the server's threads ask for a 100 µs slice);
* ``tidal_always``  (only when named) ``tidal`` with the BE quota in force every round
                    (``cpuSuppression.quota: always``): Tidal before 2026-11-29;
* ``solo_again``    (only when named) ``solo`` once more in each round: an A/A control. Its
                    ratio to solo is what the machine's noise alone makes of a treatment that
                    changes nothing, i.e. the smallest difference this run can resolve.
* ``tidal_kubepods`` (only when named) ``tidal`` with ``beIsolation.cpuPriority.idleGroup`` off:
                    the BE container below its pod's cgroup in ``kubepods/besteffort``, as Tidal
                    shipped until 2026-12-05 (``tidal`` of every figure before that day) and as on a
                    node without NRI;
* ``tidal_variant`` (only when named, with ``--variant-policy`` and/or ``--variant-agent-args``)
                    ``tidal`` with that merge patch on top and/or its agent started with those
                    arguments added: A/B of a policy or agent change against the shipped defaults
                    in one run (e.g. a feature switched off, to find what of the agent costs the
                    tail); with ``cpuPriority.idleGroup`` off in the patch, its BE container is
                    where ``tidal_kubepods``' is;
* ``be_idle_group`` (only when named) the idle group alone: the BE hog in an idle cgroup
                    (``cpu.idle = 1``) at the cpu hierarchy's root (a node's, where ``kubepods``
                    and ``system.slice`` are) instead of in its pod's cgroup, no agent. An idle
                    group only yields to its siblings; below ``kubepods`` an idle BE pod's
                    siblings are other BE pods: against the online pods and the node's daemons BE
                    competes through ``kubepods/besteffort`` (the kubelet's ``cpu.shares = 2``,
                    which it must keep writing) and ``kubepods`` itself, whose CPU time BE's is.
                    This measured what placing BE containers outside ``kubepods`` would give
                    before Tidal did (``be_idle_group_dir``; docs/node-engine.md).

Both Tidal treatments run against a private lab where a kwok node stands for this machine and
the pods are bound to it. The agent starts with each Tidal treatment. In every treatment with a
BE hog the server serves the same load beside it for ``--agent-settle`` seconds (20) before the
measured ones: the agent's controller reaches its steady state (as on a node whose agent has run
for a while), and every treatment has the hog beside the server for the same time before it is
measured (until 2026-11-29 only the Tidal treatments had the settle, the others 2 s); the BE hog
starts 2 s before the settle.

``--background lab`` runs the bench beside the load of a node's daemons (bench/lab_background.py:
the lab's control plane under a stream of API writes, outside every pod cgroup) for the whole
run, every treatment alike; ``--background none`` (default) adds nothing (the lab then idles).
Each line carries the machine's 1-minute load average at its end.

The online server is nginx with gzip serving a 16 KiB page from an LS "pod" cgroup, under a fixed
request rate (open loop: bench/loadgen sends on schedule whatever the latency, so queueing shows).
The load generator runs at SCHED_FIFO priority 1 (``--client-scheduling fifo``): on this one
machine it stands for clients on other machines, which a BE job here could not slow down.
Pods are kubelet-style cgroups below a private cgroup root (tidal_dev.testing.local_kubelet).

Output: one JSON line per treatment and round, then the medians as the last line:
``{"solo": R, "no_isolation": R, "k8s_default": R, "tidal_usage": R, "tidal": R, "background": B,
"settings": S}`` with R = ``{"p50_ms", "p99_ms", "achieved_rps", "node_busy_pct", "be_ops_per_s", "loadavg1",
"ls_runqueue_delay_us", "ls_cpu_us_per_request", "steal_pct", "idle_halts_per_s", "p99_vs_solo",
"p99_vs_solo_min", "p99_vs_solo_max"}`` (medians; the ratio of each round to that round's solo, median and spread)
and B what ran beside it. ``steal_pct`` is the share of CPU time the hypervisor took while the
load ran (``/proc/stat``): stalls the guest's scheduler does not see, and no isolation inside the
guest removes (``node_busy_pct`` counts it as busy); ``idle_halts_per_s`` how often the CPUs
entered a halting idle state (bench/cpu_idle.py: on a virtual machine a vCPU woken from a halt
starts the server's work late, and a BE hog keeps the vCPUs from halting; ``--no-idle-halt``
holds them polling for the run, as a latency-tuned node does). The Tidal treatments also carry
``agent_cpu_pct``: the agent's own CPU time over the settle and measured seconds, in % of one CPU
(a cost the other treatments do not carry), and what the agent said on its lines: ``be_throttles``
(quota decreases), ``be_cpu_events`` (its ``TidalBECPU*`` Node Events per reason),
``floor_stands_changes`` (what those Events said about how long the delay with BE at its floor
stands) and ``floor_stands_seconds_end`` (its NodeProfile's ``floorStandsSeconds``). S says what the run was asked for:
``--treatments`` runs a subset (solo always: the ratios' reference), ``--order`` their order, and
``--policy`` merges a patch into the Tidal treatments' ColocationPolicy spec, ``no_idle_halt``
whether idle CPUs were kept from halting. ``--stall-causes`` adds ``ls_stalls`` to every line (and,
pooled over the rounds, to the medians): what each run-queue wait of a server thread over 5 ms
waited behind — the hypervisor, the BE job, the server's own threads or other work — from the
kernel's scheduler trace of the measured seconds (bench/stall_causes.py). ``--pause-damon`` switches
the machine's DAMON page-out schemes off for the run and on again at its end (bench/damon.py):
their kernel thread runs beside the server in every treatment; ``pause_damon`` in S says so.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import secrets
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import agent_pod  # noqa: E402  (bench/, on the path just above)
import cpu_idle  # noqa: E402
import damon  # noqa: E402
import lab_background  # noqa: E402
import stall_causes  # noqa: E402
from round_order import ORDERS, round_order  # noqa: E402
from lab_background import CPU_ROOT  # noqa: E402  (sched_probe's too)

TREATMENTS = ("solo", "no_isolation", "k8s_default", "tidal_usage", "tidal", "tidal_slice", "tidal_always",
              "solo_again", "be_idle_group", "tidal_kubepods", "tidal_variant")
#: what a run measures unless --treatments says otherwise
DEFAULT_TREATMENTS = ("solo", "no_isolation", "k8s_default", "tidal_usage", "tidal")
#: the treatments without a BE job: solo, and its repeat in each round (the A/A control)
SOLO = ("solo", "solo_again")
#: the treatments that run the agent
TIDAL = ("tidal_usage", "tidal", "tidal_slice", "tidal_always", "tidal_kubepods", "tidal_variant")
CPUS = os.cpu_count() or 1


def log(msg: str) -> None:
    print(f"[bench-isolation] {msg}", file=sys.stderr, flush=True)


def besteffort_cpu_shares(kubelet, pod_uid: str, *more_dirs: Path) -> list[Path]:
    """The ``cpu.shares`` files the kubelet sets to 2 for a BestEffort pod: its QoS parent's
    (``kubepods/besteffort``), the pod's, and those of ``more_dirs`` (e.g. its containers')."""
    from tidal.agent.collector.cgroups import PodQOSClass
    dirs = (*kubelet.qos_dirs(PodQOSClass.BEST_EFFORT),
            *kubelet.dirs(kubelet.layout.pod_relpath(pod_uid, PodQOSClass.BEST_EFFORT)), *more_dirs)
    return [d / "cpu.shares" for d in dirs if (d / "cpu.shares").exists()]


def be_idle_group_dir(cgroups) -> Path:
    """``be_idle_group``'s cgroup: an idle group (``cpu.idle = 1``) at the root of the cpu
    hierarchy, named after the bench's cgroups (removed with them), cpu hierarchy only. At the
    root, not below the bench's node cgroup: an idle group only yields to its siblings, and the
    bench's node cgroup itself competes at the root with whatever else runs on this machine (other
    people's work, standing for a node's other top-level groups), as a node's ``kubepods`` does —
    one level down, the BE job's CPU time would again be charged to the group holding the online
    server (measured beside the busy lab: p99 31-246 ms there; at the root 2.0-3.3 ms in the 10
    rounds of two runs, and 2.0, 4.0 and 44.1 ms in a third)."""
    group = cgroups.make(CPU_ROOT / f"{cgroups.name}-be")
    (group / "cpu.idle").write_text("1")
    return group


def busy_cores(before, after) -> float:
    from tidal.agent.collector.rates import node_cpu_cores
    return node_cpu_cores(before, after) or 0.0


def proc_stat():
    from tidal.agent.collector.readers import read_proc_stat
    return read_proc_stat("/proc/stat")


def steal_ticks(text: str) -> tuple[int, int]:
    """(steal, total) clock ticks of ``/proc/stat``'s aggregate line: the time the hypervisor ran
    something else while this machine's CPUs had work (user nice system idle iowait irq softirq
    steal; guest time is inside user)."""
    fields = text.split("\n", 1)[0].split()
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        raise ValueError(f"not /proc/stat's cpu line: {text[:80]!r}")
    ticks = [int(x) for x in fields[1:9]]
    return ticks[7], sum(ticks)


def steal_pct(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """Share of the interval's CPU time stolen by the hypervisor (%): a stall the guest's
    scheduler cannot see (not in the run-queue delay), which no isolation inside it removes."""
    total = after[1] - before[1]
    return round(100.0 * max(0, after[0] - before[0]) / total, 2) if total > 0 else None


def in_cgroups(dirs):
    """preexec_fn: the child joins the cgroups before it execs (its workers follow)."""
    def join():
        for d in dirs:
            with open(d / "cgroup.procs", "w") as f:
                f.write(str(os.getpid()))
    return join


NGINX_CONF = """
daemon off;
master_process on;
worker_processes {workers};
user root;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    keepalive_requests 1000000;
    gzip on;
    gzip_comp_level 1;
    gzip_min_length 0;
    gzip_types text/html text/plain;
    server {{
        listen 127.0.0.1:{port};
        root {dir}/www;
        location / {{ }}
    }}
}}
"""


def page(size: int = 16 * 1024) -> str:
    rng = random.Random(7)
    words = ["tidal", "online", "offline", "latency", "batch", "node", "pod", "cgroup", "quota",
             "search", "ads", "web", "request", "colocation", "kernel", "sched", "idle", "burst"]
    out, n = [], 0
    while n < size:
        line = " ".join(rng.choice(words) for _ in range(12)) + "\n"
        out.append(line)
        n += len(line)
    return "<html><body><pre>\n" + "".join(out) + "</pre></body></html>\n"


class Nginx:
    def __init__(self, workdir: Path, dirs) -> None:
        from tidal_dev.lab.ports import free_port
        self.port = free_port()
        (workdir / "www").mkdir(parents=True)
        (workdir / "www" / "index.html").write_text(page())
        conf = workdir / "nginx.conf"
        conf.write_text(NGINX_CONF.format(workers=CPUS, dir=workdir, port=self.port))
        self.proc = subprocess.Popen([shutil.which("nginx") or "/usr/sbin/nginx", "-c", str(conf), "-p", str(workdir)],
                                     preexec_fn=in_cgroups(dirs), stdout=subprocess.DEVNULL,
                                     stderr=open(workdir / "stderr.log", "w"))
        deadline = time.monotonic() + 10
        import urllib.request
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/", timeout=1).read()
                return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    error_log = workdir / "error.log"
                    raise SystemExit(f"nginx did not start: {error_log.read_text() if error_log.exists() else ''}")
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGQUIT)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class StressNG:
    """stress-ng burning every CPU inside the BE pod's cgroups for ``seconds``."""

    def __init__(self, dirs, seconds: float, workdir: Path, method: str = "matrixprod") -> None:
        self.yaml = workdir / f"stress-{secrets.token_hex(3)}.yaml"
        self.proc = subprocess.Popen(
            [shutil.which("stress-ng") or "/usr/bin/stress-ng", "--cpu", str(CPUS), "--cpu-method", method,
             "--timeout", f"{int(seconds)}s", "--metrics-brief", "--yaml", str(self.yaml)],
            preexec_fn=in_cgroups(dirs), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def ops_per_s(self) -> float:
        self.proc.wait(timeout=60)
        text = self.yaml.read_text()
        match = re.search(r"bogo-ops-per-second-real-time:\s*([\d.]+)", text)
        if not match:
            raise SystemExit(f"no bogo-ops in stress-ng's output: {text[:500]}")
        return float(match.group(1))


def fixed_rate(loadgen: Path, url: str, rate: int, seconds: float, realtime_client: bool) -> dict:
    # The client stands for users on other machines: at SCHED_FIFO 1 it is never queued behind
    # the BE hog (or anything else of this machine's CFS tasks), so what is measured is the
    # server's delay, not the client's own starvation. The kernel's RT throttling (95 % of each
    # second) bounds it; it sleeps between sends anyway.
    prefix = ["chrt", "-f", "1"] if realtime_client else []
    # in the root cpu cgroup: with the kernel's RT group scheduling a child group has no RT runtime
    # (SCHED_FIFO is refused there), and the bench itself may run in --daemons-cgroup system.slice
    out = subprocess.run([*prefix, str(loadgen), "-url", url, "-rate", str(rate), "-duration", f"{seconds}s",
                          "-warmup", "200"], capture_output=True, text=True, timeout=seconds + 120,
                         preexec_fn=in_cgroups([CPU_ROOT]))
    if out.returncode != 0:
        raise SystemExit(f"loadgen failed: {out.stderr}")
    return json.loads(out.stdout)


class WaitSampler:
    """bench/wait_sampler.py at SCHED_FIFO 2 in the root cpu cgroup, over the measured seconds."""

    def __init__(self, threads, seconds: float, workdir: Path) -> None:
        self.out = workdir / f"waits-{secrets.token_hex(3)}.json"
        self.proc = subprocess.Popen(
            ["chrt", "-f", "2", sys.executable, str(Path(__file__).with_name("wait_sampler.py")), f"{seconds:g}",
             ",".join(map(str, threads)), str(self.out)], preexec_fn=in_cgroups([CPU_ROOT]))

    def result(self) -> tuple[float | None, int | None]:
        """(longest wait of any thread in ms, waits over 5 ms in all); Nones if it failed."""
        if self.proc.wait(timeout=60) != 0 or not self.out.exists():
            return None, None
        per_thread = json.loads(self.out.read_text()).values()
        return max((w[0] for w in per_thread), default=0.0), sum(w[1] for w in per_thread)


def ls_threads(ls_dir: Path):
    """The run-queue counters of the online server's threads (what the agent's signal reads),
    and the CPU time each has run (ns)."""
    from tidal.agent.qos.be_cpu_interference import RunQueueSample, parse_schedstat
    threads, ran = {}, {}
    for tid in (ls_dir / "tasks").read_text().split():
        try:
            run, waited, slices = parse_schedstat(Path(f"/proc/{tid}/schedstat").read_text())
        except (OSError, ValueError):
            continue
        threads[int(tid)] = (waited, slices)
        ran[int(tid)] = run
    return RunQueueSample(time.monotonic_ns(), threads), ran


def cpu_us_per_request(before: dict[int, int], after: dict[int, int], requests: float) -> float | None:
    """The online server's CPU time per request served (µs; threads present in both readings):
    it grows when something slows the server's own work while it runs (caches another task
    evicted, a sibling hardware thread or the hypervisor), which the run-queue delay does not see."""
    ran = sum(after[tid] - before[tid] for tid in after.keys() & before.keys() if after[tid] >= before[tid])
    return round(ran / requests / 1000, 1) if requests > 0 else None


def measure(loadgen, url, rate, seconds, be_dirs, workdir, realtime_client, ls_dir: Path, settle: float = 0,
            longest_waits: bool = False, be_method: str = "matrixprod", trace_stalls: bool = False) -> dict:
    """One treatment: the BE hog starts 2 s before the measured seconds, plus ``settle`` seconds
    during which the server already serves the same load (not measured): the agent's controller
    settles, and every treatment with a BE hog has had it beside the server equally long."""
    from tidal.agent.qos.be_cpu_interference import signal as runqueue_signal
    stress = StressNG(be_dirs, seconds + settle + 6, workdir, be_method) if be_dirs else None
    time.sleep(2 if stress else 0.5)
    if settle:
        fixed_rate(loadgen, url, rate, settle, realtime_client)
    before = proc_stat()
    stolen = steal_ticks(Path("/proc/stat").read_text())
    halted, started = cpu_idle.halts(), time.monotonic()
    threads, ran = ls_threads(ls_dir)
    waits = WaitSampler(threads.threads, seconds, workdir) if longest_waits else None
    trace = stall_causes.SchedTrace() if trace_stalls else None
    with trace.recording() if trace else contextlib.nullcontext():
        result = fixed_rate(loadgen, url, rate, seconds, realtime_client)
    longest_ms, long_waits = waits.result() if waits else (None, None)
    threads_after, ran_after = ls_threads(ls_dir)
    waited = runqueue_signal(threads, threads_after)
    busy = busy_cores(before, proc_stat())
    stolen = steal_pct(stolen, steal_ticks(Path("/proc/stat").read_text()))
    halted = round((cpu_idle.halts() - halted) / (time.monotonic() - started), 1)
    if trace:  # after the figures above (reading and parsing the trace takes seconds): the BE job's
        # tasks while it still runs, the server's threads of both readings
        be_tasks = {int(t) for d in (be_dirs or ()) for t in (Path(d) / "tasks").read_text().split()}
        text, overran = trace.collect()
        found = stall_causes.stalls(stall_causes.parse(text), set(threads.threads) | set(threads_after.threads),
                                    be_tasks)
        stalls = {**stall_causes.summary(found), "trace_overran": overran}
    return {"p50_ms": result["p50_ms"], "p99_ms": result["p99_ms"],
            "achieved_rps": round(result["ok_per_s"], 1), "node_busy_pct": round(busy / CPUS * 100, 1),
            "be_ops_per_s": round(stress.ops_per_s(), 1) if stress else 0.0,
            "errors": result["errors"], "loadavg1": round(os.getloadavg()[0], 2),
            # the online server's threads over the measured seconds: mean run-queue delay per
            # scheduling slice (the agent's signal) and time waited per second
            "ls_runqueue_delay_us": round(waited.delay_us or 0.0, 1) if waited else None,
            "ls_wait_ratio": round(waited.wait_ratio, 4) if waited else None,
            "ls_cpu_us_per_request": cpu_us_per_request(ran, ran_after, result["ok_per_s"] * seconds),
            # --longest-waits: the longest single run-queue wait of a server thread
            # (bench/wait_sampler.py) and how many lasted over 5 ms: the stalls a p99 feels and
            # the mean per slice hides
            **({"ls_longest_wait_ms": longest_ms, "ls_waits_over_5ms": long_waits} if waits else {}),
            # --stall-causes: what each of the server's waits over 5 ms waited behind (bench/stall_causes.py)
            **({"ls_stalls": stalls} if trace else {}),
            "steal_pct": stolen,
            # how often per second the CPUs entered a halting idle state (bench/cpu_idle.py): a
            # vCPU woken from one starts the server's work late; 0 with --no-idle-halt
            "idle_halts_per_s": halted}


AGENT_METRICS = {"tidal_be_cpu_quota_millicores": "be_quota_millicores_end",
                 "tidal_online_runqueue_delay_microseconds": "ls_runqueue_delay_us_end",
                 "tidal_be_cpu_interference_throttles_total": "be_throttles"}


def be_cpu_events(core, node: str, seen: set[str]) -> list[tuple[str, str]]:
    """The agent's ``TidalBECPU*`` Node Events of ``node`` whose names are not in ``seen``
    (oldest first), as (reason, message); ``seen`` then holds them too."""
    items = [e for e in core.list_namespaced_event("default").items
             if e.reason and e.reason.startswith("TidalBECPU") and e.involved_object.name == node
             and e.metadata.name not in seen]
    seen.update(e.metadata.name for e in items)
    items.sort(key=lambda e: e.metadata.creation_timestamp)
    return [(e.reason, e.message) for e in items]


def events_summary(events: list[tuple[str, str]]) -> dict:
    """Per reason how many, and the messages that changed how long the floor's delay stands."""
    counts = dict(Counter(reason for reason, _ in events))
    changes = []
    for reason, message in events:
        if reason == "TidalBECPUReleased" and "now stands for" in message:
            changes.append(message.rsplit("; ", 1)[-1])
        elif reason == "TidalBECPUFloorRecheck":
            changes.append("rounds well below the floor's delay: " + message.rsplit(": ", 1)[-1])
    return {"be_cpu_events": counts, "floor_stands_changes": changes}


def agent_metrics(port: int) -> dict:
    """What the agent reports at the end of a treatment: the BE quota in force, the online
    threads' run-queue delay of the last round, the quota decreases so far."""
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for line in text.splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name in AGENT_METRICS:
            out[AGENT_METRICS[name]] = round(float(line.rsplit(" ", 1)[1]), 1)
    return out


def median_of(runs: list[dict]) -> dict:
    keys = ("p50_ms", "p99_ms", "achieved_rps", "node_busy_pct", "be_ops_per_s", "loadavg1", "ls_runqueue_delay_us",
            "ls_cpu_us_per_request", "steal_pct", "idle_halts_per_s", "ls_longest_wait_ms", "ls_waits_over_5ms",
            "agent_cpu_pct")
    return {k: round(statistics.median(r[k] for r in runs), 3) for k in keys if all(r.get(k) is not None for r in runs)}


def vs_solo(runs: list[dict], solo: list[dict]) -> dict:
    """Each round's p99 over the same round's solo p99: median and spread."""
    ratios = [r["p99_ms"] / s["p99_ms"] for r, s in zip(runs, solo)]
    return {"p99_vs_solo": round(statistics.median(ratios), 3), "p99_vs_solo_min": round(min(ratios), 3),
            "p99_vs_solo_max": round(max(ratios), 3)}


def treatment_list(text: str) -> tuple[str, ...]:
    """``--treatments``: a comma-separated subset of TREATMENTS, listed in TREATMENTS' order with solo
    first whether named or not (every ratio divides by the same round's solo; ``--order`` orders the
    list each round)."""
    names = {t.strip() for t in text.split(",") if t.strip()}
    unknown = sorted(names - set(TREATMENTS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown treatment(s) {', '.join(unknown)}; "
                                         f"allowed: {', '.join(TREATMENTS)}")
    return tuple(t for t in TREATMENTS if t in names or t == "solo")


def policy_patch(text: str) -> dict:
    """``--policy``: a JSON object (a merge patch to the policy's spec); anything else is refused here,
    before a lab is started. The fields themselves are the API server's to validate."""
    try:
        patch = json.loads(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON: {err}") from None
    if not isinstance(patch, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object (a merge patch to the policy's spec), "
                                         f"not {type(patch).__name__}")
    return patch


def overlay(base: dict, top: dict) -> dict:
    """``top``'s fields over ``base``'s, recursively, as one merge patch: a null in either stays
    (it deletes the field where the patch is applied)."""
    out = dict(base)
    for key, value in top.items():
        both = isinstance(value, dict) and isinstance(base.get(key), dict)
        out[key] = overlay(base[key], value) if both else value
    return out


def _cpu_priority_field(name: str, treatment_spec: dict, policy: dict) -> bool:
    """``beIsolation.cpuPriority.<name>`` of a Tidal treatment: the treatment's patch, else
    ``--policy``'s, else the policy's default."""
    from tidal.api.policy import ColocationPolicy
    for spec in (treatment_spec, policy):
        value = ((spec.get("beIsolation") or {}).get("cpuPriority") or {}).get(name)
        if value is not None:
            return bool(value)
    return ColocationPolicy().to_spec()["beIsolation"]["cpuPriority"][name]


def cpu_priority_on(treatment_spec: dict, policy: dict) -> bool:
    """Whether a Tidal treatment runs with ``beIsolation.cpuPriority`` on (its default). Without
    it the agent makes nothing idle."""
    return _cpu_priority_field("enabled", treatment_spec, policy)


def idle_group_asked(policy: dict, treatment_spec: dict) -> bool:
    """Whether a Tidal treatment's BE container goes in the BE idle group, where the NRI plugin
    creates it while ``beIsolation.cpuPriority.idleGroup`` is in force: the switch (on by default
    since 2026-12-05) and BE CPU priority both on."""
    return _cpu_priority_field("idleGroup", treatment_spec, policy) and cpu_priority_on(treatment_spec, policy)


def undo_patch(patch: dict, spec: dict) -> dict:
    """The merge patch that puts back what ``patch`` changes of ``spec``: each field it names at
    its value in ``spec``, or null (the policy's default) where ``spec`` has none. The nulls go on
    the leaves, not on a whole object ``spec`` lacks: a treatment's own patch naming that object
    too would replace such a null (:func:`overlay`), and the variant's fields would stay."""
    out: dict = {}
    for key, value in patch.items():
        stored = spec.get(key)
        if isinstance(value, dict) and (stored is None or isinstance(stored, dict)):
            out[key] = undo_patch(value, stored or {})
        else:
            out[key] = stored
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=int, default=500, help="online requests per second")
    parser.add_argument("--seconds", type=float, default=12, help="measured seconds per treatment")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--agent-settle", type=float, default=20,
                        help="seconds the server serves beside the BE hog (and a just started agent) before the "
                             "measured ones, in every treatment with a BE hog: the agent's controller's steady "
                             "state (the allowance moves 5 %% of the CPUs a round), the same exposure for all")
    parser.add_argument("--suppression-percent", type=int, default=100,
                        help="the policy's beIsolation.cpuSuppression.thresholdPercent for the tidal run")
    parser.add_argument("--client-scheduling", choices=("fifo", "normal"), default="fifo",
                        help="the load generator's scheduling: fifo (SCHED_FIFO 1: a client on another "
                             "machine) or normal (it competes with the BE hog for this machine's CPUs)")
    lab_background.add_arguments(parser)  # --background, --background-rate, --daemons-cgroup
    agent_pod.add_argument(parser)
    parser.add_argument("--longest-waits", action="store_true",
                        help="also measure each round's longest single run-queue wait of a server thread "
                             "(ls_longest_wait_ms, ls_waits_over_5ms; bench/wait_sampler.py, which reads the "
                             "threads' schedstat every millisecond at SCHED_FIFO: it costs a few %% of a CPU)")
    parser.add_argument("--stall-causes", action="store_true",
                        help="also say what each run-queue wait of a server thread over 5 ms waited behind "
                             "(ls_stalls: the hypervisor, the BE job, the server's own threads or other work such "
                             "as the node's daemons; bench/stall_causes.py, from the kernel's scheduler trace "
                             "recorded during the measured seconds: tracefs, root)")
    parser.add_argument("--treatments", type=treatment_list, default=DEFAULT_TREATMENTS, metavar="T,T,...",
                        help=f"the treatments to run (solo always runs: the ratios' reference; --order says in "
                             f"which order); default {','.join(DEFAULT_TREATMENTS)}; also tidal_slice, tidal_always, "
                             f"solo_again (solo once more in each round: the noise floor), be_idle_group (the idle "
                             f"group alone: BE in an idle cgroup at the cgroup root, no agent), tidal_kubepods (tidal with the "
                             f"BE idle group off: BE below kubepods, as shipped until 2026-12-05) and "
                             f"tidal_variant (tidal with --variant-policy and/or --variant-agent-args)")
    parser.add_argument("--order", choices=ORDERS, default="balanced",
                        help="the treatments' order within a round (bench/round_order.py): balanced (default "
                             "since 2026-12-03; a Williams design: every treatment follows every other one equally "
                             "often), rotate (turned by one place each round: each treatment keeps its predecessor; "
                             "the default from 2026-11-29) or fixed (as listed, solo first; every figure before "
                             "2026-11-29)")
    parser.add_argument("--policy", type=policy_patch, default={}, metavar="JSON",
                        help="a JSON merge patch to the ColocationPolicy spec of the Tidal treatments, e.g. "
                             "'{\"beIsolation\": {\"cpuInterference\": {\"targetDelayMicroseconds\": 25}}}' "
                             "(the API server validates it)")
    parser.add_argument("--variant-policy", type=policy_patch, default=None, metavar="JSON",
                        help="tidal_variant's merge patch over the Tidal treatments' policy (with --policy); the "
                             "other Tidal treatments run with the fields it names put back")
    parser.add_argument("--variant-agent-args", type=shlex.split, default=[], metavar="ARGS",
                        help="tidal_variant's agent is started with these arguments added to `tidal-agent run`'s "
                             "(one string, split as a shell would), e.g. '--own-scheduling inherit'")
    parser.add_argument("--be-method", default="matrixprod", metavar="METHOD",
                        help="the BE hog's stress-ng --cpu-method: matrixprod (default: 128 x 128 matrices, "
                             "a job whose data fills the core's caches) or e.g. loop (a spin that touches "
                             "almost no memory: what is left is the scheduler's part)")
    parser.add_argument("--no-idle-halt", action="store_true",
                        help="hold a 0 µs CPU latency request (/dev/cpu_dma_latency) for the whole run: idle "
                             "CPUs poll instead of halting, as a latency-tuned node's do (tuned's "
                             "latency-performance profile); on a virtual machine a halted vCPU wakes through the "
                             "host, which makes solo's tail longer than a treatment's whose BE hog keeps the CPUs "
                             "busy (bench/cpu_idle.py)")
    parser.add_argument("--pause-damon", action="store_true",
                        help="switch the machine's DAMON page-out schemes off for the run (back on at its end): "
                             "their kernel thread (kdamond) runs beside the server in every treatment "
                             "(bench/damon.py)")
    args = parser.parse_args()
    if ("tidal_variant" in args.treatments) != (args.variant_policy is not None or bool(args.variant_agent_args)):
        parser.error("--variant-policy or --variant-agent-args and the treatment tidal_variant go together: "
                     "they are what the variant changes")
    args.variant_policy = args.variant_policy or {}
    if args.stall_causes and (why := stall_causes.SchedTrace().available()):
        parser.error(f"--stall-causes cannot run here: {why}")
    if os.geteuid() != 0:
        raise SystemExit("bench-isolation needs root: it creates cgroups and moves processes into them")
    for tool in ("nginx", "stress-ng"):
        if not (shutil.which(tool) or Path(f"/usr/sbin/{tool}").exists()):
            raise SystemExit(f"{tool} is missing: run it through `make bench-isolation`, which installs it")

    from admission import build_loadgen
    from agent import cpu_seconds
    from kubernetes import client

    from tidal.api import qos
    from tidal.agent.collector.cgroups import PodQOSClass
    from tidal.agent.executor.sched import get_attr
    from tidal.crds import crd_manifests
    from tidal_dev.lab import processes
    from tidal_dev.lab.apply import create_or_replace_all
    from tidal_dev.lab.lab import Lab
    from tidal_dev.testing.kwok import kwok_node
    from tidal_dev.lab.ports import free_port
    from tidal_dev.testing.local_kubelet import LocalKubelet
    from tidal_dev.testing.real_cgroups import RealCgroups

    loadgen = build_loadgen()
    workdir = Path(tempfile.mkdtemp(prefix="tidal-bench-isolation-"))
    cgroups = RealCgroups(workdir)
    kubelet = LocalKubelet(cgroups)
    lab = Lab(workdir / "lab")
    nginx = None
    agent = None
    background = None
    background_report: dict = {"kind": "none"}
    node = "bench-node"
    results: dict[str, list[dict]] = {t: [] for t in args.treatments}
    events_seen: set[str] = set()  # the agent's Events already counted in an earlier treatment
    held = contextlib.ExitStack()  # --no-idle-halt's CPU latency request, dropped at the end
    try:
        if args.no_idle_halt:
            held.enter_context(cpu_idle.IdleLatencyHold(0))
            log("holding a 0 µs CPU latency request: idle CPUs poll, they do not halt")
        if args.pause_damon:
            paused = damon.pause()
            held.callback(damon.resume, paused)
            log(f"DAMON page-out paused for the run: {', '.join(map(str, paused)) or 'none was running'}")
        lab_background.place_daemons(args, kubelet, cgroups, log)
        agent_dirs = agent_pod.create(kubelet, log) if args.agent_cgroup == "pod" else None
        log(f"starting a private lab in {lab.dir}")
        lab.up(nodes=0, real_nodes=0)  # kwok nodes only: the bench needs no kubelet, containerd or kube-proxy
        with lab.api_client() as api:
            create_or_replace_all(api, crd_manifests(), wait_established=True)
            core = client.CoreV1Api(api)
            custom = client.CustomObjectsApi(api)
            custom.create_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "colocationpolicies", {
                "apiVersion": qos.API_GROUP_VERSION, "kind": "ColocationPolicy", "metadata": {"name": "default"},
                "spec": {"evictionWatermarks": {"enabled": False},
                         "beIsolation": {"cpuSuppression": {"thresholdPercent": args.suppression_percent}}}})
            if args.policy:
                custom.patch_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "colocationpolicies", "default",
                                                   {"spec": args.policy})
            # what the Tidal treatments other than the variant put back of the variant's fields
            undo_variant = undo_patch(args.variant_policy, custom.get_cluster_custom_object(
                qos.API_GROUP, qos.API_VERSION, "colocationpolicies", "default")["spec"])
            capacity = {"cpu": str(CPUS), "memory": "24Gi", "pods": "110",
                        qos.BATCH_CPU_RESOURCE: str(CPUS * 1000), qos.BATCH_MEMORY_RESOURCE: str(8 << 30)}
            kwok_node(core, node, capacity, {qos.COLOCATION_NODE_LABEL: "true"})
            core.create_namespace({"metadata": {"name": "bench"}})
            while not core.list_namespaced_service_account("bench").items:  # pods need "default"
                time.sleep(0.2)

            def pod(name, level, requests, limits):
                running = kubelet.run_pod(core, "bench", {
                    "metadata": {"name": name, "annotations": {qos.QOS_ANNOTATION: level}},
                    "spec": {"nodeName": node, "automountServiceAccountToken": False,
                             "containers": [{"name": "main", "image": "registry.invalid/app:1",
                                             "resources": {"requests": requests, "limits": limits}}]}})
                return running.dirs, running

            web_dirs, _ = pod("web", "LS", {"cpu": "1", "memory": "512Mi"}, {})
            batch = {qos.BATCH_CPU_RESOURCE: str(CPUS * 1000), qos.BATCH_MEMORY_RESOURCE: str(2 << 30)}
            be_dirs, be_pod = pod("batch", "BE", batch, dict(batch))
        be_pod_dirs = kubelet.dirs(kubelet.layout.pod_relpath(be_pod.uid, PodQOSClass.BEST_EFFORT))
        cpu_files = besteffort_cpu_shares(kubelet, be_pod.uid)

        background, background_report = lab_background.start(args, lab.kubeconfig_path, workdir, log)

        nginx = Nginx(workdir / "nginx", web_dirs)
        url = f"http://127.0.0.1:{nginx.port}/index.html"
        log(f"nginx on {url} in {web_dirs[0]}; {args.rate} req/s for {args.seconds:g}s per treatment, "
            f"{args.rounds} rounds")

        for round_ in range(args.rounds):
            for treatment in round_order(args.treatments, round_, args.order):
                if treatment == "k8s_default" or treatment in TIDAL:
                    # what the kubelet writes for every BestEffort pod; the Tidal treatments run over it
                    # as on a node (Tidal's CPU priority writes the parent's the same; with it switched
                    # off, by a --policy or the variant, the BE pod stays at the kubelet's)
                    for f in cpu_files:
                        f.write_text("2")
                if treatment in TIDAL:
                    # the --policy patch's slice switch holds unless this is the treatment that turns it on
                    asked = args.policy.get("features", {}).get("onlineSchedSlice", {})
                    slice_on = treatment == "tidal_slice" or bool(asked.get("enabled", False)) or (
                        treatment == "tidal_variant" and args.variant_policy.get("features", {}).get(
                            "onlineSchedSlice", {}).get("enabled") is True)
                    # ... and its quota mode unless this is the treatment of the quota always in force
                    quota = "always" if treatment == "tidal_always" else args.policy.get("beIsolation", {}).get(
                        "cpuSuppression", {}).get("quota", "onInterference")
                    # ... and where its BE container is: the BE idle group as shipped, unless the
                    # --policy patch (or the variant's) turns it off or this is the treatment without it
                    idle_group = treatment != "tidal_kubepods" and idle_group_asked(
                        args.policy, args.variant_policy if treatment == "tidal_variant" else {})
                    if idle_group:  # where the NRI plugin creates the BE container while the switch is on
                        idle_dirs = kubelet.create_pod(be_pod.uid, PodQOSClass.BE_IDLE_GROUP,
                                                       [be_pod.container_id])[be_pod.container_id]
                    own = {"beIsolation": {"cpuInterference": {"enabled": treatment != "tidal_usage"},
                                           "cpuPriority": {"idleGroup": idle_group},
                                           "cpuSuppression": {"quota": quota}},
                           "features": {"onlineSchedSlice": {"enabled": slice_on}}}
                    spec = overlay(own, args.variant_policy) if treatment == "tidal_variant" else \
                        overlay(undo_variant, own)
                    with lab.api_client() as api:
                        client.CustomObjectsApi(api).patch_cluster_custom_object(
                            qos.API_GROUP, qos.API_VERSION, "colocationpolicies", "default", {"spec": spec})
                    agent = processes.start("agent", [
                        str(Path(sys.executable).with_name("tidal-agent")), "run", "--node", node,
                        "--kubeconfig", str(lab.kubeconfig_path), "--cgroup-driver", "cgroupfs",
                        "--kubelet-cgroup-root", kubelet.kubelet_root, "--state-dir", str(workdir / "agent"),
                        "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics_port := free_port()),
                        *(args.variant_agent_args if treatment == "tidal_variant" else [])],
                        workdir / "agent.log")
                    if agent_dirs:  # --agent-cgroup pod: where its DaemonSet would run it
                        kubelet.move(agent.pid, agent_dirs)
                    idle = (idle_dirs[0].parent if idle_group else be_pod_dirs[0]) / "cpu.idle"
                    deadline = time.monotonic() + 30
                    while cpu_priority_on(spec, args.policy) and idle.read_text().strip() != "1":
                        if time.monotonic() > deadline:
                            raise SystemExit(f"the agent did not isolate the BE pod (log {workdir / 'agent.log'})")
                        time.sleep(0.2)
                hog_dirs = [be_idle_group_dir(cgroups)] if treatment == "be_idle_group" else \
                    idle_dirs if treatment in TIDAL and idle_group else be_dirs
                agent_cpu = (cpu_seconds(agent.pid), time.monotonic()) if treatment in TIDAL else None
                r = measure(loadgen, url, args.rate, args.seconds,
                            None if treatment in SOLO else hog_dirs, workdir, args.client_scheduling == "fifo",
                            web_dirs[0], 0 if treatment in SOLO else args.agent_settle,
                            args.longest_waits, args.be_method, args.stall_causes)
                if treatment == "k8s_default":
                    for f in cpu_files:
                        f.write_text("1024")
                if treatment in TIDAL:
                    r.update(agent_metrics(metrics_port))
                    with lab.api_client() as api:  # what the agent said, and how long the floor stands
                        r.update(events_summary(be_cpu_events(client.CoreV1Api(api), node, events_seen)))
                        profile = client.CustomObjectsApi(api).get_cluster_custom_object(
                            qos.API_GROUP, qos.API_VERSION, "nodeprofiles", node)
                        r["floor_stands_seconds_end"] = (profile.get("status", {}).get("cpuInterference", {})
                                                         .get("floorStandsSeconds"))
                    # the agent's own CPU over the settle and measured seconds, in % of one CPU
                    r["agent_cpu_pct"] = round(100 * (cpu_seconds(agent.pid) - agent_cpu[0])
                                               / (time.monotonic() - agent_cpu[1]), 2)
                    processes.stop(agent)
                    agent = None
                    subprocess.run([str(Path(sys.executable).with_name("tidal-agent")), "restore", "--node", node,
                                    "--kubeconfig", str(lab.kubeconfig_path), "--state-dir", str(workdir / "agent")],
                                   check=True, capture_output=True)
                    if idle_group:  # the container's cgroup goes with it, as runc removes it; the pod's too
                        for d in (*idle_dirs, *(d.parent for d in idle_dirs)):
                            d.rmdir()
                    if slice_on:  # restore put the server's threads' own slice back (the agent's journal)
                        given = asked.get("sliceMicroseconds", 100)
                        left = [t for t in (web_dirs[0] / "tasks").read_text().split()
                                if get_attr(int(t)).runtime_ns == given * 1000]
                        if left:
                            raise SystemExit(f"tidal-agent restore left server threads {left} at the {given} µs slice")
                    for f in cpu_files:  # after the restore: the kernel refuses a weight on a group still idle
                        f.write_text("1024")
                results[treatment].append(r)
                print(json.dumps({"round": round_ + 1, "treatment": treatment, **r}), flush=True)
    finally:
        background_report = lab_background.stop(background, background_report)
        if agent is not None:
            processes.stop(agent)
        if nginx is not None:
            nginx.stop()
        lab.down(wipe=True)
        lab_background.release_daemons(args)
        cgroups.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
        held.close()
    summary: dict = {t: {**median_of(runs), **vs_solo(runs, results["solo"])} for t, runs in results.items()}
    if args.stall_causes:  # every round's stalls of a treatment together
        for t, runs in results.items():
            summary[t]["ls_stalls"] = stall_causes.pooled([r["ls_stalls"] for r in runs])
    log("p99 vs solo (median of rounds' ratios): "
        + ", ".join(f"{t} {summary[t]['p99_vs_solo']:.2f}x" for t in args.treatments))
    for name in (t for t in TIDAL if t in results and "k8s_default" in results):
        below = sum(t["p99_ms"] < k["p99_ms"] for t, k in zip(results[name], results["k8s_default"]))
        summary[f"{name}_below_k8s_default_rounds"] = f"{below}/{len(results[name])}"
    summary["settings"] = {"treatments": list(args.treatments), "order": args.order,
                           "suppression_percent": args.suppression_percent,
                           "policy": args.policy, "variant_policy": args.variant_policy,
                           "variant_agent_args": args.variant_agent_args,
                           "daemons_cgroup": args.daemons_cgroup, "agent_cgroup": args.agent_cgroup,
                           "no_idle_halt": args.no_idle_halt, "be_method": args.be_method,
                           "pause_damon": args.pause_damon}
    summary["background"] = background_report
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
