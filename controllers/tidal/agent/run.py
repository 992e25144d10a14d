# SPDX-License-Identifier: Apache-2.0
"""The node agent's loop: every second sample usage; every ``beIsolation.qosCheckIntervalSeconds``
of the policy (default 1) run the QoS engine's round (cgroups, watermark eviction; see
`tidal.agent.rounds`); every `report_interval` seconds report to the node's own NodeProfile with
the policy's online-peak prediction and the capability probe."""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from tidal.api import qos
from tidal.kube.client import ApiError
from tidal.agent.be_idle_group import BEIdleGroup
from tidal.agent.be_placement import BEPlacement
from tidal.agent.collector.cgroups import CgroupDriver, CgroupLayoutError, detect_layout
from tidal.agent.collector.sampler import Sampler
from tidal.agent.history import STEP_SECONDS, OnlineHistory, steady_wall_clock
from tidal.agent.history_store import FILE_NAME as HISTORY_FILE, HistoryStore
from tidal.agent.node_profile import write_status
from tidal.agent.prediction import STATISTICS, online_peak, system_usage
from tidal.agent.qos.capabilities import probe, supported_map
from tidal.agent.qos.capabilities import to_status as capability_status
from tidal.agent.nri.probe import nri_capability
from tidal.agent.qos.engine import QoSEngine, node_active
from tidal.agent.qos.eviction_journal import FILE_NAME as EVICTIONS_FILE, EvictionJournal
from tidal.agent.qos.node_actions import NodeActions
from tidal.agent.qos.node_qos import NodeQoS, usage_percent
from tidal.agent.rounds import TickFailures, tick_loop, verify_rounds
from tidal.agent.qos.pod_features import FeaturePods
from tidal.kube.watch import ObjectWatch
from tidal.metrics import node_metrics, scheduler_usage_metrics, zero_evictions
from tidal.api.policy import DEFAULT_POLICY_NAME, ColocationPolicy
from tidal.predict.predictors import REALISABLE
from tidal.tasks import sleep_or_stop, within

log = logging.getLogger(__name__)


