# SPDX-License-Identifier: Apache-2.0
"""The replay source: drives the agent's pipeline from a trace instead of the kernel, so the
lab's kwok nodes carry realistic online usage. One process acts for many fake nodes.

Trace: the generic long CSV ``timestamp,series_id,usage,request`` (seconds, id, cores,
cores), e.g. the Azure 2019 VMs converted by ``tidal predict convert-azure``. Every node
replays all series of the trace as its online (LS) pods — the traces' benchmark treats them as
one node — starting at its own offset, so nodes differ. Trace time advances `speed`
seconds per real second; the predictors see trace time, as they would on a real node. The
prediction is made by the agent's own code (`tidal.agent.run.Predictions`) with the policy's
predictor. The trace has no memory: online memory is modelled as `memory_bytes_per_core` ×
cores used (stated in the profile as `model: replay`).

The replaying agent never evicts and never taints: it reports each node's mode (read from the
kwok node's labels and annotations, as a real agent reads its own) in ``status.mode`` with
``evictionAllowed`` false and the reason. Given capabilities (``tidal-agent replay`` probes the
machine it runs on, which the fake nodes stand for), it reports them for every node it replays,
marked by the condition ``Replayed=True`` (`replayed_report`), so the console shows them as the
replay's, not the node's.
"""
from __future__ import annotations

import asyncio
import bisect
import csv
import datetime
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from tidal.agent.collector.histogram import WindowAggregate
from tidal.agent.collector.sampler import PodInfo, PodUsage, usage_list
from tidal.agent.node_profile import write_status
from tidal.agent.qos.node_qos import mode_status
from tidal.agent.run import Predictions
from tidal.api import qos
from tidal.api.node_mode import node_mode
from tidal.api.node_profile import REPLAYED_CONDITION
from tidal.kube import KubeAPI, ObjectWatch
from tidal.kube.watch import Watcher
from tidal.metrics import NodeMetrics, SchedulerUsageMetrics
from tidal.api.policy import DEFAULT_POLICY_NAME, ColocationPolicy, PolicyValidationError
from tidal.api.qos import QoSLevel

log = logging.getLogger(__name__)
WINDOWS = (60, 300, 1800)


class TraceError(ValueError):
    """The trace file is not in the long CSV format; the message names the line and column."""


@dataclass
class NodeTrace:
    """The trace's online pods per step: sorted step times and, per step, (series, usage, request)."""

    times: list[float]
    steps: list[list[tuple[str, float, float]]]

    @property
    def step_seconds(self) -> int:
        return int(self.times[1] - self.times[0]) if len(self.times) > 1 else 300

    @property
    def span(self) -> float:
        return self.times[-1] - self.times[0] + self.step_seconds

    def at(self, t: float) -> list[tuple[str, float, float]]:
        """The pods at trace time `t`, wrapping around the end of the trace."""
        t = self.times[0] + (t - self.times[0]) % self.span
        return self.steps[max(0, bisect.bisect_right(self.times, t) - 1)]

    @property
    def peak_request(self) -> float:
        """The largest sum of requests at any step (cores)."""
        return max((sum(r for _, _, r in step) for step in self.steps), default=0.0)

    def fitted(self, node_cpus: float, fill: float) -> NodeTrace:
        """The trace scaled so its largest total request is `fill` × `node_cpus`: a trace's
        machine is rarely the size of the node it is replayed on (the Azure VMs request 56
        cores; a lab node has 16), and online requests above the node's CPUs would leave
        nothing to oversell whatever the predictor. Usage and requests scale alike."""
        if not 0 < fill <= 1:
            raise TraceError(f"fill {fill!r}: must be in (0, 1]")
        peak = self.peak_request
        if peak <= 0:
            return self
        k = node_cpus * fill / peak
        return NodeTrace(self.times, [[(sid, u * k, r * k) for sid, u, r in step] for step in self.steps])


