# SPDX-License-Identifier: Apache-2.0
"""The node QoS engine's round, after the collector's sample, every
``beIsolation.qosCheckIntervalSeconds`` (default 1 s; the loop is :mod:`tidal.agent.rounds`).

Inputs are what the agent last knew — pods of this node, this Node object, the ColocationPolicy
(all kept by watches, so an unreachable API server leaves the last known values in force) — and
the sampler's fresh usage. Each round:

1. watermark eviction: the pure state machine decides taint / untaint / evict, with the node's
   annotation overrides (Volcano's watermark annotations as aliases) applied to the policy's
   watermarks, on node usage or — with the policy's ``overselling.includeSystemUsage`` false — on
   the pods' usage only (:func:`eviction_usage_percent`). Its actions follow the node mode's rule
   (:func:`~tidal.api.node_mode.eviction_allowed`): the oversubscription-only mode acts only while
   the node's requests — every pod, native and batch (:func:`node_requests_percent`) — are above
   100 % of its allocatable;
2. the features (:mod:`.registry`, run by :class:`~.engine.QoSEngine` with a :class:`~.feature.Context`
   built here — they never look into this object): cgroups, requests, resctrl and tc applied by
   the executor (or everything undone when the node's mode is off: neither label) —
   synchronously, so enforcement never waits for the API server; their effects (PSI evictions,
   never a pod the watermark machine chose) join the watermark decisions;
3. API work (taint, evictions, Events) is handed to one background worker, so a slow or absent
   API server never delays the cgroup work. The taint is level-triggered: the worker makes the
   node's taint match the state machine, so a restarted agent or a lost patch converges. The
   node's Events wait in order until the API server has them (:mod:`tidal.kube.event_queue`).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidal.agent.collector.cgroups import CgroupLayout
from tidal.agent.collector.sampler import ONLINE_LEVELS, PodUsage, Sampler
from tidal.metrics import NodeMetrics
from tidal.tasks import cancel_and_wait, within
from tidal.api.node_mode import NodeMode, eviction_allowed, node_mode, requests_percent
from tidal.api.policy import ColocationPolicy, PolicyValidationError
from tidal.api import qos
from tidal.api.qos import QoSLevel
from tidal.api.quantities import QuantityError, cpu_millicores, memory_bytes
from tidal.kube.event_queue import EventQueue, PendingEvent

from .engine import QoSEngine, RoundOutcome
from .feature import Context, NodeEvent
from .eviction_journal import FINISHED_NOTE, RETRIED_NOTE, EvictionIntent, EvictionJournal, resume
from .eviction import RESOURCES, Action, Candidate, Decision, WatermarkEviction, watermark_usage_percent
from .node_actions import EvictOutcome, NodeActions, evicted_event_name, has_offline_taint
from .overrides import node_watermarks
from .policy_status import policy_status
from .strategy import ApplyResult, NodeState, PodState

log = logging.getLogger(__name__)

__all__ = ["NodeQoS", "Round", "eviction_usage_percent", "mode_status", "node_allocatable", "node_requests_percent",
           "taint_event", "usage_percent"]

#: a pod whose eviction a PodDisruptionBudget refused is not chosen again for this long
BLOCKED_RETRY_SECONDS = 30.0
API_TIMEOUT_SECONDS = 10.0
#: the API worker wakes up at least this often: what failed (taint, label, an Event) is tried again
WORKER_WAKE_SECONDS = 5.0
#: the restore-pending label's removal waits this long at most for the node's Events to be sent
#: (an API server that refuses Events for good must not keep a restored node's agent forever)
RESTORE_EVENTS_WAIT_SECONDS = 60.0


async def within_api_timeout(awaitable):
    """`awaitable`'s result, or TimeoutError after API_TIMEOUT_SECONDS, never losing a
    cancellation (:func:`tidal.tasks.within`: the API worker once ran on after ``stop``)."""
    return await within(API_TIMEOUT_SECONDS, awaitable)


def usage_percent(sampler: Sampler, node_cpus: float) -> dict[str, float]:
    """Node CPU and memory usage in percent of capacity (a resource without a sample is absent)."""
    usage = {}
    if sampler.node_cpu_millicores is not None and node_cpus > 0:
        usage["cpu"] = sampler.node_cpu_millicores / (node_cpus * 1000) * 100
    if sampler.node_memory_bytes is not None and sampler.node_memory_total_bytes:
        usage["memory"] = sampler.node_memory_bytes / sampler.node_memory_total_bytes * 100
    return usage


def eviction_usage_percent(sampler: Sampler, node_cpus: float, include_system_usage: bool) -> dict[str, float]:
    """What the eviction watermarks compare: node usage, or only the pods' (see
    :func:`~tidal.agent.qos.eviction.watermark_usage_percent`), in percent of capacity."""
    return watermark_usage_percent(
        {"cpu": sampler.node_cpu_millicores, "memory": sampler.node_memory_bytes},
        {"cpu": sampler.pods_cpu_millicores, "memory": sampler.pods_memory_bytes},
        {"cpu": node_cpus * 1000, "memory": sampler.node_memory_total_bytes},
        include_system_usage)


def node_allocatable(node: Mapping[str, Any] | None) -> dict[str, float]:
    """The Node's native ``status.allocatable``: ``cpu`` in millicores, ``memory`` in bytes (a
    resource missing or not parseable is absent)."""
    allocatable = ((node or {}).get("status") or {}).get("allocatable") or {}
    out: dict[str, float] = {}
    for resource, parse in (("cpu", cpu_millicores), ("memory", memory_bytes)):
        if resource in allocatable:
            try:
                out[resource] = float(parse(allocatable[resource]))
            except QuantityError:
                pass
    return out


def node_requests_percent(states: Iterable[PodState], allocatable: Mapping[str, float]) -> dict[str, float]:
    """The node's requests in percent of its allocatable: every pod the agent knows on the node
    (terminated ones are not kept), every level and pods without one, native and batch requests
    together (:attr:`PodState.node_requests`)."""
    cpu = memory = 0
    for pod in states:
        cpu, memory = cpu + pod.node_requests[0], memory + pod.node_requests[1]
    return requests_percent({"cpu": cpu, "memory": memory}, allocatable)


def mode_status(mode: NodeMode, gate: tuple[bool, str]) -> dict[str, Any]:
    """``status.mode``: the mode (``NodeMode.to_status``) and the eviction rule's verdict now.
    ``conflicts`` and ``problems`` are written as null when there are none, so the status's
    merge patch removes the ones a fixed label left behind."""
    return {"conflicts": None, "problems": None, **mode.to_status(),
            "evictionAllowed": gate[0], "evictionReason": gate[1]}


def taint_event(want: bool, eviction: WatermarkEviction) -> tuple[str, str]:
    """The Node Event's reason and message when the offline-evicting taint was set (``want``) or
    removed: the agent's and the replaying agent's (:mod:`tidal.agent.replay`) alike."""
    if want:
        resource = next((r for r in RESOURCES if eviction.resources[r].evicting), None)
        usage = f" ({resource} above its high watermark)" if resource else ""
        return ("TidalOfflineEvicting",
                f"node tainted colocation.tidal.io/offline-evicting:NoSchedule{usage}: "
                "no new BE pods until usage is back at or below the low watermarks")
    return "TidalOfflineEvictingCleared", "offline-evicting taint removed: every resource at or below its low watermark"


def restore_pending(active: bool, undo_clean: bool | None) -> bool:
    """Whether the node must carry the restore-pending label (the agent's DaemonSet keeps an agent
    on a node with it): while the node's mode is active (the agent changes things), and once off
    until a round has put everything back with no problem (``undo_clean``; None: no round yet)."""
    return active or undo_clean is not True


def restore_event(pending: bool) -> tuple[str, str]:
    """The Event of a restore-pending label change: (reason, message)."""
    if pending:
        return ("TidalRestorePending",
                f"{qos.RESTORE_PENDING_NODE_LABEL}=true: the agent changes this node and keeps it until "
                f"every value it changed is put back")
    return ("TidalNodeRestored",
            f"every value the agent changed on this node is put back; {qos.RESTORE_PENDING_NODE_LABEL} "
            f"is removed now, so the agent leaves the node")


#: At most this many failing files are named in one Event (the count says how many there are).
WRITE_FAILURES_NAMED = 5


def write_failure_event(before: Mapping[str, str], now: Mapping[str, str]) -> NodeEvent | None:
    """The Event when the set of cgroup files the agent fails to write changes (``file ->
    problem``, this round and the one before): a Warning naming the new failures, or a Normal
    one once every write succeeds again; None while the set is unchanged (retried every round
    without an Event each time: ``tidal_agent_cgroup_write_errors_total`` counts every try)."""
    new = sorted(set(now) - set(before))
    if new:
        named = "; ".join(f"{file}: {now[file]}" for file in new[:WRITE_FAILURES_NAMED])
        more = f" (and {len(new) - WRITE_FAILURES_NAMED} more)" if len(new) > WRITE_FAILURES_NAMED else ""
        return NodeEvent("TidalCgroupWriteFailed",
                         f"{len(now)} file(s) the agent writes on this node could not be written, retried "
                         f"every round: {named}{more}",
                         warning=True)
    if before and not now:
        return NodeEvent("TidalCgroupWriteRecovered",
                         f"every write succeeds again ({len(before)} file(s) had failed)")
    return None


#: a failure of an intent carried out only now and then (a ``memory.reclaim`` request every
#: ``intervalSeconds``, at most 300; resctrl and tc intents) stands this long after it last failed
#: unless the intent is carried out meanwhile: the rounds in between do not try it
INTERMITTENT_FAILURE_SECONDS = 600.0


def failing_writes(before: Mapping[str, tuple[str, float | None]], now: float, every_round: Mapping[str, str],
                   intermittent: Mapping[str, str], carried_out: Collection[str],
                   ) -> dict[str, tuple[str, float | None]]:
    """The files and objects failing after a round: ``key -> (problem, when it last failed)``,
    the time None for ``every_round`` ones. Cgroup writes of the plan and restores of the journal
    are tried every round while wanted: one not failing now was written, put back, or is no longer
    wanted. An ``intermittent`` intent is absent from most rounds: its failure stands until it is
    carried out (``carried_out``) or :data:`INTERMITTENT_FAILURE_SECONDS` after it last failed, so
    that one failing every time it is tried is one ``TidalCgroupWriteFailed`` Event, not one
    failure and one recovery per try."""
    out: dict[str, tuple[str, float | None]] = {key: (problem, None) for key, problem in every_round.items()}
    out.update((key, (problem, now)) for key, problem in intermittent.items())
    for key, (problem, failed_at) in before.items():
        if (key not in out and failed_at is not None and key not in carried_out
                and now - failed_at < INTERMITTENT_FAILURE_SECONDS):
            out[key] = (problem, failed_at)
    return out


def write_problems(failing: Mapping[str, tuple[str, float | None]]) -> dict[str, str]:
    """``file -> problem`` of :func:`failing_writes`' result."""
    return {key: problem for key, (problem, _) in failing.items()}


