"""The replay source: drives the agent's pipeline from a trace instead of the kernel, so the
lab's kwok nodes carry realistic online usage. One process acts for many fake nodes.

Trace: the generic long CSV ``timestamp,series_id,usage,request`` (seconds, id, cores,
cores), e.g. the Azure 2019 VMs converted by ``tidal predict convert-azure``. Every node
replays all series of the trace as its online pods — the traces' benchmark treats them as
one node — starting at its own offset, so nodes differ. Trace time advances `speed`
seconds per real second. The trace has no memory: online memory is modelled as
`memory_bytes_per_core` × cores used (stated in the profile as `model: replay`).
"""
from __future__ import annotations

import asyncio
import bisect
import csv
import datetime
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from tidal.agent.collector.histogram import WindowAggregate
from tidal.agent.node_profile import write_status
from tidal.agent.prediction import online_peak

log = logging.getLogger(__name__)
WINDOWS = (60, 300, 1800)


class TraceError(ValueError):
    """The trace file is not in the long CSV format; the message names the line and column."""


@dataclass
class NodeTrace:
    """Online usage of one node over trace time: sorted step times and total cores per step."""

    times: list[float]
    cores: list[float]

    def at(self, t: float) -> float:
        """Usage at trace time `t`, wrapping around the end of the trace."""
        if not self.times:
            return 0.0
        span = self.times[-1] - self.times[0] + (self.times[1] - self.times[0] if len(self.times) > 1 else 1)
        t = self.times[0] + (t - self.times[0]) % span
        return self.cores[max(0, bisect.bisect_right(self.times, t) - 1)]


def read_long_csv(path: Path) -> NodeTrace:
    """Sum every series per timestamp: the node's total online usage per step."""
    totals: dict[float, float] = {}
    with open(path, newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header != ["timestamp", "series_id", "usage", "request"]:
            raise TraceError(f"{path}:1: header must be timestamp,series_id,usage,request (got {header})")
        for number, row in enumerate(reader, start=2):
            if len(row) != 4:
                raise TraceError(f"{path}:{number}: expected 4 columns, got {len(row)}")
            try:
                t, usage = float(row[0]), float(row[2])
            except ValueError as err:
                raise TraceError(f"{path}:{number}: timestamp and usage must be numbers ({err})") from None
            totals[t] = totals.get(t, 0.0) + max(0.0, usage)
    if not totals:
        raise TraceError(f"{path}: no samples")
    times = sorted(totals)
    return NodeTrace(times, [totals[t] for t in times])


@dataclass
class ReplayedNode:
    name: str
    offset: float
    cpu: WindowAggregate = field(default_factory=lambda: WindowAggregate(WINDOWS))
    memory: WindowAggregate = field(default_factory=lambda: WindowAggregate(WINDOWS))


def replay_status(node: ReplayedNode, now_wall: float, predictor: str, window: int,
                  observed_at: datetime.datetime) -> dict:
    """The NodeProfile status for one replayed node (pure)."""
    usage = []
    for w in WINDOWS:
        cpu, mem = node.cpu.stats(w, now_wall), node.memory.stats(w, now_wall)
        entry = {"windowSeconds": w, "samples": cpu.samples if cpu else 0}
        if cpu and mem:
            entry["cpuMillicores"] = {k: max(0, round(getattr(cpu, k))) for k in ("avg", "p50", "p90", "p95", "p99", "max")}
            entry["memoryBytes"] = {k: max(0, round(getattr(mem, k))) for k in ("avg", "p50", "p90", "p95", "p99", "max")}
        usage.append(entry)
    status = {"observedAt": observed_at.strftime("%Y-%m-%dT%H:%M:%SZ"), "usage": usage}
    peak = online_peak(node.cpu.stats(window, now_wall), node.memory.stats(window, now_wall), predictor, window)
    if peak is not None:
        status["predictions"] = {**peak.to_status(), "model": "replay"}
    return status


async def run_replay(api, trace: NodeTrace, nodes: list[str], *, speed: float = 300.0,
                     report_interval: float = 5.0, predictor: str = "p95", window: int = 300,
                     memory_bytes_per_core: int = 4 * 1024**3, stop: asyncio.Event | None = None) -> None:
    stop = stop or asyncio.Event()
    span = trace.times[-1] - trace.times[0] if len(trace.times) > 1 else 1.0
    replayed = [ReplayedNode(name, offset=(i * span / max(1, len(nodes))) % span) for i, name in enumerate(nodes)]
    start_wall = time.monotonic()
    last_report = -report_interval
    while not stop.is_set():
        now = time.monotonic()
        trace_time = trace.times[0] + (now - start_wall) * speed
        for node in replayed:
            cores = trace.at(trace_time + node.offset)
            node.cpu.add(cores * 1000, now)
            node.memory.add(cores * memory_bytes_per_core, now)
        if now - last_report >= report_interval:
            last_report = now
            observed = datetime.datetime.now(datetime.timezone.utc)
            results = await asyncio.gather(*(write_status(api, n.name, replay_status(n, now, predictor, window, observed))
                                             for n in replayed), return_exceptions=True)
            for node, result in zip(replayed, results):
                if isinstance(result, Exception):
                    log.warning("NodeProfile %s not written: %s", node.name, result)
        try:
            await asyncio.wait_for(stop.wait(), timeout=1.0)
        except asyncio.TimeoutError:
            pass
