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

Each node's mode is read from the kwok node's labels and annotations, as a real agent reads its
own, and reported in ``status.mode``. Without ``evict`` the replaying agent never evicts and never
taints (``evictionAllowed`` false, with the reason). With ``evict`` (``tidal-agent replay
--evict``, the lab demo's) it evicts as the agent does, with the agent's own parts: per node the
watermark state machine (:class:`~tidal.agent.qos.eviction.WatermarkEviction`) with the node's
effective watermarks (:func:`~tidal.agent.qos.overrides.node_watermarks`), the mode's rule
(:func:`~tidal.api.node_mode.eviction_allowed`) and the API adapter
(:class:`~tidal.agent.qos.node_actions.NodeActions`: taint, Eviction API, Events), and counts
``tidal_evictions_total`` for the node. The usage the watermarks compare is *modelled*
(:func:`modelled_usage`): the replayed online usage plus the node's BE pods (kwok runs them, they
use nothing) counted at their batch-cpu / batch-memory requests; the model is stated in
``status.mode.evictionReason``. Given capabilities (``tidal-agent replay`` probes the machine it
runs on, which the fake nodes stand for), it reports them for every node it replays, marked by the
condition ``Replayed=True`` (`replayed_report`), so the console shows them as the replay's, not
the node's.

A *demo peak* (:class:`Peak`, ``--peak NODE=START:DURATION:PERCENT[:EVERY]``) is a scripted online
CPU burst: from START seconds after the replay started, for DURATION seconds (and again every
EVERY seconds), the node's online CPU usage is at least PERCENT of its CPUs. It shows in the
node's usage, metrics and watermarks as an extra LS usage named ``demo-peak``, not in the
predictor's history: at ``--speed`` 300 two minutes of peak would be ten trace hours, which
would hold the node's batch resources at zero long after the demo peak is over.
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
from tidal.agent.pods import NodePods
from tidal.agent.qos.eviction import Action, Candidate, Decision, WatermarkEviction, watermark_usage_percent
from tidal.agent.qos.node_actions import EvictOutcome, NodeActions, evicted_event_name, has_offline_taint
from tidal.agent.qos.node_qos import node_allocatable, node_requests_percent, taint_event
from tidal.agent.qos.overrides import node_watermarks
from tidal.agent.run import Predictions, wait_synced
from tidal.api import qos
from tidal.api.node_mode import eviction_allowed, node_mode
from tidal.api.node_profile import REPLAYED_CONDITION
from tidal.kube import KubeAPI, ObjectWatch
from tidal.kube.watch import Watcher
from tidal.metrics import NodeMetrics, SchedulerUsageMetrics, zero_evictions
from tidal.api.policy import DEFAULT_POLICY_NAME, ColocationPolicy, PolicyValidationError
from tidal.api.qos import QoSLevel
from tidal.tasks import sleep_or_stop, within

log = logging.getLogger(__name__)
WINDOWS = (60, 300, 1800)


class TraceError(ValueError):
    """The trace file is not in the long CSV format; the message names the line and column."""


PEAK_FORMAT = "NODE=START_S:DURATION_S:PERCENT[:EVERY_S]"
PEAK_USAGE = "demo-peak"


@dataclass(frozen=True)
class Peak:
    """A scripted online CPU peak on one replayed node: from `start` seconds after the replay
    started, for `duration` seconds, again every `every` seconds (None: once), the node's online
    CPU usage is at least `percent` of its CPUs."""

    node: str
    start: float
    duration: float
    percent: float
    every: float | None = None

    def active(self, elapsed: float) -> bool:
        """Whether the peak is on `elapsed` seconds after the replay started."""
        if elapsed < self.start:
            return False
        into = elapsed - self.start
        if self.every is not None:
            into %= self.every
        return into < self.duration

    def describe(self) -> str:
        again = f", every {self.every:g}s" if self.every is not None else ""
        return (f"{self.node}: online CPU at least {self.percent:g}% of its CPUs for {self.duration:g}s "
                f"from {self.start:g}s after the replay started{again}")