class Predictions:
    """The online-peak prediction the policy asks for: a window statistic, or a predictor of
    `tidal.predict` on the node's 5-minute history (recomputed once per closed step)."""

    def __init__(self, step_seconds: int = STEP_SECONDS) -> None:
        self.history = OnlineHistory(step_seconds=step_seconds)
        self._cached: tuple[tuple[str, int | None], tuple[float, dict | None]] | None = None
        self.store: HistoryStore | None = None  # set by restore: saved after every closed step
        self._origin: dict = {"restored": False, "reason": "not persisted"}
        self._restored_step: int | None = None

    def restore(self, store: HistoryStore, now: float) -> dict:
        """Before the first observe: start from the history `store` saved, when it is usable
        (see `tidal.agent.history_store`), and save to it after every closed step from now on.
        A restored history predicts at once only when no step is missing since (a quick restart);
        after a gap, from the first step this agent closes itself. Returns `history_origin`."""
        loaded = store.load(step_seconds=self.history.step_seconds, keep_steps=self.history.keep_steps,
                            now=now)
        if loaded.history is not None:
            self.history, self._cached = loaded.history, None
            self._restored_step = loaded.history.newest_closed
        self.store, self._origin = store, loaded.origin()
        return self.history_origin

    @property
    def history_origin(self) -> dict:
        """Where the history comes from, for the NodeProfile: {"restored": true, "steps",
        "savedAt"} or {"restored": false, "reason"}; plus saveFailures / saveError while saves fail."""
        origin = dict(self._origin)
        if self.store is not None and self.store.last_error is not None:
            origin.update(saveFailures=self.store.failures, saveError=self.store.last_error)
        return origin

    def observe(self, sampler: Sampler, now_wall: float) -> None:
        if sampler.node_cpu_millicores is None:
            # the sampler's first tick (an agent started or restarted): no CPU rate yet, so every
            # pod would count at its request and the step, which keeps its maximum, would hold
            # them there — the windows skip this tick too
            return
        online = []
        for usage in sampler.pod_usages():
            pod = usage.pod
            if pod.tidal_level not in (qos.QoSLevel.HLS, qos.QoSLevel.LS):
                continue
            # a pod without usage yet counts at its request, as everywhere in the agent
            online.append((pod.uid, usage.cpu_or_request / 1000, pod.cpu_request_millicores / 1000))
        if self.history.observe(now_wall, online) and self.store is not None:
            self.store.save(self.history, now_wall)

    def _history_peak(self, name: str) -> tuple[float, dict | None] | None:
        """(cores, where they come from) of the policy's predictor on the node's history."""
        key = (name, self.history.newest_closed)
        if self._cached and self._cached[0] == key:
            return self._cached[1]
        predictor = next(cls for cls in REALISABLE if cls.name == name)()
        waiting = self._restored_step is not None and self.history.newest_closed == self._restored_step \
            and self.history.open_step != self._restored_step + 1
        if not len(self.history) or waiting:
            # no closed step yet (a new node, or a restored history with steps missing since):
            # a provisional prediction from the open step, recomputed at every report until the
            # first step closes, so a new node does not wait five minutes to offer anything
            history = self.history.open_history()
            if not len(history):
                if self.history.open_step is None:
                    return None  # not sampled yet
                return 0.0, {"regime": "no-online-pods", "cpuCores": 0.0,
                             "reason": "no online (HLS or LS) pod on the node: nothing to hold back"}
            return self._predicted(predictor, history, provisional=True)
        result = self._predicted(predictor, self.history.node_history(), provisional=False)
        self._cached = (key, result)
        return result

    @staticmethod
    def _predicted(predictor, history, provisional: bool) -> tuple[float, dict | None]:
        explain = getattr(predictor, "explain", None)
        basis = explain(history) if explain is not None else None
        if basis is not None and provisional:
            basis["provisional"] = "from the samples of the step still open"
        return predictor.predict(history), basis

    def status(self, sampler: Sampler, policy: ColocationPolicy) -> dict | None:
        window = policy.overselling.window_seconds
        name = str(policy.overselling.predictor)
        cpu, memory = sampler.online_stats(window)
        if name in STATISTICS:
            peak = online_peak(cpu, memory, name, window)
            return None if peak is None else peak.to_status()
        peak = self._history_peak(name)
        if peak is None or memory is None:
            return None  # no sample yet: the master offers nothing until there is
        cores, basis = peak
        return {"predictor": name, "steps": len(self.history),
                "onlinePeak": {"cpuMillicores": round(cores * 1000), "memoryBytes": round(memory.max)},
                **({"basis": basis} if basis is not None else {}),
                # the history predictors predict CPU; memory is the window's largest working set
                "memoryBasis": {"statistic": "max", "windowSeconds": window, "samples": memory.samples},
                **({"history": self.history_origin} if self.store is not None else {})}


def report(sampler: Sampler, policy: ColocationPolicy, predictions: Predictions,
           capabilities: list[dict] | None = None, policy_status: dict | None = None,
           mode: dict | None = None, features: dict | None = None) -> dict:
    """The NodeProfile status: the sampler's summary, the online-peak prediction, what this
    node's kernel and hardware support (each unsupported feature with its reason), the
    policy it runs (generation, effective spec, problems) and the node's mode (with whether
    watermark eviction may act now, and why)."""
    status = sampler.summary()
    if capabilities is not None:
        status["capabilities"] = capabilities
    if policy_status is not None:
        status["policy"] = policy_status
    if mode is not None:
        status["mode"] = mode
    status.update(features or {})  # parts the QoS features own (cpuInterference)
    prediction = predictions.status(sampler, policy)
    if prediction is not None:
        window = policy.overselling.window_seconds  # usage outside the pods, same window (issue 18)
        system = system_usage(*sampler.system_stats(window), window)
        if system is not None:
            prediction["systemUsage"] = system
        status["predictions"] = prediction
    return status