def track_write_failures(failing: Mapping[str, tuple[str, float | None]], now: float, outcome: RoundOutcome,
                         ) -> tuple[dict[str, tuple[str, float | None]], NodeEvent | None]:
    """One round's outcome folded into the failing writes (:func:`failing_writes`: the plan's
    cgroup writes and the journal's restores every round, the other intents now and then), and
    the Event their change calls for (:func:`write_failure_event`)."""
    result = outcome.result
    every_round = {str(w.target): problem.removeprefix(f"{w.target}: ") for w, problem in result.errors}
    every_round.update(result.restore_problems)
    after = failing_writes(failing, now, every_round, {file: problem for _, file, problem in outcome.problems},
                           outcome.done)
    return after, write_failure_event(write_problems(failing), write_problems(after))


def candidates(states: Iterable[PodState], sampler: Sampler) -> list[Candidate]:
    """The pods watermark eviction may choose from, with their usage. A pod already on its way out
    (deletionTimestamp set, e.g. evicted by this agent before it was restarted) is never chosen
    again: no pod is evicted twice. A pod the sampler has read but not measured yet (a CPU rate
    needs two samples; a cgroup not there yet) counts at its request, as in the usage the
    watermarks compare (:meth:`Sampler.pods_current`): a pod started a second ago that spins is
    not ranked below an idle one. A pod the sampler has not read at all has no usage."""
    out = []
    for pod in states:
        if pod.terminating:
            continue
        out.append(Candidate(pod.uid, pod.is_be, pod.priority, candidate_usage(sampler.pod_usage(pod.uid)),
                             pod.namespace, pod.name))
    return out