def parse_peak(text: str) -> Peak:
    """``NODE=START_S:DURATION_S:PERCENT[:EVERY_S]`` -> :class:`Peak`; ValueError naming the part
    and the rule."""
    node, sep, rest = text.partition("=")
    if not sep or not node.strip():
        raise ValueError(f"--peak {text!r}: expected {PEAK_FORMAT}")
    parts = rest.split(":")
    if len(parts) not in (3, 4):
        raise ValueError(f"--peak {text!r}: expected {PEAK_FORMAT} (3 or 4 numbers after '=', got {len(parts)})")
    values = []
    for name, part in zip(("START_S", "DURATION_S", "PERCENT", "EVERY_S"), parts):
        try:
            values.append(float(part))
        except ValueError:
            raise ValueError(f"--peak {text!r}: {name} {part!r} must be a number") from None
    start, duration, percent = values[:3]
    every = values[3] if len(values) == 4 else None
    if start < 0:
        raise ValueError(f"--peak {text!r}: START_S must be >= 0")
    if duration <= 0:
        raise ValueError(f"--peak {text!r}: DURATION_S must be > 0")
    if not 0 < percent <= 100:
        raise ValueError(f"--peak {text!r}: PERCENT must be in (0, 100]")
    if every is not None and every <= duration:
        raise ValueError(f"--peak {text!r}: EVERY_S must be greater than DURATION_S (the peaks would overlap)")
    return Peak(node.strip(), start, duration, percent, every)


def peak_cores(peaks: list[Peak], node: str, elapsed: float, node_cpus: float) -> float:
    """The online CPU (cores) the node's active peaks hold it at, `elapsed` seconds after the
    replay started (0 when none is on)."""
    return max((p.percent / 100 * node_cpus for p in peaks if p.node == node and p.active(elapsed)), default=0.0)


MODEL = ("replayed node: the watermarks compare a modelled usage, the replayed online usage plus "
         "the node's BE pods at their batch-cpu/batch-memory requests")


