"""The node agent's collection loop: sample every second, report to the node's own
NodeProfile every `report_interval` seconds with the policy's online-peak prediction."""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from tidal.agent.collector.cgroups import CgroupDriver, CgroupLayoutError, detect_layout
from tidal.agent.collector.sampler import Sampler
from tidal.agent.node_profile import write_status
from tidal.agent.pods import NodePods
from tidal.agent.prediction import online_peak
from tidal.kube import read_policy
from tidal.policy import ColocationPolicy

log = logging.getLogger(__name__)


def report(sampler: Sampler, policy: ColocationPolicy) -> dict:
    """The NodeProfile status: the sampler's summary plus the online-peak prediction."""
    status = sampler.summary()
    window = policy.overselling.window_seconds
    predictor = str(getattr(policy.overselling.predictor, "value", policy.overselling.predictor))
    cpu, memory = sampler.online_stats(window)
    peak = online_peak(cpu, memory, predictor, window)
    if peak is not None:
        status["predictions"] = peak.to_status()
    return status


async def run_node_agent(api, node: str, *, cgroup_root: Path = Path("/sys/fs/cgroup"),
                         proc_root: Path = Path("/proc"), report_interval: float = 10.0,
                         cgroup_driver: CgroupDriver | None = None,
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
    watcher = asyncio.create_task(pods.run())
    loop = asyncio.get_running_loop()
    last_report = None
    try:
        await asyncio.wait_for(pods.synced.wait(), timeout=60)
        while not stop.is_set():
            sampler.sample(pods.pods.values())
            now = loop.time()
            if last_report is None or now - last_report >= report_interval:
                last_report = now
                try:
                    await write_status(api, node, report(sampler, await read_policy(api)))
                except Exception as err:  # the next report retries; stale data degrades to 0
                    log.warning("NodeProfile %s not written: %s", node, err)
            try:
                await asyncio.wait_for(stop.wait(), timeout=1.0)
            except asyncio.TimeoutError:
                pass
    finally:
        watcher.cancel()
