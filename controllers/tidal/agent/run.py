"""The node agent's collection loop: sample every second, report to the node's own
NodeProfile every `report_interval` seconds with the policy's online-peak prediction."""
from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from tidal import qos
from tidal.agent.collector.cgroups import CgroupDriver, CgroupLayoutError, detect_layout
from tidal.agent.collector.sampler import Sampler
from tidal.agent.history import STEP_SECONDS, OnlineHistory
from tidal.agent.node_profile import write_status
from tidal.agent.pods import NodePods
from tidal.agent.prediction import STATISTICS, online_peak
from tidal.agent.qos.capabilities import probe
from tidal.agent.qos.capabilities import to_status as capability_status
from tidal.kube import read_policy
from tidal.policy import ColocationPolicy
from tidal.predict.predictors import REALISABLE

log = logging.getLogger(__name__)


class Predictions:
    """The online-peak prediction the policy asks for: a window statistic, or a predictor of
    `tidal.predict` on the node's 5-minute history (recomputed once per closed step)."""

    def __init__(self, step_seconds: int = STEP_SECONDS) -> None:
        self.history = OnlineHistory(step_seconds=step_seconds)
        self._cached: tuple[tuple[str, int | None], float] | None = None

    def observe(self, sampler: Sampler, now_wall: float) -> None:
        online = []
        for usage in sampler.pod_usages():
            pod = usage.pod
            if pod.tidal_level not in (qos.QoSLevel.HLS, qos.QoSLevel.LS):
                continue
            # a pod without usage yet counts at its request, as everywhere in the agent
            millicores = usage.cpu_millicores if usage.cpu_millicores is not None else pod.cpu_request_millicores
            online.append((pod.uid, millicores / 1000, pod.cpu_request_millicores / 1000))
        self.history.observe(now_wall, online)

    def _history_peak_cores(self, name: str) -> float | None:
        key = (name, self.history.newest_closed)
        if self._cached and self._cached[0] == key:
            return self._cached[1]
        if not len(self.history):
            return None
        predictor = next(cls for cls in REALISABLE if cls.name == name)()
        peak = predictor.predict(self.history.node_history())
        self._cached = (key, peak)
        return peak

    def status(self, sampler: Sampler, policy: ColocationPolicy) -> dict | None:
        window = policy.overselling.window_seconds
        name = str(policy.overselling.predictor)
        cpu, memory = sampler.online_stats(window)
        if name in STATISTICS:
            peak = online_peak(cpu, memory, name, window)
            return None if peak is None else peak.to_status()
        cores = self._history_peak_cores(name)
        if cores is None or memory is None:
            return None  # no closed step yet: the master offers nothing until there is
        return {"predictor": name, "steps": len(self.history),
                "onlinePeak": {"cpuMillicores": round(cores * 1000), "memoryBytes": round(memory.max)}}


def report(sampler: Sampler, policy: ColocationPolicy, predictions: Predictions,
           capabilities: list[dict] | None = None) -> dict:
    """The NodeProfile status: the sampler's summary, the online-peak prediction and what this
    node's kernel and hardware support (each unsupported feature with its reason)."""
    status = sampler.summary()
    if capabilities is not None:
        status["capabilities"] = capabilities
    prediction = predictions.status(sampler, policy)
    if prediction is not None:
        status["predictions"] = prediction
    return status


async def run_node_agent(api, node: str, *, cgroup_root: Path = Path("/sys/fs/cgroup"),
                         proc_root: Path = Path("/proc"), report_interval: float = 10.0,
                         cgroup_driver: CgroupDriver | None = None, history_step_seconds: int = STEP_SECONDS,
                         stop: asyncio.Event | None = None) -> None:
    stop = stop or asyncio.Event()
    try:
        layout = detect_layout(cgroup_root, driver=cgroup_driver)
    except CgroupLayoutError as err:
        # No kubelet cgroups (yet): node usage still comes from /proc, and every pod counts
        # at its request until its cgroup appears — never less than it asked for.
        log.warning("%s: assuming the cgroupfs driver; pods count at their request", err)
        layout = detect_layout(cgroup_root, driver=CgroupDriver.CGROUPFS)
    window = ColocationPolicy.from_spec({}).overselling.window_seconds
    sampler = Sampler(layout, proc_root=proc_root, windows=sorted({60, window, 1800}))
    pods = NodePods(api, node)
    predictions = Predictions(history_step_seconds)
    # Probed once at start: kernels and hardware do not change under a running agent.
    capabilities = capability_status(probe(cgroup_root, proc_root, Path("/sys"), layout.kubelet_root))
    watcher = asyncio.create_task(pods.run())
    loop = asyncio.get_running_loop()
    last_report = None
    try:
        await asyncio.wait_for(pods.synced.wait(), timeout=60)
        while not stop.is_set():
            sampler.sample(pods.pods.values())
            predictions.observe(sampler, time.time())
            now = loop.time()
            if last_report is None or now - last_report >= report_interval:
                last_report = now
                try:
                    await write_status(api, node, report(sampler, await read_policy(api), predictions, capabilities))
                except Exception as err:  # the next report retries; stale data degrades to 0
                    log.warning("NodeProfile %s not written: %s", node, err)
            try:
                await asyncio.wait_for(stop.wait(), timeout=1.0)
            except asyncio.TimeoutError:
                pass
    finally:
        watcher.cancel()