def modelled_usage(online_millicores: float, online_memory_bytes: float,
                   be_requests: list[tuple[int, int]], capacity: dict[str, float] | None = None) -> dict[str, float]:
    """A replayed node's usage as the watermarks see it: the replayed online usage plus each BE
    pod at its batch requests ((cpu millicores, memory bytes) per pod) — kwok runs the pods,
    they use nothing, so the request stands for what a BE pod would use — at most the node's
    `capacity` (a node uses no more than it has)."""
    used = {"cpu": online_millicores + sum(cpu for cpu, _ in be_requests),
            "memory": online_memory_bytes + sum(memory for _, memory in be_requests)}
    return {r: min(v, (capacity or {}).get(r, v)) for r, v in used.items()}


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
    It offers what `Predictions` reads of a Sampler (two methods and the node's CPU), so the same
    prediction code runs."""

    def __init__(self, name: str, offset: float, step_seconds: int) -> None:
        self.name, self.offset = name, offset
        self.cpu = WindowAggregate(WINDOWS)
        self.memory = WindowAggregate(WINDOWS)
        self.predictions = Predictions(step_seconds=step_seconds)
        self._usages: list[PodUsage] = []
        self._now = 0.0
        #: the replayed pods' CPU (millicores): every replayed reading is a measured one
        self.node_cpu_millicores: float = 0.0

    def observe(self, pods: list[tuple[str, float, float]], now_wall: float, trace_time: float,
                memory_bytes_per_core: int, peak: float = 0.0) -> None:
        """Take the trace's pods at `trace_time`; `peak` (cores): a demo peak holds the online
        CPU at least there (an extra LS usage, CPU only, kept out of the predictor's history)."""
        self._usages = [PodUsage(PodInfo(uid=sid, namespace="replay", name=sid, qos_class="Burstable",
                                         tidal_level=QoSLevel.LS, cpu_request_millicores=round(request * 1000)),
                                 usage * 1000, round(usage * memory_bytes_per_core))
                        for sid, usage, request in pods]
        self._now = now_wall
        self.node_cpu_millicores = sum(usage for _, usage, _ in pods) * 1000
        self.predictions.observe(self, trace_time)
        cores = sum(usage for _, usage, _ in pods)
        if peak > cores:
            self._usages.append(PodUsage(PodInfo(uid=PEAK_USAGE, namespace="replay", name=PEAK_USAGE,
                                                 qos_class="Burstable", tidal_level=QoSLevel.LS),
                                         (peak - cores) * 1000, 0))
        self.cpu.add(sum(u.cpu_millicores for u in self._usages), now_wall)
        self.memory.add(cores * memory_bytes_per_core, now_wall)

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


def export_node_metrics(metrics: NodeMetrics, node: ReplayedNode, eviction: ReplayedEviction | None = None) -> None:
    """The replayed node's usage as the agent's metrics: every trace pod (and a demo peak) is LS.
    Without eviction a replayed node has no HLS or BE usage and never evicts; with it, its BE
    pods count at their batch requests (the model the watermarks compare) and the evicting and
    tainted gauges follow the state machine and the node."""
    cpu = sum(u.cpu_millicores for u in node.pod_usages())
    memory = sum(u.memory_bytes for u in node.pod_usages())
    be_cpu = be_memory = 0
    if eviction is not None:
        be_requests = eviction.be_requests()
        be_cpu, be_memory = sum(c for c, _ in be_requests), sum(m for _, m in be_requests)
    metrics.node_cpu.labels(node.name).set(cpu + be_cpu)
    metrics.node_memory.labels(node.name).set(memory + be_memory)
    by_level = {QoSLevel.LS: (cpu, memory), QoSLevel.BE: (be_cpu, be_memory)}
    for level in QoSLevel:
        level_cpu, level_memory = by_level.get(level, (0, 0))
        metrics.qos_cpu.labels(node.name, level.value).set(level_cpu)
        metrics.qos_memory.labels(node.name, level.value).set(level_memory)
    for resource in ("cpu", "memory"):
        evicting = eviction is not None and eviction.machine.resources[resource].evicting
        metrics.evicting.labels(node.name, resource).set(1 if evicting else 0)
    metrics.tainted.labels(node.name).set(1 if eviction is not None and eviction.node_tainted else 0)


class ReplayedEviction:
    """Watermark eviction for one replayed node, with the agent's own parts: the pure state
    machine and the mode's rule decide (:meth:`decide`), :class:`NodeActions` carries out
    (:meth:`act`: the taint level-triggered, evictions through the Eviction API, Events as the
    agent's). The node's pods come from a watch of the node (:class:`~tidal.agent.pods.NodePods`)."""

    def __init__(self, api: KubeAPI | None, node: str, metrics: NodeMetrics | None = None) -> None:
        self.node = node
        if metrics is not None:
            zero_evictions(metrics, node)
        self.machine = WatermarkEviction()
        self.actions = NodeActions(api, node) if api is not None else None
        self.pods = NodePods(api, node)
        self.metrics = metrics
        self.mode = node_mode(None)
        self.gate: tuple[bool, str] = eviction_allowed(self.mode, None)
        self.node_tainted: bool | None = None  # as last seen at the API server
        self._node_seen = False

    def be_requests(self) -> list[tuple[int, int]]:
        """(batch cpu millicores, batch memory bytes) of each BE pod on the node."""
        return [(info.cpu_request_millicores, info.memory_request_bytes)
                for info, _ in self.pods.objects.values() if info.tidal_level is QoSLevel.BE]

    def observe_node(self, obj: dict | None) -> None:
        if obj is None:
            return
        meta = obj.get("metadata") or {}
        self.mode = node_mode(meta.get("labels"), meta.get("annotations"))
        self.node_tainted = has_offline_taint(obj)
        if not self._node_seen:  # restart-safe, as the agent: a taint left stays until usage is low
            self._node_seen = True
            self.machine.tainted = self.node_tainted

    def decide(self, now: float, policy: ColocationPolicy, node_obj: dict | None, online_millicores: float,
               online_memory_bytes: float, capacity: dict[str, float]) -> list[Decision]:
        """One round, pure apart from the pods the watch keeps: the modelled usage through the
        node's watermarks, gated by its mode's rule."""
        self.observe_node(node_obj)
        self.machine.config = node_watermarks(policy, ((node_obj or {}).get("metadata") or {}).get("annotations"))[0]
        views = list(self.pods.objects.values())
        requests = node_requests_percent([state for _, state in views], node_allocatable(node_obj))
        allowed, reason = eviction_allowed(self.mode, requests)
        self.gate = (allowed, f"{reason} ({MODEL})" if self.mode.active else reason)
        if not self.mode.active:
            self.machine = WatermarkEviction(config=self.machine.config)
            return []
        used = modelled_usage(online_millicores, online_memory_bytes, self.be_requests(), capacity)
        usage = watermark_usage_percent(used, used, capacity, policy.overselling.include_system_usage)
        pods = [Candidate(info.uid, info.tidal_level is QoSLevel.BE, state.priority,
                          {"cpu": float(info.cpu_request_millicores), "memory": float(info.memory_request_bytes)},
                          info.namespace, info.name) for info, state in views]
        return self.machine.step(now, usage, pods, allowed=allowed)

    @property
    def want_taint(self) -> bool:
        return self.mode.active and self.machine.tainted

    async def act(self, decisions: list[Decision]) -> None:
        """Make the node's taint match the state machine, then carry out the evictions."""
        assert self.actions is not None
        for decision in decisions:
            log.info("%s %s: %s", self.node, decision.action, decision.reason)
        want = self.want_taint
        if self.node_tainted is not None and self.node_tainted != want:
            if await self.actions.set_offline_taint(want):
                reason, message = taint_event(want, self.machine)
                log.info("node %s: %s", self.node, message)
                await self.actions.event(kind="Node", name=self.node, namespace="", uid=None,
                                         reason=reason, message=message, warning=want)
            self.node_tainted = want
        for decision in decisions:
            if decision.action is Action.EVICT:
                await self._evict(decision)

    async def _evict(self, decision: Decision) -> None:
        assert self.actions is not None
        view = self.pods.objects.get(decision.pod_uid or "")
        if view is None:  # gone meanwhile: let the machine choose again
            self.machine.evicted.discard(decision.pod_uid or "")
            return
        info = view[0]
        outcome = await self.actions.evict(info.namespace, info.name)
        if outcome is EvictOutcome.BLOCKED:
            if self.metrics is not None:
                self.metrics.eviction_failures.labels(self.node, "disruption-budget").inc()
            self.machine.evicted.discard(info.uid)
            self.machine.last_eviction = None
            await self.actions.event(kind="Pod", name=info.name, namespace=info.namespace, uid=info.uid,
                                     reason="TidalEvictionBlocked", warning=True,
                                     message=f"eviction blocked by a PodDisruptionBudget; {decision.reason}")
            return
        if outcome is EvictOutcome.GONE:
            return
        log.info("evicted %s/%s: %s", info.namespace, info.name, decision.reason)
        if self.metrics is not None:
            self.metrics.evictions.labels(self.node, decision.resource or "", "watermark").inc()
        await self.actions.event(kind="Pod", name=info.name, namespace=info.namespace, uid=info.uid,
                                 reason="TidalEvicted", message=decision.reason, warning=True,
                                 event_name=evicted_event_name(info.name, info.uid))


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


def replayed_mode_status(node: dict | None, eviction: ReplayedEviction | None = None) -> dict:
    """``status.mode`` of a replayed node: its mode from the kwok node's labels and annotations
    (off while the node is unknown). Without `eviction` never allowed: the replaying agent does
    not evict; with it, the mode's rule as last applied, the usage model stated."""
    meta = (node or {}).get("metadata") or {}
    mode = node_mode(meta.get("labels"), meta.get("annotations"))
    if eviction is not None:
        return mode_status(mode, eviction.gate if mode.active else eviction_allowed(mode, None))
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
    """The replayed nodes' metadata (labels, annotations), taints and allocatable, from one
    watch of the Nodes."""
    wanted = set(names)

    def keep(obj):
        meta = obj.get("metadata") or {}
        if meta.get("name") not in wanted:
            return None
        return {"metadata": {k: meta.get(k) for k in ("name", "labels", "annotations")},
                "spec": {"taints": (obj.get("spec") or {}).get("taints")},
                "status": {"allocatable": (obj.get("status") or {}).get("allocatable")}}

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
                     capabilities: list[dict] | None = None,
                     evict: bool = False, peaks: list[Peak] | None = None) -> None:
    """Replay until `stop`. The predictor and window are the policy's unless given. With
    `metrics`, each fake node also exports what a real agent does (its usage by level); with
    `capabilities` (a probe's status list), each reports them, marked replayed. With
    `evict`, each node evicts as an agent would (:class:`ReplayedEviction`); `peaks` are the
    scripted demo peaks."""
    stop = stop or asyncio.Event()
    unknown = sorted({p.node for p in peaks or []} - set(nodes))
    if unknown:
        raise ValueError(f"--peak names {', '.join(unknown)}: not one of the replayed --nodes {','.join(nodes)}")
    replayed = [ReplayedNode(name, (i * trace.span / max(1, len(nodes))) % trace.span, trace.step_seconds)
                for i, name in enumerate(nodes)]
    policy_watch = ObjectWatch(api, f"/apis/{qos.API_GROUP}/{qos.API_VERSION}/colocationpolicies",
                               DEFAULT_POLICY_NAME, what=f"ColocationPolicy {DEFAULT_POLICY_NAME}")
    node_watch = nodes_watch(api, nodes)
    evictions = {name: ReplayedEviction(api, name, metrics) for name in nodes} if evict else {}
    for peak in peaks or []:
        log.info("demo peak: %s", peak.describe())
    all_watchers = [policy_watch, node_watch, *(e.pods for e in evictions.values())]
    watchers = [asyncio.create_task(w.run()) for w in all_watchers]
    try:
        if not await wait_synced(all_watchers, stop):
            return
        await _replay_loop(api, replayed, trace, speed, report_interval, predictor, window,
                           memory_bytes_per_core, stop, metrics, policy_watch,
                           (usage_metrics, node_cpus, node_memory_bytes), node_watch,
                           None if capabilities is None else replayed_report(
                               capabilities, datetime.datetime.now(datetime.timezone.utc)),
                           evictions, peaks or [])
    finally:
        for watcher in watchers:
            watcher.cancel()


async def _replay_loop(api, replayed, trace, speed, report_interval, predictor, window,
                       memory_bytes_per_core, stop, metrics, policy_watch, usage=(None, 16, 64 << 30),
                       node_watch: Watcher | None = None, report: dict | None = None,
                       evictions: dict[str, ReplayedEviction] | None = None,
                       peaks: list[Peak] | None = None) -> None:
    request = api.request
    evictions = evictions or {}
    start_wall = time.monotonic()
    last_report = -report_interval
    reported_generation = None
    previous = time.monotonic()
    capacity = {"cpu": usage[1] * 1000, "memory": float(usage[2])}
    while not stop.is_set():
        now = time.monotonic()
        trace_time = trace.times[0] + (now - start_wall) * speed
        applied, generation, problems = policy_of(policy_watch.object)
        known = {} if node_watch is None else {o["metadata"]["name"]: o for o in node_watch.objects.values()}
        for node in replayed:
            node.observe(trace.at(trace_time + node.offset), now, trace_time + node.offset,
                         memory_bytes_per_core, peak_cores(peaks or [], node.name, now - start_wall, usage[1]))
            eviction = evictions.get(node.name)
            if eviction is not None:
                online = node.pod_usages()
                decisions = eviction.decide(now, applied, known.get(node.name),
                                            sum(u.cpu_millicores for u in online),
                                            sum(u.memory_bytes for u in online), capacity)
                try:
                    await within(10, eviction.act(decisions))
                except asyncio.CancelledError:
                    raise
                except Exception as err:  # the taint converges next round; a pod is chosen again
                    log.warning("node %s: eviction work failed (%s): retried", node.name, err)
                    for decision in decisions:
                        if decision.action is Action.EVICT:
                            eviction.machine.evicted.discard(decision.pod_uid or "")
                            eviction.machine.last_eviction = None
            if metrics is not None:
                export_node_metrics(metrics, node, eviction)
            if usage[0] is not None:
                export_scheduler_usage(usage[0], node, usage[1], usage[2], now - previous)
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
            results = await asyncio.gather(*(write_status(request, n.name, {
                **n.status(policy, observed), "policy": policy_status, **(report or {}),
                "mode": replayed_mode_status(known.get(n.name), evictions.get(n.name))}) for n in replayed),
                return_exceptions=True)
            failed = False
            for node, result in zip(replayed, results):
                if isinstance(result, Exception):
                    failed = True
                    log.warning("NodeProfile %s not written: %s", node.name, result)
            if not failed:
                reported_generation = generation
        previous = now
        await sleep_or_stop(stop, 1.0)