def candidate_usage(measured: PodUsage | None) -> dict[str, float]:
    """A pod's usage for the victim choice: measured, else its request; {} when not sampled."""
    if measured is None:
        return {}
    cpu, memory = measured.cpu_millicores, measured.memory_bytes
    return {"cpu": float(measured.pod.cpu_request_millicores if cpu is None else cpu),
            "memory": float(measured.pod.memory_request_bytes if memory is None else memory)}


@dataclass
class Round:
    """What one round did (for logs, metrics and tests)."""

    enabled: bool
    usage: dict[str, float]
    result: ApplyResult
    changed: dict[str, int]
    decisions: list[Decision] = field(default_factory=list)
    #: what the eviction watermarks compared (``usage``, or pods only: includeSystemUsage false)
    eviction_usage: dict[str, float] = field(default_factory=dict)
    #: the node mode's eviction rule this round (:func:`~tidal.api.node_mode.eviction_allowed`)
    eviction_allowed: bool = False
    eviction_reason: str = ""
    #: the node's requests (native and batch) in percent of its allocatable
    requests: dict[str, float] = field(default_factory=dict)


class NodeQoS:
    def __init__(self, node: str, layout: CgroupLayout, engine: QoSEngine,
                 capabilities: Mapping[str, bool], actions: NodeActions | None = None,
                 metrics: NodeMetrics | None = None, *, node_cpus: float | None = None,
                 cpu_controller_root: Path | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 evictions: EvictionJournal | None = None) -> None:
        self.node = node
        #: evictions requested and not yet finished (None: not kept, e.g. tests of the round)
        self.evictions = evictions
        self._resumed = False  # whether the journal's evictions were finished or dropped (first round)
        #: uids of journalled evictions whose request or Event failed: sorted out again next round
        self._unsettled: set[str] = set()
        self.layout = layout
        self.engine = engine
        self.capabilities = dict(capabilities)
        self.actions = actions
        self.metrics = metrics
        self.node_cpus = float(node_cpus or os.cpu_count() or 1)
        self.cpu_controller_root = cpu_controller_root
        self.clock = clock
        self.eviction = WatermarkEviction()
        self.policy = ColocationPolicy()
        self._policy_key: Any = object()
        self._override_problems: list[str] = []
        self._override_conflicts: list[str] = []
        self._policy_problems: list[str] = []
        #: metadata.generation of the ColocationPolicy in force (0: none exists, defaults)
        self.policy_generation = 0
        self._marks_key: Any = None
        self._labels: dict[str, str] = {}
        self._annotations: dict[str, str] = {}
        self.mode: NodeMode = node_mode(None)
        self.allocatable: dict[str, float] = {}
        #: the node mode's eviction rule as last computed: (allowed, reason)
        self.eviction_gate: tuple[bool, str] = eviction_allowed(self.mode, None)
        self._node_seen = False
        self._initial_taint_read = False
        self._states: dict[str, PodState] = {}
        self.blocked: dict[str, float] = {}
        self._work: asyncio.Queue[tuple[Decision | EvictionIntent, PodState | None]] | None = None
        #: this node's Events, sent by the worker in order, each until the API server has it
        self.node_events = EventQueue(f"node {node}", node, on_drop=self._count_dropped_event)
        if metrics is not None:
            metrics.node_events_dropped.labels(node=node)  # at 0 from the start
        self._worker: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None
        self.worker_wake_seconds = WORKER_WAKE_SECONDS
        self.restore_events_wait_seconds = RESTORE_EVENTS_WAIT_SECONDS
        self.node_tainted: bool | None = None  # as last seen at the API server
        #: the restore-pending label as last seen at the API server (None: node not seen yet)
        self.restore_labelled: bool | None = None
        #: the TidalNodeRestored Event of the label's pending removal is sent (it goes first)
        self._restored_event_sent = False
        #: whether the last round with the mode off put everything back (None: no such round yet)
        self.undo_clean: bool | None = None
        self._rounds_seen = False
        #: the cgroup files (and other intents) failing as of the last round: file -> (problem,
        #: when an intermittent one last failed), see :func:`failing_writes`
        self._failing: dict[str, tuple[str, float | None]] = {}
        #: NodeProfile status parts the features own (e.g. cpuInterference), from the last round
        self.feature_status: dict[str, Any] = {}

    @property
    def write_failures(self) -> dict[str, str]:
        """The cgroup files (and other intents) failing as of the last round: file -> problem."""
        return write_problems(self._failing)

    # -- inputs ------------------------------------------------------------------------------

    def observe_policy(self, obj: Mapping[str, Any] | None) -> None:
        """Take the ColocationPolicy object (None: none exists -> defaults). An invalid one keeps
        the last valid policy in force (its CRD schema should make that impossible)."""
        meta = (obj or {}).get("metadata") or {}
        key = None if obj is None else meta.get("resourceVersion")
        if key == self._policy_key:
            return
        self._policy_key = key
        generation = int(meta.get("generation") or 0)
        try:
            policy = ColocationPolicy.from_spec((obj or {}).get("spec") or {})
        except PolicyValidationError as err:
            log.error("ColocationPolicy generation %s is invalid (%s): keeping the policy in force",
                      generation, err)
            self._policy_problems = [f"ColocationPolicy generation {generation} not applied: {err}"]
            return
        self._policy_problems = []
        if policy != self.policy or generation != self.policy_generation:
            log.info("ColocationPolicy generation %s applied", generation)
        self.policy = policy
        self.policy_generation = generation

    def observe_node(self, obj: Mapping[str, Any] | None) -> None:
        """Take this Node's object; None (unknown or unreachable) keeps the last known one."""
        if obj is None:
            return
        meta = obj.get("metadata") or {}
        self._labels = dict(meta.get("labels") or {})
        self._annotations = dict(meta.get("annotations") or {})
        mode = node_mode(self._labels, self._annotations)
        if mode.mode != self.mode.mode:
            log.info("node %s: mode %s (%s)", self.node, mode.mode, mode.meaning)
        if (mode.conflicts, mode.problems) != (self.mode.conflicts, self.mode.problems):
            for line in (*mode.conflicts, *mode.problems):
                log.warning("node %s: %s", self.node, line)
        self.mode = mode
        self.allocatable = node_allocatable(obj)
        self.node_tainted = has_offline_taint(obj)
        self.restore_labelled = self._labels.get(qos.RESTORE_PENDING_NODE_LABEL) == "true"
        if not self._node_seen:
            self._node_seen = True
            # Restart-safe: a taint left by a previous run stays until usage is back at or below
            # the low watermarks (the state machine's rule), instead of being dropped blindly.
            self.eviction.tainted = self.node_tainted

    def _refresh_watermarks(self) -> None:
        key = (self.policy, tuple(sorted(self._annotations.items())))
        if key == self._marks_key:
            return
        self._marks_key = key
        marks, problems, conflicts = node_watermarks(self.policy, self._annotations)
        if problems != self._override_problems:
            for problem in problems:
                log.error("%s; the policy's watermarks stay in force", problem)
            self._override_problems = problems
        if conflicts != self._override_conflicts:
            for conflict in conflicts:
                log.warning("%s", conflict)
            self._override_conflicts = conflicts
        self.eviction.config = marks

    @property
    def enabled(self) -> bool:
        """The node's mode is active (either label, aliases included)."""
        return self.mode.active

    def _gate(self, states: Iterable[PodState]) -> tuple[dict[str, float], tuple[bool, str]]:
        requests = node_requests_percent(states, self.allocatable)
        gate = eviction_allowed(self.mode, requests)
        if gate[0] != self.eviction_gate[0] and self.mode.active:
            log.info("node %s: watermark eviction %s: %s", self.node,
                     "may act" if gate[0] else "held back", gate[1])
        return requests, gate

    # -- one round ---------------------------------------------------------------------------

    def round(self, sampler: Sampler, states: Iterable[PodState]) -> Round:
        """Enforce cgroups and decide evictions; API work is queued for the worker."""
        self._states = {s.uid: s for s in states}
        if self.evictions is not None and self._work is not None and (self._unsettled or not self._resumed):
            self._resume_evictions()
        online = sum(sampler.level_current(level)[0] for level in ONLINE_LEVELS)
        system = (sampler.system_cpu_millicores or 0.0) if self.policy.overselling.include_system_usage else 0.0
        state = NodeState(pods=tuple(self._states.values()), node_cpus=self.node_cpus,
                          online_usage_millicores=online, system_usage_millicores=system, policy=self.policy,
                          capabilities=self.capabilities, layout=self.layout,
                          cpu_controller_root=self.cpu_controller_root)
        enabled = self.enabled
        usage = usage_percent(sampler, self.node_cpus)
        now = self.clock()
        # Watermark eviction decides first (pure, in memory): the features see the pods it chose.
        decisions: list[Decision] = []
        self._refresh_watermarks()
        eviction_usage = eviction_usage_percent(sampler, self.node_cpus,
                                                self.policy.overselling.include_system_usage)
        pods: list[Candidate] = []
        requests, self.eviction_gate = self._gate(self._states.values())
        if enabled:
            self.blocked = {uid: t for uid, t in self.blocked.items() if t > now and uid in self._states}
            pods = [c for c in candidates(self._states.values(), sampler) if c.uid not in self.blocked]
            decisions = self.eviction.step(now, eviction_usage, pods, allowed=self.eviction_gate[0])
        else:
            self.eviction = WatermarkEviction(config=self.eviction.config)
            self.blocked.clear()
        ctx = Context(state, enabled, now, self.engine.options, usage, sampler, self._annotations,
                      candidates=pods, evicting=self.eviction.evicted)
        outcome = self.engine.run(ctx)
        result, changed = outcome.result, outcome.changed
        self._rounds_seen = True
        self.undo_clean = None if enabled else not (result.errors or result.restore_problems or outcome.problems
                                                    or self.engine.executor.journal.originals)
        for write, problem in result.errors:
            log.warning("cgroup write failed: %s", problem)
        for name, file, problem in outcome.problems:
            log.warning("%s: %s: %s", name, file, problem)
        self._failing, failure_event = track_write_failures(self._failing, now, outcome)
        # a part no feature writes any more goes (null in the status's merge patch)
        self.feature_status = {**{key: None for key in self.feature_status}, **outcome.status}
        events = [e for e in outcome.effects if isinstance(e, NodeEvent)]
        if failure_event is not None:
            events.append(failure_event)
        effects = [e for e in outcome.effects if not isinstance(e, NodeEvent)]
        for event in events:
            log.log(logging.WARNING if event.warning else logging.INFO, "node %s: %s: %s",
                    self.node, event.reason, event.message)
            self._queue_event(event)
        if enabled and not self.eviction_gate[0]:
            # The oversubscription-only row evicts only while the node's requests pass 100 % of
            # allocatable: PSI interference's evictions follow the same rule as the watermarks'.
            held = [d for d in effects if d.action is Action.EVICT]
            effects = [d for d in effects if d.action is not Action.EVICT]
            for decision in held:
                log.info("eviction held back (%s): %s", self.eviction_gate[1], decision.reason)
                # it did not happen: no cooldown, and its pod stays a candidate
                self._release(getattr(decision, "kind", "watermark"), decision.pod_uid or "")
        decisions += effects
        for decision in decisions:
            log.info("%s: %s", decision.action, decision.reason)
            if decision.action is Action.EVICT:
                self._queue(decision, self._states.get(decision.pod_uid or ""))
        if self._wake is not None and (
                (self.node_tainted is not None and self.node_tainted != self.want_taint)
                or (self.restore_labelled is not None and self.restore_labelled != self.want_restore_label)):
            self._wake.set()
        self._export(sampler, usage, changed, result, enabled, state, outcome.gauges, outcome.counters)
        return Round(enabled, usage, result, changed, decisions, eviction_usage, *self.eviction_gate, requests)

    def policy_status(self, capabilities, problems: Iterable[str] = ()) -> dict[str, Any]:
        """The NodeProfile's ``status.policy``: generation, effective spec, problems (Volcano
        watermark annotations disagreeing with Tidal's among them, and ``problems`` found
        outside the rounds, e.g. a BE idle group the agent could not create)."""
        self._refresh_watermarks()
        return policy_status(self.policy, self.policy_generation, self.eviction.config,
                             [*self._policy_problems, *self._override_conflicts, *self._override_problems,
                              *problems], capabilities)

    def mode_status(self) -> dict[str, Any]:
        """The NodeProfile's ``status.mode`` (:class:`~tidal.api.node_profile.NodeModeReport`)."""
        return mode_status(self.mode, self.eviction_gate)

    @property
    def want_taint(self) -> bool:
        return self.enabled and self.eviction.tainted

    @property
    def want_restore_label(self) -> bool:
        return restore_pending(self.enabled, self.undo_clean)

    def _export(self, sampler: Sampler, usage, changed, result, enabled, state: NodeState, gauges=(),
                counters=()) -> None:
        m = self.metrics
        if m is None:
            return
        n = self.node
        for gauge in gauges:  # the features' (e.g. tidal_psi_some_avg10_percent)
            getattr(m, gauge.metric).labels(n, *gauge.labels).set(gauge.value)
        for counter in counters:  # e.g. tidal_be_cpu_interference_throttles_total
            getattr(m, counter.metric).labels(n, *counter.labels).inc(counter.amount)
        if sampler.node_cpu_millicores is not None:
            m.node_cpu.labels(n).set(sampler.node_cpu_millicores)
        if sampler.node_memory_bytes is not None:
            m.node_memory.labels(n).set(sampler.node_memory_bytes)
        for level in QoSLevel:
            cpu, memory = sampler.level_current(level)
            m.qos_cpu.labels(n, level.value).set(cpu)
            m.qos_memory.labels(n, level.value).set(memory)
        for resource in RESOURCES:
            m.evicting.labels(n, resource).set(1 if self.eviction.resources[resource].evicting else 0)
        m.tainted.labels(n).set(1 if self.node_tainted else 0)
        for name, count in changed.items():
            m.cgroup_writes.labels(n, name).inc(count)
        if result.errors:
            m.cgroup_errors.labels(n).inc(len(result.errors))
        suppression = state.policy.be_isolation.cpu_suppression
        if any(g.metric == "be_cpu_quota" for g in gauges):
            pass  # the interference control's allowance (below suppression's bound)
        elif enabled and suppression.enabled:
            from .be_cpu_suppression import bound_millicores
            m.be_cpu_quota.labels(n).set(bound_millicores(state, suppression.threshold_percent / 100,
                                                          suppression.floor_millicores))
        else:
            m.be_cpu_quota.labels(n).set(0)

    # -- API work ----------------------------------------------------------------------------

    def _queue_event(self, event: NodeEvent) -> None:
        if self._work is None:
            return  # no API (tests of the round alone): logged only
        self.node_events.put(event.reason, event)
        assert self._wake is not None
        self._wake.set()

    def _count_dropped_event(self) -> None:
        if self.metrics is not None:
            self.metrics.node_events_dropped.labels(node=self.node).inc()

    async def _send_node_events(self) -> bool:
        """The node's waiting Events sent in order (:mod:`tidal.kube.event_queue`); True when none is left."""
        return await self.node_events.send(self._post_node_event)

    async def _post_node_event(self, pending: PendingEvent) -> None:
        assert self.actions is not None
        event: NodeEvent = pending.payload
        await within_api_timeout(self.actions.event(
            kind="Node", name=self.node, namespace="", uid=None, reason=event.reason, message=event.message,
            warning=event.warning, event_name=pending.name, at=pending.at))

    def _resume_evictions(self) -> None:
        """The evictions a previous run requested and did not finish (the first round with the API
        worker running), and this run's whose request or Event failed (the next round), are
        finished or dropped as eviction_journal.resume says."""
        assert self.evictions is not None and self._work is not None and self._wake is not None
        first = not self._resumed
        when, note = (("before the agent restarted", FINISHED_NOTE) if first
                      else ("earlier (an API call failed)", RETRIED_NOTE))
        intents = [i for i in self.evictions.intents.values() if not self._resumed or i.uid in self._unsettled]
        self._resumed, self._unsettled = True, set()
        finish, drop = resume(intents, {uid: s.terminating for uid, s in self._states.items()})
        for intent in drop:
            log.info("%s/%s: eviction requested %s did not take effect (the pod runs): the "
                     "watermarks decide afresh", intent.namespace, intent.name, when)
            self.evictions.done(intent.uid)
            self._release(intent.kind, intent.uid)  # no cooldown for what did not happen
        for intent in finish:
            log.info("%s/%s: eviction requested %s took effect: finishing it", intent.namespace, intent.name, when)
            self._work.put_nowait((dataclasses.replace(intent, reason=f"{intent.reason} {note}"), None))
            if first:  # a restarted agent: the cooldown runs from the request, not from never
                self._hold(intent.kind, self.clock() - max(0.0, time.time() - intent.requested_at))
        if finish:
            self._wake.set()

    def _psi_machine(self):
        return next((f.machine for f in self.engine.features if getattr(f, "name", "") == "psi-interference"),
                    None)

    def _release(self, kind: str, uid: str) -> None:
        """An eviction that did not take effect (refused, failed, held back): the machine that
        chose it (``kind``: ``watermark`` or ``psi``) may choose again at once, and not only this
        pod; the other machine's cooldown is not touched."""
        if kind == "psi":
            machine = self._psi_machine()
            if machine is not None:
                machine.evicted.pop(uid, None)
                machine.last_eviction = None
            return
        self.eviction.evicted.discard(uid)
        self.eviction.last_eviction = None

    def _hold(self, kind: str, at: float) -> None:
        """An eviction of ``kind`` took effect at ``at`` (this clock's time): its cooldown runs from then."""
        machine = self._psi_machine() if kind == "psi" else self.eviction
        if machine is not None and (machine.last_eviction is None or machine.last_eviction < at):
            machine.last_eviction = at

    def _queue(self, decision: Decision, pod: PodState | None) -> None:
        if self._work is None or pod is None:
            # no API (tests of the round alone) or pod vanished: let the machine choose again
            self.eviction.evicted.discard(decision.pod_uid or "")
            return
        self._work.put_nowait((decision, pod))
        assert self._wake is not None
        self._wake.set()

    def start(self) -> None:
        """Start the API worker (needs a running event loop and ``actions``)."""
        if self.actions is None or self._worker is not None:
            return
        self._work = asyncio.Queue()
        self._wake = asyncio.Event()
        self._worker = asyncio.create_task(self._run_worker())

    async def stop(self) -> None:
        """Cancel the API worker and wait until it has ended (the agent's restore on its way out
        waits for this)."""
        worker, self._worker = self._worker, None
        if worker is not None:
            await cancel_and_wait(worker)

    async def _run_worker(self) -> None:
        assert self._work is not None and self._wake is not None
        while True:
            try:
                async with asyncio.timeout(self.worker_wake_seconds):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await within_api_timeout(self._sync_taint())
            except asyncio.CancelledError:
                raise
            except Exception as err:  # retried on the next wake-up or after 5 s
                log.warning("taint of node %s not updated: %s", self.node, err)
            try:
                await within_api_timeout(self._sync_restore_label())
            except asyncio.CancelledError:
                raise
            except Exception as err:  # retried on the next wake-up or after 5 s
                log.warning("label %s of node %s not updated: %s", qos.RESTORE_PENDING_NODE_LABEL, self.node, err)
            await self._send_node_events()  # one that fails waits, with those after it, for the next wake-up
            while not self._work.empty():
                decision, pod = self._work.get_nowait()
                if isinstance(decision, EvictionIntent):
                    await self._finish_eviction(decision)
                    continue
                assert pod is not None
                try:
                    took_effect = await within_api_timeout(self._evict(decision, pod))
                except asyncio.CancelledError:
                    raise
                except Exception as err:
                    self._count_failure("api-error")
                    if self.evictions is not None and pod.uid in self.evictions.intents:
                        # It may have taken effect (a timeout): the next round sorts it out, and
                        # until then its cooldown stands (no second pod evicted for it).
                        log.warning("eviction of %s/%s failed (%s): the next round checks whether it "
                                    "took effect", pod.namespace, pod.name, err)
                        self._unsettled.add(pod.uid)
                    else:
                        log.warning("eviction of %s/%s failed (%s): it will be chosen again",
                                    pod.namespace, pod.name, err)
                        self._release(getattr(decision, "kind", "watermark"), pod.uid)
                    continue
                if took_effect is not None:
                    # Evicted: its cooldown stands whatever becomes of the Event (a failed Event
                    # must not let the machine evict a second pod at once).
                    await self._finish_eviction(took_effect)

    async def _sync_taint(self) -> None:
        assert self.actions is not None
        want = self.want_taint
        if self.node_tainted == want:
            return
        if await self.actions.set_offline_taint(want):
            self.node_tainted = want
            reason, message = taint_event(want, self.eviction)
            log.info("node %s: %s", self.node, message)
            self.node_events.put(reason, NodeEvent(reason, message, warning=want))  # sent later in this wake-up
        else:
            self.node_tainted = want

    async def _sync_restore_label(self) -> None:
        assert self.actions is not None
        if self.restore_labelled is None or not self._rounds_seen:
            return  # the node not seen yet, or no round decided yet
        want = self.want_restore_label
        if want:
            self._restored_event_sent = False  # the next removal sends its own Event
        if self.restore_labelled == want:
            return
        if not want:
            # Every Event first, the TidalNodeRestored last: without the label the DaemonSet
            # deletes this pod at once, and an Event still waiting when the agent is stopped would
            # be lost (the CI run of 1e8a9bf). Queued once, however often the label's removal has
            # to be tried again; the removal waits until they are all sent (a minute at most).
            if not self._restored_event_sent:
                self._restore_event(want)
                self._restored_event_sent = True
            if not await self._send_node_events():
                if self.node_events.failing_for() < self.restore_events_wait_seconds:
                    return  # tried again at the next wake-up
                log.warning("node %s: the restore-pending label goes with %d Event(s) not sent for %.0f s: "
                            "they are lost with the agent", self.node, len(self.node_events),
                            self.node_events.failing_for())
        await self.actions.set_label(qos.RESTORE_PENDING_NODE_LABEL, "true" if want else None)
        self.restore_labelled = want
        if want:
            self._restore_event(want)

    def _restore_event(self, pending: bool) -> None:
        reason, message = restore_event(pending)
        log.info("node %s: %s", self.node, message)
        self.node_events.put(reason, NodeEvent(reason, message))  # sent in this wake-up (the worker's own)

    async def _finish_eviction(self, intent: EvictionIntent) -> None:
        """The evidence of an eviction that took effect (`_evidence`); an API error keeps its
        intent in the journal, and the next round sorts it out (`_resume_evictions`)."""
        try:
            await within_api_timeout(self._evidence(intent))
        except asyncio.CancelledError:
            raise
        except Exception as err:
            log.warning("%s/%s evicted, its TidalEvicted Event not sent (%s): tried again next round",
                        intent.namespace, intent.name, err)
            self._unsettled.add(intent.uid)

    async def _evict(self, decision: Decision, pod: PodState) -> EvictionIntent | None:
        """Ask the Eviction API; the intent of an eviction that took effect (its evidence still to
        send), None when the API refused it (a PodDisruptionBudget) or the pod is gone."""
        assert self.actions is not None
        intent = EvictionIntent(pod.uid, pod.namespace, pod.name, decision.reason, decision.resource or "",
                                getattr(decision, "kind", "watermark"), time.time())
        if self.evictions is not None:  # before the request: a kill after it is finished on restart
            self.evictions.record(intent)
        outcome = await self.actions.evict(pod.namespace, pod.name)
        if outcome is not EvictOutcome.EVICTED and self.evictions is not None:
            self.evictions.done(pod.uid)
        if outcome is EvictOutcome.BLOCKED:
            self._count_failure("disruption-budget")
            self.blocked[pod.uid] = self.clock() + BLOCKED_RETRY_SECONDS
            self._release(intent.kind, pod.uid)  # try the next candidate right away
            message = f"eviction blocked by a PodDisruptionBudget; {decision.reason}"
            log.info("%s/%s: %s", pod.namespace, pod.name, message)
            await self.actions.event(kind="Pod", name=pod.name, namespace=pod.namespace, uid=pod.uid,
                                     reason="TidalEvictionBlocked", message=message, warning=True)
            return None
        if outcome is EvictOutcome.GONE:
            return None
        log.info("evicted %s/%s: %s", pod.namespace, pod.name, decision.reason)
        return intent

    def _count_failure(self, reason: str) -> None:
        """``tidal_eviction_failures_total{reason}`` (:data:`tidal.metrics.EVICTION_FAILURE_REASONS`)."""
        if self.metrics is not None:
            self.metrics.eviction_failures.labels(self.node, reason).inc()

    async def _evidence(self, intent: EvictionIntent) -> None:
        """What an eviction that took effect leaves: the TidalEvicted Event, named after the pod's
        uid so that it exists once (an agent killed after sending it and before its journal said
        so finds it there on restart), and the counter; then its intent leaves the journal.

        The counter counts every intent this process takes out of the journal, the Event found
        existing included: a kill between the Event and the count, or an Event the API created
        while its answer timed out, used to leave the eviction uncounted. (A kill between the count
        and the journal's update counts it twice if a scrape fell in between: a much smaller
        window, one file write.)"""
        assert self.actions is not None
        sent = await self.actions.event(kind="Pod", name=intent.name, namespace=intent.namespace, uid=intent.uid,
                                        reason="TidalEvicted", message=intent.reason, warning=True,
                                        event_name=evicted_event_name(intent.name, intent.uid))
        if sent is False:
            log.info("%s/%s: its TidalEvicted Event exists already", intent.namespace, intent.name)
        if self.metrics is not None:
            self.metrics.evictions.labels(self.node, intent.resource, intent.kind).inc()
        if self.evictions is not None:
            self.evictions.done(intent.uid)
