# SPDX-License-Identifier: Apache-2.0
"""Egress bandwidth of BE pods, tighter while online pods send a lot.

Node bandwidth ``B``: the node annotation ``colocation.tidal.io/egress-bandwidth-mbps``, else the
policy's ``nodeBandwidthMbps``, else (0) the link speed of the node's default-route interface.
Online egress ``O`` is the rate at which online (HLS/LS) pods send: the receive counters of the
host side of their veths, sampled every round (pods on the host network are not seen). Then
(pure, :func:`be_cap_mbps`)::

    BE cap = offlineLowPercent (10) % of B   while O > onlineWatermarkPercent (80) % of B
             offlineHighPercent (40) % of B  otherwise

shared equally by the BE pods that have a veth (so the BE total never exceeds the cap).

How: the feature (:class:`EgressBandwidthFeature`, ``egress-bandwidth``) senses the node
bandwidth, the online egress and the BE pods' veths, and plans the rates; the executor
(:mod:`tidal.agent.executor.tc`) shapes on the host side of each BE pod's veth (ingress qdisc,
u32/mirred redirect to an IFB device ``tfb<veth ifindex>`` with a TBF root qdisc), the same on
cgroup v1 and v2. Switched off, or the node leaving colocation: every ``tfb*`` device and the
ingress qdisc on its veth are removed (the state is in the device names, so a restarted agent or
``tidal-agent restore`` finds it). :class:`EgressActuator` drives the feature alone.

Finding a pod's host veth: a process of the pod (first PID of a container cgroup) gives the
pod's network namespace; ``ip -o link`` inside it shows ``eth0@ifN``, ``N`` being the host-side
peer's ifindex.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from tidal.agent.collector.cgroups import CgroupLayout
from tidal.api import qos
from tidal.agent.executor import Outcome
from tidal.agent.executor.tc import (  # noqa: F401  (re-exported)
    IFB_PREFIX,
    TcExecutor,
    TcShape,
    TcShaper,
    TcShapeOnly,
    TcUnshapeAll,
    parse_link_indexes,
    parse_link_peers,
)
from tidal.api.policy import ColocationPolicy, EgressBandwidth
from tidal.api.qos import QoSLevel

from .feature import DEFAULT_OPTIONS, EMPTY, Context, Options, Plan, Report, run_alone
from .strategy import NodeState, PodState

log = logging.getLogger(__name__)

__all__ = [
    "BANDWIDTH_ANNOTATION", "EgressActuator", "EgressBandwidthFeature", "TcShaper", "be_cap_mbps", "node_bandwidth_mbps",
    "parse_link_peers", "per_pod_mbps",
]

BANDWIDTH_ANNOTATION = qos.EGRESS_BANDWIDTH_ANNOTATION
ONLINE = (QoSLevel.HLS, QoSLevel.LS)


def be_cap_mbps(node_mbps: float, config: EgressBandwidth, online_mbps: float) -> float:
    if online_mbps > node_mbps * config.online_watermark_percent / 100:
        return node_mbps * config.offline_low_percent / 100
    return node_mbps * config.offline_high_percent / 100


def per_pod_mbps(cap_mbps: float, pods: int) -> float:
    return cap_mbps / pods if pods else 0.0


def node_bandwidth_mbps(config: EgressBandwidth, annotations: Mapping[str, str],
                        link_speed_mbps: int | None) -> tuple[float | None, str | None]:
    """(bandwidth, problem): the annotation, else the policy, else the link speed."""
    raw = annotations.get(BANDWIDTH_ANNOTATION)
    if raw is not None:
        try:
            value = float(raw)
            if value > 0:
                return value, None
        except ValueError:
            pass
        problem = f"node annotation {BANDWIDTH_ANNOTATION}={raw!r}: must be a positive number of Mbit/s"
        if config.node_bandwidth_mbps <= 0 and not link_speed_mbps:
            return None, problem
        fallback = config.node_bandwidth_mbps or link_speed_mbps
        return float(fallback), problem + f"; using {fallback} Mbit/s"
    if config.node_bandwidth_mbps > 0:
        return float(config.node_bandwidth_mbps), None
    if link_speed_mbps and link_speed_mbps > 0:
        return float(link_speed_mbps), None
    return None, ("egressBandwidth.nodeBandwidthMbps is 0 and the link speed of the default-route "
                  "interface is unknown: set the policy field or the node annotation " + BANDWIDTH_ANNOTATION)


def link_speed_mbps(sys_net: Path = Path("/sys/class/net"), route: Path = Path("/proc/net/route")) -> int | None:
    try:
        for line in route.read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) > 2 and fields[1] == "00000000":
                speed = int((sys_net / fields[0] / "speed").read_text())
                return speed if speed > 0 else None
    except (OSError, ValueError):
        return None
    return None


@dataclass(frozen=True)
class Sensed:
    node_mbps: float | None
    problem: str | None
    online_mbps: float = 0.0
    #: BE pods with a host veth: (pod, (veth name, ifindex))
    be: tuple[tuple[PodState, tuple[str, int]], ...] = ()


class EgressBandwidthFeature:
    """``features.egressBandwidth`` where tc is offered (capability ``tc``)."""

    name = "egress-bandwidth"

    def __init__(self, options: Options = DEFAULT_OPTIONS, net: TcShaper | None = None) -> None:
        self.net = net or TcShaper()  # reads only: a pod's host veth
        #: pod uid -> (veth name, ifindex), resolved once per pod (re-resolved when the veth goes)
        self.veths: dict[str, tuple[str, int]] = {}
        self._rx: dict[str, tuple[float, int]] = {}
        self.online_mbps = 0.0
        self.cap_mbps: float | None = None
        self._problem: str | None = None
        #: devices may be shaped (by this run, or left by a previous one): undo has work to do
        self._maybe_shaped = True
        #: veth ifindex -> the rate last reported (a report is prepared only for a new rate)
        self._reported: dict[int, int] = {}
        self._pending: tuple[TcShape, ...] = ()

    def enabled(self, ctx: Context) -> bool:
        return ctx.policy.features.egress_bandwidth.enabled and ctx.capabilities.get("tc", False)

    # -- reads -------------------------------------------------------------------------------

    def _pid(self, layout, pod: PodState) -> int | None:
        for c in pod.containers:
            d = layout.cpu_dir(layout.container_relpath(pod.uid, pod.qos_class, c.id))
            try:
                pids = (d / "cgroup.procs").read_text().split()
            except OSError:
                continue
            if pids:
                return int(pids[0])
        return None

    def veth_of(self, layout, pod: PodState) -> tuple[str, int] | None:
        known = self.veths.get(pod.uid)
        if known is not None and Path(f"/sys/class/net/{known[0]}").exists():
            return known
        pid = self._pid(layout, pod)
        found = None if pid is None else self.net.host_veth(pid)
        if found is None:
            self.veths.pop(pod.uid, None)
        else:
            self.veths[pod.uid] = found
        return found

    def measure_online(self, now: float, layout, pods: Iterable[PodState]) -> float:
        total = 0.0
        seen = set()
        for pod in pods:
            veth = self.veth_of(layout, pod)
            if veth is None:
                continue
            try:
                rx = int(Path(f"/sys/class/net/{veth[0]}/statistics/rx_bytes").read_text())
            except (OSError, ValueError):
                continue
            seen.add(pod.uid)
            last = self._rx.get(pod.uid)
            self._rx[pod.uid] = (now, rx)
            if last is not None and now > last[0] and rx >= last[1]:
                total += (rx - last[1]) * 8 / (now - last[0]) / 1e6
        self._rx = {uid: v for uid, v in self._rx.items() if uid in seen}
        return total

    def sense(self, ctx: Context) -> Sensed:
        config, state = ctx.policy.features.egress_bandwidth, ctx.state
        node_mbps, problem = node_bandwidth_mbps(config, ctx.annotations, link_speed_mbps())
        if node_mbps is None:
            return Sensed(None, problem)
        online = self.measure_online(ctx.now, state.layout, (p for p in state.pods if p.tidal_level in ONLINE))
        be = tuple((p, v) for p in state.pods if p.is_be and (v := self.veth_of(state.layout, p)) is not None)
        return Sensed(node_mbps, problem, online, be)

    # -- plan --------------------------------------------------------------------------------

    def plan(self, ctx: Context) -> Plan:
        seen: Sensed = ctx.observed[self.name]
        decisions: tuple = ()
        if seen.problem != self._problem:
            self._problem = seen.problem
            if seen.problem:
                decisions = (Report(f"egress bandwidth: {seen.problem}", logging.ERROR, __name__),)
        self._maybe_shaped = True
        if seen.node_mbps is None:
            return Plan((TcUnshapeAll(),), decisions)
        self.online_mbps = seen.online_mbps
        self.cap_mbps = be_cap_mbps(seen.node_mbps, ctx.policy.features.egress_bandwidth, self.online_mbps)
        rate = int(per_pod_mbps(self.cap_mbps, len(seen.be)) * 1e6)
        shapes = tuple(TcShape(veth, ifindex, rate) for _, (veth, ifindex) in seen.be)
        reported = self._reported
        decisions += tuple(
            Report(f"egress of BE pod {pod.namespace}/{pod.name} capped at {rate / 1e6:.1f} Mbit/s "
                   f"(online egress {self.online_mbps:.1f} Mbit/s)", logging.INFO, __name__, written=(shape.key,))
            for (pod, _), shape in zip(seen.be, shapes) if reported.get(shape.ifindex) != rate)
        self._pending = shapes if decisions else ()
        return Plan((TcShapeOnly(shapes),), decisions)

    def settle(self, ctx: Context, outcome) -> None:
        if self._pending:
            for shape in self._pending:
                if shape.key in outcome.done:
                    self._reported[shape.ifindex] = shape.bits_per_second
            self._pending = ()
        if len(self._reported) > len(self.veths):  # veths gone
            live = {ifindex for _, ifindex in self.veths.values()}
            self._reported = {i: r for i, r in self._reported.items() if i in live}

    def undo(self, ctx: Context) -> Plan:
        """Off: undo what this run shaped, and once at start what a previous run may have left;
        no I/O at all otherwise (nor where tc is not offered)."""
        if ctx.state is not None and not ctx.capabilities.get("tc", False):
            return EMPTY
        self._rx.clear()
        self._reported.clear()
        self.cap_mbps = None
        if not self._maybe_shaped:
            return EMPTY
        self._maybe_shaped = False
        return Plan((TcUnshapeAll(),))


class EgressActuator:
    """The feature alone with its own tc executor: ``round`` is one agent round (tests, tools)."""

    def __init__(self, layout: CgroupLayout | None, shaper: TcShaper | None = None) -> None:
        self.layout = layout
        shaper = shaper or TcShaper()
        self.feature = EgressBandwidthFeature(net=shaper)
        self.executor = TcExecutor(shaper)

    @property
    def cap_mbps(self) -> float | None:
        return self.feature.cap_mbps

    @property
    def online_mbps(self) -> float:
        return self.feature.online_mbps

    @property
    def applied(self) -> dict[int, int]:
        return self.executor.applied

    def round(self, now: float, enabled: bool, config: EgressBandwidth, pods: Iterable[PodState],
              annotations: Mapping[str, str], capabilities: Mapping[str, bool] | None = None) -> list[str]:
        policy = ColocationPolicy()
        policy = replace(policy, features=replace(policy.features, egress_bandwidth=config))
        state = NodeState(tuple(pods), 1.0, 0, policy, {"tc": True} if capabilities is None else capabilities,
                          self.layout)
        plan = run_alone(self.feature, Context(state, enabled, now, annotations=annotations))
        outcome, problems = Outcome(), []
        self.executor.execute(plan.writes, outcome.done, problems)
        for report in plan.decisions:
            if not report.written or outcome.written(report.written):
                logging.getLogger(report.logger).log(report.level, "%s", report.message)
        self.feature.settle(Context(state, enabled, now), outcome)
        return [f"{where}: {problem}" if where != "tc" else problem for where, problem in problems]