def read_long_csv(path: Path) -> NodeTrace:
    by_time: dict[float, list[tuple[str, float, float]]] = {}
    with open(path, newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header != ["timestamp", "series_id", "usage", "request"]:
            raise TraceError(f"{path}:1: header must be timestamp,series_id,usage,request (got {header})")
        for number, row in enumerate(reader, start=2):
            if len(row) != 4:
                raise TraceError(f"{path}:{number}: expected 4 columns, got {len(row)}")
            try:
                t, usage, request = float(row[0]), float(row[2]), float(row[3])
            except ValueError as err:
                raise TraceError(f"{path}:{number}: timestamp, usage and request must be numbers ({err})") from None
            by_time.setdefault(t, []).append((row[1], max(0.0, usage), max(0.0, request)))
    if not by_time:
        raise TraceError(f"{path}: no samples")
    times = sorted(by_time)
    return NodeTrace(times, [by_time[t] for t in times])


class ReplayedNode:
    """One fake node: the window aggregates and predictions a real agent keeps, fed by the trace.
    It offers the two Sampler methods `Predictions` reads, so the same prediction code runs."""

    def __init__(self, name: str, offset: float, step_seconds: int) -> None:
        self.name, self.offset = name, offset
        self.cpu = WindowAggregate(WINDOWS)
        self.memory = WindowAggregate(WINDOWS)
        self.predictions = Predictions(step_seconds=step_seconds)
        self._usages: list[PodUsage] = []
        self._now = 0.0

    def observe(self, pods: list[tuple[str, float, float]], now_wall: float, trace_time: float,
                memory_bytes_per_core: int) -> None:
        self._usages = [PodUsage(PodInfo(uid=sid, namespace="replay", name=sid, qos_class="Burstable",
                                         tidal_level=QoSLevel.LS, cpu_request_millicores=round(request * 1000)),
                                 usage * 1000, round(usage * memory_bytes_per_core))
                        for sid, usage, request in pods]
        cores = sum(usage for _, usage, _ in pods)
        self.cpu.add(cores * 1000, now_wall)
        self.memory.add(cores * memory_bytes_per_core, now_wall)
        self._now = now_wall
        self.predictions.observe(self, trace_time)

    def pod_usages(self) -> list[PodUsage]:
        return self._usages

    def online_stats(self, window: int):
        return self.cpu.stats(window, self._now), self.memory.stats(window, self._now)

    def status(self, policy: ColocationPolicy, observed_at: datetime.datetime) -> dict:
        status = {"observedAt": observed_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                  "usage": usage_list(self.cpu, self.memory, self._now)}
        prediction = self.predictions.status(self, policy)
        if prediction is not None:
            status["predictions"] = {**prediction, "model": "replay"}
        return status


def target_file_content(address: str, port: int) -> str:
    """A Prometheus file_sd target list naming this replaying agent's ``/metrics``. No ``node``
    target label: each series carries the node it stands for."""
    host = f"[{address}]" if ":" in address else address
    return json.dumps([{"targets": [f"{host}:{port}"], "labels": {"component": "tidal-agent-replay"}}],
                      indent=2) + "\n"


def write_target_file(path: Path, address: str, port: int) -> None:
    """Write :func:`target_file_content` atomically (Prometheus re-reads the file when it changes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(target_file_content(address, port))
    tmp.replace(path)


def export_node_metrics(metrics: NodeMetrics, node: ReplayedNode) -> None:
    """The replayed node's usage as the agent's metrics: every trace pod is LS; a replayed node
    has no HLS or BE pods and never evicts."""
    cpu = sum(u.cpu_millicores for u in node.pod_usages())
    memory = sum(u.memory_bytes for u in node.pod_usages())
    metrics.node_cpu.labels(node.name).set(cpu)
    metrics.node_memory.labels(node.name).set(memory)
    for level in QoSLevel:
        metrics.qos_cpu.labels(node.name, level.value).set(cpu if level is QoSLevel.LS else 0)
        metrics.qos_memory.labels(node.name, level.value).set(memory if level is QoSLevel.LS else 0)
    for resource in ("cpu", "memory"):
        metrics.evicting.labels(node.name, resource).set(0)
    metrics.tainted.labels(node.name).set(0)


def policy_of(obj) -> tuple[ColocationPolicy, int, list[str]]:
    """The policy a replayed node runs: the object's spec and generation (defaults and 0 when
    there is none; an invalid one — which its CRD schema prevents — is reported, defaults used)."""
    if obj is None:
        return ColocationPolicy(), 0, []
    generation = int((obj.get("metadata") or {}).get("generation") or 0)
    try:
        return ColocationPolicy.from_spec(obj.get("spec") or {}), generation, []
    except PolicyValidationError as err:
        return ColocationPolicy(), generation, [f"ColocationPolicy generation {generation} not applied: {err}"]


def replayed_mode_status(node: dict | None) -> dict:
    """``status.mode`` of a replayed node: its mode from the kwok node's labels and annotations
    (off while the node is unknown), eviction never allowed: the replaying agent does not evict."""
    meta = (node or {}).get("metadata") or {}
    mode = node_mode(meta.get("labels"), meta.get("annotations"))
    reason = ("node mode off: Tidal does nothing" if not mode.active else
              f"replayed node: tidal-agent replay does not evict (this mode evicts when {mode.eviction_rule})")
    return mode_status(mode, (False, reason))


def replayed_report(capabilities: list[dict], since: datetime.datetime) -> dict:
    """The part of a replayed node's status that says it is replayed: the capabilities the replay
    stands for (``{name, supported, reason}`` as the probe writes them) and the condition
    ``Replayed=True`` since `since` (the replay's start, so the condition does not churn)."""
    return {"capabilities": list(capabilities), "conditions": [{
        "type": REPLAYED_CONDITION, "status": "True", "reason": "TraceReplay",
        "lastTransitionTime": since.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "message": "written by tidal-agent replay: usage from a trace, capabilities probed on the machine "
                   "running the replay; nothing is applied on this node"}]}


def nodes_watch(api: KubeAPI, names: list[str]) -> Watcher:
    """The replayed nodes' metadata (labels, annotations), from one watch of the Nodes."""
    wanted = set(names)

    def keep(obj):
        meta = obj.get("metadata") or {}
        if meta.get("name") not in wanted:
            return None
        return {"metadata": {k: meta.get(k) for k in ("name", "labels", "annotations")}}

    return Watcher(api, "/api/v1/nodes", "the replayed nodes", transform=keep)


def export_scheduler_usage(metrics: SchedulerUsageMetrics, node: ReplayedNode, cpus: float,
                           memory_total: int, seconds: float) -> None:
    """The replayed node's usage under the names Volcano's usage plugin queries."""
    cpu_cores = sum(u.cpu_millicores for u in node.pod_usages()) / 1000
    memory = sum(u.memory_bytes for u in node.pod_usages())
    metrics.observe(node.name, 1 - cpu_cores / cpus, seconds, memory_total, memory)


async def run_replay(api: KubeAPI, trace: NodeTrace, nodes: list[str], *, speed: float = 300.0,
                     report_interval: float = 5.0, predictor: str | None = None, window: int | None = None,
                     memory_bytes_per_core: int = 4 * 1024**3, stop: asyncio.Event | None = None,
                     metrics: NodeMetrics | None = None, usage_metrics: SchedulerUsageMetrics | None = None,
                     node_cpus: float = 16, node_memory_bytes: int = 64 * 1024**3,
                     capabilities: list[dict] | None = None) -> None:
    """Replay until `stop`. The predictor and window are the policy's unless given. With
    `metrics`, each fake node also exports what a real agent does (its usage, all of it LS);
    with `capabilities` (a probe's status list), each reports them, marked replayed."""
    stop = stop or asyncio.Event()
    replayed = [ReplayedNode(name, (i * trace.span / max(1, len(nodes))) % trace.span, trace.step_seconds)
                for i, name in enumerate(nodes)]
    policy_watch = ObjectWatch(api, f"/apis/{qos.API_GROUP}/{qos.API_VERSION}/colocationpolicies",
                               DEFAULT_POLICY_NAME, what=f"ColocationPolicy {DEFAULT_POLICY_NAME}")
    node_watch = nodes_watch(api, nodes)
    watchers = [asyncio.create_task(w.run()) for w in (policy_watch, node_watch)]
    try:
        await asyncio.wait_for(asyncio.gather(policy_watch.synced.wait(), node_watch.synced.wait()), timeout=60)
        await _replay_loop(api, replayed, trace, speed, report_interval, predictor, window,
                           memory_bytes_per_core, stop, metrics, policy_watch,
                           (usage_metrics, node_cpus, node_memory_bytes), node_watch,
                           None if capabilities is None else replayed_report(
                               capabilities, datetime.datetime.now(datetime.timezone.utc)))
    finally:
        for watcher in watchers:
            watcher.cancel()


async def _replay_loop(api, replayed, trace, speed, report_interval, predictor, window,
                       memory_bytes_per_core, stop, metrics, policy_watch, usage=(None, 16, 64 << 30),
                       node_watch: Watcher | None = None, report: dict | None = None) -> None:
    request = api.request
    start_wall = time.monotonic()
    last_report = -report_interval
    reported_generation = None
    previous = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        trace_time = trace.times[0] + (now - start_wall) * speed
        for node in replayed:
            node.observe(trace.at(trace_time + node.offset), now, trace_time + node.offset,
                         memory_bytes_per_core)
            if metrics is not None:
                export_node_metrics(metrics, node)
            if usage[0] is not None:
                export_scheduler_usage(usage[0], node, usage[1], usage[2], now - previous)
        applied, generation, problems = policy_of(policy_watch.object)
        # a new policy generation is reported at once (the rollout status waits for it)
        if now - last_report >= report_interval or generation != reported_generation:
            last_report = now
            policy = applied
            overrides = {k: v for k, v in (("predictor", predictor), ("windowSeconds", window)) if v is not None}
            if overrides:
                spec = policy.to_spec()
                spec["overselling"].update(overrides)
                policy = ColocationPolicy.from_spec(spec)
            observed = datetime.datetime.now(datetime.timezone.utc)
            policy_status = {"appliedGeneration": generation, "effective": applied.to_spec(), "problems": problems}
            known = {} if node_watch is None else {
                o["metadata"]["name"]: o for o in node_watch.objects.values()}
            results = await asyncio.gather(*(write_status(request, n.name, {
                **n.status(policy, observed), "policy": policy_status, **(report or {}),
                "mode": replayed_mode_status(known.get(n.name))}) for n in replayed), return_exceptions=True)
            failed = False
            for node, result in zip(replayed, results):
                if isinstance(result, Exception):
                    failed = True
                    log.warning("NodeProfile %s not written: %s", node.name, result)
            if not failed:
                reported_generation = generation
        previous = now
        try:
            await asyncio.wait_for(stop.wait(), timeout=1.0)
        except asyncio.TimeoutError:
            pass