async def serve_health(address: str, port: int, registry, alive, ready=None):
    """``/metrics``, ``/healthz`` (200 while `alive()`: the agent is not stalled) and
    ``/readyz`` (200 while `ready()`, default `alive`: it acts on the node) on plain HTTP."""
    from aiohttp import web
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    async def metrics(_):
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_):
        return web.Response(text="ok\n") if alive() else web.Response(status=503, text="rounds stalled\n")

    async def readyz(_):
        return web.Response(text="ok\n") if (ready or alive)() else \
            web.Response(status=503, text="not acting on the node yet (watches not synced) or rounds stalled\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, address, port)
    await site.start()
    bound = runner.addresses[0][1] if runner.addresses else port
    log.info("metrics and health on http://%s:%s/", address, bound)
    return runner


def node_layout(cgroup_root: Path, cgroup_driver: CgroupDriver | None, kubelet_cgroup_root: str):
    try:
        return detect_layout(cgroup_root, driver=cgroup_driver, kubelet_root=kubelet_cgroup_root)
    except CgroupLayoutError as err:
        # No kubelet cgroups (yet): node usage still comes from /proc, and every pod counts
        # at its request until its cgroup appears — never less than it asked for.
        log.warning("%s: assuming the cgroupfs driver; pods count at their request", err)
        return detect_layout(cgroup_root, driver=CgroupDriver.CGROUPFS, kubelet_root=kubelet_cgroup_root)


async def run_node_agent(api, node: str, *, cgroup_root: Path = Path("/sys/fs/cgroup"),
                         proc_root: Path = Path("/proc"), report_interval: float = 10.0,
                         cgroup_driver: CgroupDriver | None = None, kubelet_cgroup_root: str = "/",
                         history_step_seconds: int = STEP_SECONDS,
                         state_dir: Path = Path("/var/lib/tidal-agent"),
                         metrics_address: str = "0.0.0.0", metrics_port: int | None = 9465,
                         registry=None, nri_socket: str = "/var/run/nri/nri.sock",
                         node_memory_cgroup: str | None = None,
                         stop: asyncio.Event | None = None) -> None:
    from prometheus_client import REGISTRY

    stop = stop or asyncio.Event()
    layout = node_layout(cgroup_root, cgroup_driver, kubelet_cgroup_root)
    # the policy's default window and its maximum (overselling.windowSeconds ≤ 1800): every window
    # a policy may ask for is within the samples kept
    window = ColocationPolicy.from_spec({}).overselling.window_seconds
    memory_cgroup = None
    if node_memory_cgroup is not None:  # a path in the memory hierarchy, as in /proc/<pid>/cgroup
        memory_cgroup = layout.hierarchy.memory_root / node_memory_cgroup.strip("/")
        if not (memory_cgroup / "memory.stat").is_file():
            raise CgroupLayoutError(f"--node-memory-cgroup {node_memory_cgroup}: no memory cgroup at {memory_cgroup}")
    sampler = Sampler(layout, proc_root=proc_root, windows=sorted({60, window, 1800}),
                      node_memory_cgroup=memory_cgroup)
    pods = FeaturePods(api, node)  # PodStates with burst/cache/CPU data for the features
    node_watch = ObjectWatch(api, "/api/v1/nodes", node, what=f"node {node}")
    policy_watch = ObjectWatch(api, f"/apis/{qos.API_GROUP}/{qos.API_VERSION}/colocationpolicies",
                               DEFAULT_POLICY_NAME, what=f"ColocationPolicy {DEFAULT_POLICY_NAME}")
    predictions = Predictions(history_step_seconds)
    history_clock = steady_wall_clock()  # the history's steps never follow a wall clock set back
    predictions.restore(HistoryStore(Path(state_dir) / HISTORY_FILE, node), history_clock())
    # Probed once at start: kernels and hardware do not change under a running agent.
    # ... and which path sets BE resources at container creation: NRI (tidal-agent nri) or, without
    # it, this engine's reconcile after the container started.
    probed = [*probe(cgroup_root, proc_root, Path("/sys"), layout.kubelet_root), nri_capability(nri_socket)]
    capabilities = capability_status(probed)
    registry = REGISTRY if registry is None else registry
    metrics = node_metrics(registry)
    zero_evictions(metrics, node)
    metrics.tick_errors.labels(node=node)  # at 0 from the start, so the first failure shows in increase()
    usage_metrics = scheduler_usage_metrics(registry)
    placement = BEPlacement(layout)
    idle_group = BEIdleGroup(layout, cgroup_root)
    engine = QoSEngine(Path(state_dir) / "qos-journal.json", cgroup_root=cgroup_root)
    node_qos = NodeQoS(node, layout, engine, supported_map(probed), NodeActions(api, node), metrics,
                       evictions=EvictionJournal(Path(state_dir) / EVICTIONS_FILE))
    watchers = [asyncio.create_task(w.run()) for w in (pods, node_watch, policy_watch)]
    loop = asyncio.get_running_loop()
    last_tick = loop.time()
    acting = [False]  # set once the watches synced and the rounds started
    runner = None
    if metrics_port is not None:
        # Alive while waiting for the API server (a restart would not bring it back) and while the
        # rounds keep running; ready only while acting on the node.
        runner = await serve_health(metrics_address, metrics_port, registry,
                                    lambda: not acting[0] or loop.time() - last_tick < 10,
                                    lambda: acting[0] and loop.time() - last_tick < 10)
    last_report = None
    reported: list[int | None] = [None]  # the policy generation last written, set by _report
    failed = [False]  # whether the last report failed (set by _report): retried sooner
    writer: asyncio.Task | None = None

    def observe(now: float) -> None:
        # every tick (1 s): the latest policy and Node (first: this tick's decisions follow them),
        # the sample, the prediction's history
        node_qos.observe_policy(policy_watch.object)
        node_qos.observe_node(node_watch.object)
        # not on a node whose mode is off (its agent only restores): the group goes with its last pod
        in_force = node_qos.enabled and node_qos.policy.be_isolation.cpu_priority.idle_group_in_force
        found = placement.refresh(in_force, pods.states.values())  # the group's BE pods
        infos = pods.pods  # built from the watch's objects at each access: once per tick
        idle_group.remove_gone(found, infos.keys())
        idle_group.upkeep(in_force, holding=bool(found & infos.keys()))
        sampler.sample(placement.place(infos.values()))
        predictions.observe(sampler, history_clock())

    def act(started: float, qos_round: bool) -> None:
        nonlocal last_tick, last_report, writer
        if qos_round:  # every beIsolation.qosCheckIntervalSeconds (tidal.agent.rounds)
            engine.executor.verify_every = verify_rounds(node_qos.policy.be_isolation.qos_check_interval_seconds)
            node_qos.round(sampler, list(placement.place(pods.states.values())))
        now = loop.time()
        usage = usage_percent(sampler, node_qos.node_cpus)
        if "cpu" in usage and sampler.node_memory_total_bytes:
            usage_metrics.observe(node, 1 - usage["cpu"] / 100, now - last_tick,
                                  sampler.node_memory_total_bytes, sampler.node_memory_bytes or 0)
        last_tick = now
        # A new policy generation is reported at once (its round ran this tick: rounds.tick_loop):
        # rollout status waits for it. The write runs beside the ticks, so an absent API server
        # never delays enforcement.
        behind = reported[0] != node_qos.policy_generation
        due = report_due(started, last_report, failed[0], behind, report_interval)
        if due and (writer is None or writer.done()):
            last_report = started
            writer = asyncio.create_task(_report(api, node, report(
                sampler, node_qos.policy, predictions, capabilities,
                node_qos.policy_status(probed, idle_group.problems()), node_qos.mode_status(), node_qos.feature_status),
                node_qos.policy_generation, reported, failed))

    failures = TickFailures()

    def tick_failed(error: Exception) -> None:
        # one odd file or reading must not end enforcement; a fault at every tick stops the
        # ticks completing, which the liveness probe sees (above) and the kubelet restarts
        metrics.tick_errors.labels(node=node).inc()
        said = failures.seen(error)
        if said == "first":
            log.error("node %s: a tick failed, the next one runs: %s", node, error, exc_info=error)
        elif said == "repeat":
            log.error("node %s: the same failure again (%d ticks since it was first logged): %s",
                      node, failures.repeats, error)

    async def wait(seconds: float) -> None:
        await sleep_or_stop(stop, seconds)

    try:
        if not await wait_synced((pods, node_watch, policy_watch), stop):
            return  # stopped before the API server answered: nothing was changed on the node
        node_qos.start()
        acting[0] = True
        await tick_loop(observe, act, lambda: node_qos.policy.be_isolation.qos_check_interval_seconds,
                        stop.is_set, clock=loop.time, wait=wait,
                        inputs=lambda: (node_qos.policy_generation, node_qos.mode.mode), failed=tick_failed)
    finally:
        await node_qos.stop()
        # The DaemonSet runs only on nodes with either label (Tidal's or Volcano's alias), so
        # switching a node's mode off deletes this agent at once, maybe before a round saw the
        # last label go: what it changed is put back on the way out.
        if node_watch.synced.is_set() and restore_on_exit(await node_now(api, node, node_watch.object)):
            problems = await asyncio.shield(restore_node(api, node, state_dir, cgroup_root))
            idle_group.remove_when_empty()  # the BE idle group too, unless BE pods still run there
            if not idle_group.swept:
                idle_group.hold_besteffort_weight()  # those run at BestEffort's weight, as below kubepods
            log.info("node %s: node mode off, restored what the agent changed%s", node,
                     f" (not restored: {problems})" if problems else "")
        if writer is not None:
            writer.cancel()
        for w in watchers:
            w.cancel()
        if runner is not None:
            await runner.cleanup()


async def wait_synced(watchers, stop: asyncio.Event, warn_every: float = 60.0) -> bool:
    """Wait until every watcher has listed its objects once (True), or until `stop` (False).
    The API server away at start is not an error of the agent: a warning every `warn_every`
    seconds names what is still missing and why, and the wait goes on (no traceback, no exit)."""
    waited = 0.0
    while True:
        pending = [w for w in watchers if not w.synced.is_set()]
        if not pending:
            return True
        if stop.is_set():
            return False
        waits = [asyncio.ensure_future(e.wait()) for e in (stop, *(w.synced for w in pending))]
        done, _ = await asyncio.wait(waits, timeout=warn_every, return_when=asyncio.FIRST_COMPLETED)
        for task in waits:
            task.cancel()
        if not done:
            waited += warn_every
            log.warning("not acting on the node yet: after %.0fs still waiting for the first list of %s",
                        waited, "; ".join(f"{w.what} ({w.last_error or 'no answer yet'})" for w in pending))


async def node_now(api, node: str, cached: dict | None, timeout: float = 5.0) -> dict | None:
    """The Node as the API server has it now (None: deleted), for the decision on the way out:
    the watch may not have delivered the last change yet (a node deleted and registered again
    without its labels moments before the DaemonSet deleted this pod). The watched object when
    the API server does not answer."""
    try:
        return await within(timeout, api.request("GET", f"/api/v1/nodes/{node}"))
    except ApiError as err:
        if err.status == 404:
            return None
        log.warning("node %s not read on the way out (%s): deciding from the last one watched", node, err)
    except Exception as err:  # the API away (timeout, connection refused): the watched object
        log.warning("node %s not read on the way out (%s): deciding from the last one watched", node,
                    err or type(err).__name__)
    return cached


def restore_on_exit(node: dict | None) -> bool:
    """Whether a stopping agent puts back what it changed: its Node's mode is off (neither
    label, aliases included: the DaemonSet deletes its pod then), or the Node is gone."""
    meta = (node or {}).get("metadata") or {}
    return not node_active(meta.get("labels"), meta.get("annotations"))


# A failed report (the API server away) is retried this soon, not a whole report interval later:
# the node is reported again within seconds of the API server's return (issue 15: everything
# converges within 10 s), with one warning per retry meanwhile.
REPORT_RETRY_SECONDS = 2.0


def report_due(now: float, last_report: float | None, last_failed: bool, behind: bool, interval: float,
               retry: float = REPORT_RETRY_SECONDS) -> bool:
    """Whether the agent writes its NodeProfile at `now`: the first time, when the policy
    generation it reported is behind, every `interval` seconds, and `retry` seconds after a
    failed write (never later than `interval`)."""
    if last_report is None or behind:
        return True
    return now - last_report >= (min(retry, interval) if last_failed else interval)


async def _report(api, node: str, status: dict, generation: int, reported: list, failed: list | None = None) -> None:
    failed = failed if failed is not None else [False]
    try:
        await within(10, write_status(api.request, node, status))
        reported[0] = generation
        failed[0] = False
    except Exception as err:  # retried after REPORT_RETRY_SECONDS; stale data degrades to 0 at the master
        failed[0] = True
        log.warning("NodeProfile %s not written: %s", node, err)


async def restore_node(api, node: str, state_dir: Path, cgroup_root: Path | str) -> list[tuple[str, str]]:
    """Uninstall / node mode off for good: every feature's undo (registry order) and every
    journalled cgroup value put back — older agents' journals included, journalled under another
    cgroup root (the agent's pod: /host/sys/fs/cgroup) read under ``cgroup_root`` — then the
    offline-evicting taint removed, and the restore-pending label when nothing is left. Returns
    the files that could not be restored."""
    problems = QoSEngine(Path(state_dir) / "qos-journal.json", cgroup_root=cgroup_root).restore()
    if api is not None:
        actions = NodeActions(api, node)
        try:
            if await actions.set_offline_taint(False):
                log.info("node %s: offline-evicting taint removed", node)
            if not problems:  # kept while anything is left to put back: the DaemonSet stays on the node
                await actions.set_label(qos.RESTORE_PENDING_NODE_LABEL, None)
        except ApiError as err:
            if err.status != 404:
                raise
            log.info("node %s: gone from the API server; its cgroups are restored", node)
    return problems
