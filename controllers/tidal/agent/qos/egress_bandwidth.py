# SPDX-License-Identifier: Apache-2.0
"""Egress bandwidth of pods: BE pods share a cap, tighter while online pods send a lot; any pod
with a Tidal QoS level may also carry its own limit.

Node bandwidth ``B`` (:func:`node_bandwidth_mbps`): the node annotation
``colocation.tidal.io/node-egress-bandwidth-mbps``, else (deprecated, warned about once) the same
value under its old name ``colocation.tidal.io/egress-bandwidth-mbps`` on the Node, else Volcano's
node annotation ``volcano.sh/network-bandwidth-rate`` (Mbit/s, as Volcano's agent reads it), else
the policy's ``nodeBandwidthMbps``, else (0) the link speed of the node's default-route interface.
Online egress ``O`` is the rate at which online (HLS/LS) pods send: the receive counters of the
host side of their veths, sampled every round (pods on the host network are not seen). Then
(pure, :func:`be_cap_mbps`)::

    BE cap = offlineLowPercent (10) % of B   while O > onlineWatermarkPercent (80) % of B
             offlineHighPercent (40) % of B  otherwise

A pod's own limit is its annotation ``colocation.tidal.io/egress-bandwidth-mbps`` (Mbit/s;
:func:`tidal.api.qos.egress_bandwidth_limit_of`). Per pod (pure, :func:`pod_rates_mbps`):

* BE pods with a veth share the cap max-min fairly: a pod whose own limit is below an equal share
  takes its limit and leaves the rest to the others; none exceeds its own limit and the BE total
  never exceeds the cap. Without ``B`` (nothing says it) only their own limits apply.
* An online (HLS/LS) pod with the annotation is held to its own limit, whatever the watermarks
  (Volcano never shapes online pods: it has no per-pod limit at all; the annotation is an opt-in,
  like the CNI bandwidth plugin's ``kubernetes.io/egress-bandwidth``). Online pods without it are
  never shaped. Pods without a Tidal QoS level are left alone.
* An invalid annotation is reported once (naming the annotation and the allowed form) and counts
  as absent: an online pod stays unshaped; a BE pod still gets its share of the cap (the cap is
  the node's rule, not the pod's to escape).

How: the feature (:class:`EgressBandwidthFeature`, ``egress-bandwidth``) senses the node
bandwidth, the online egress and the veths of the pods to shape, and plans the rates; the
executor (:mod:`tidal.agent.executor.tc`) shapes on the host side of each such pod's veth
(ingress qdisc, u32/mirred redirect to an IFB device ``tfb<veth ifindex>`` with a TBF root
qdisc), the same on cgroup v1 and v2. Switched off, or the node leaving colocation: every
``tfb*`` device and the ingress qdisc on its veth are removed (the state is in the device names,
so a restarted agent or ``tidal-agent restore`` finds it). :class:`EgressActuator` drives the
feature alone.

Finding a pod's host veth: a process of the pod (first PID of a container cgroup) gives the
pod's network namespace; ``ip -o link`` inside it shows ``eth0@ifN``, ``N`` being the host-side
peer's ifindex.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

from tidal.agent.collector.cgroups import CgroupLayout
from tidal.agent.collector.sampler import ONLINE_LEVELS
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
from .pod_features import FeaturePodState
from .strategy import NodeState, PodState

log = logging.getLogger(__name__)

__all__ = [
    "EgressActuator", "EgressBandwidthFeature", "NodeBandwidth", "TcShaper", "be_cap_mbps", "be_rates_mbps",
    "node_bandwidth_mbps", "parse_link_peers", "pod_rates_mbps",
]

ONLINE = ONLINE_LEVELS  # the online QoS levels, as the sampler counts them


def be_cap_mbps(node_mbps: float, config: EgressBandwidth, online_mbps: float) -> float:
    if online_mbps > node_mbps * config.online_watermark_percent / 100:
        return node_mbps * config.offline_low_percent / 100
    return node_mbps * config.offline_high_percent / 100


def be_rates_mbps(cap_mbps: float | None, limits: Sequence[float | None]) -> list[float | None]:
    """Each BE pod's rate (Mbit/s; None: not shaped) from each one's own limit (None: none).

    With a cap, max-min fair: in the order of their own limits, each pod takes the smaller of its
    limit and an equal share of what is left, so the total never exceeds the cap. Without a cap
    (the node's bandwidth is unknown), a pod is held to its own limit only.
    """
    if cap_mbps is None:
        return list(limits)
    rates: list[float | None] = [None] * len(limits)
    order = sorted(range(len(limits)), key=lambda i: math.inf if limits[i] is None else limits[i])
    left = cap_mbps
    for done, i in enumerate(order):
        share = left / (len(order) - done)
        own = limits[i]
        rate = share if own is None else min(own, share)
        rates[i] = rate
        left -= rate
    return rates


def pod_rates_mbps(cap_mbps: float | None,
                   pods: Sequence[tuple[QoSLevel | None, float | None]]) -> list[float | None]:
    """Each pod's rate (Mbit/s; None: not shaped) from its (QoS level, own limit): BE pods by
    :func:`be_rates_mbps`, online pods their own limit, pods without a level none."""
    be = [i for i, (level, _) in enumerate(pods) if level is QoSLevel.BE]
    rates: list[float | None] = [own if level in ONLINE else None for level, own in pods]
    for i, rate in zip(be, be_rates_mbps(cap_mbps, [pods[i][1] for i in be])):
        rates[i] = rate
    return rates


class NodeBandwidth(NamedTuple):
    """The node's bandwidth (Mbit/s, None: unknown), an error to report and a warning to report."""

    mbps: float | None
    problem: str | None = None
    warning: str | None = None


def node_bandwidth_mbps(config: EgressBandwidth, annotations: Mapping[str, str],
                        link_speed_mbps: int | None) -> NodeBandwidth:
    """The node annotations (:func:`tidal.api.qos.node_egress_bandwidth_of`), else the policy,
    else the link speed. An invalid annotation is a problem and the next source is used."""
    fallback = config.node_bandwidth_mbps if config.node_bandwidth_mbps > 0 else (
        link_speed_mbps if link_speed_mbps and link_speed_mbps > 0 else None)
    try:
        found = qos.node_egress_bandwidth_of(annotations)
    except qos.EgressBandwidthAnnotationError as err:
        problem = f"node {err}"
        if fallback is None:
            return NodeBandwidth(None, problem)
        return NodeBandwidth(float(fallback), problem + f"; using {fallback} Mbit/s")
    if found is not None:
        mbps, key = found
        warning = None
        if key == qos.DEPRECATED_NODE_EGRESS_BANDWIDTH_ANNOTATION:
            warning = (f"node annotation {key} is deprecated as the node's bandwidth (on a pod it is "
                       f"the pod's own limit): rename it to {qos.NODE_EGRESS_BANDWIDTH_ANNOTATION}")
        return NodeBandwidth(mbps, None, warning)
    if fallback is not None:
        return NodeBandwidth(float(fallback))
    return NodeBandwidth(None, "egressBandwidth.nodeBandwidthMbps is 0 and the link speed of the default-route "
                               "interface is unknown: set the policy field or the node annotation "
                               + qos.NODE_EGRESS_BANDWIDTH_ANNOTATION)


def own_limit(pod: PodState) -> tuple[float | None, str]:
    """A pod's own egress limit (Mbit/s) and the problem of its annotation ("" when none)."""
    if isinstance(pod, FeaturePodState):
        return pod.egress_mbps, pod.egress_problem
    return None, ""


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
    node: NodeBandwidth
    online_mbps: float = 0.0
    #: pods that may be shaped, with their host veth: (pod, (veth name, ifindex))
    pods: tuple[tuple[PodState, tuple[str, int]], ...] = ()


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
        #: the problems and warnings reported last round (each is reported when it appears)
        self._notes: frozenset[str] = frozenset()
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
        node = node_bandwidth_mbps(config, ctx.annotations, link_speed_mbps())
        online = 0.0
        if node.mbps is not None:
            online = self.measure_online(ctx.now, state.layout, (p for p in state.pods if p.tidal_level in ONLINE))

        def may_be_shaped(pod: PodState) -> bool:
            own = own_limit(pod)[0]
            return (pod.is_be and (node.mbps is not None or own is not None)) or (
                pod.tidal_level in ONLINE and own is not None)
        pods = tuple((p, v) for p in state.pods if may_be_shaped(p) and (v := self.veth_of(state.layout, p)) is not None)
        return Sensed(node, online, pods)

    # -- plan --------------------------------------------------------------------------------

    def _notes_of(self, ctx: Context, node: NodeBandwidth) -> dict[str, int]:
        notes = {}
        if node.problem:
            notes[f"egress bandwidth: {node.problem}"] = logging.ERROR
        if node.warning:
            notes[f"egress bandwidth: {node.warning}"] = logging.WARNING
        for pod in ctx.state.pods:
            problem = own_limit(pod)[1]
            if problem and (pod.is_be or pod.tidal_level in ONLINE):
                outcome = "its share of the BE cap only" if pod.is_be else "not shaped"
                notes[f"egress bandwidth: pod {pod.namespace}/{pod.name}: {problem}; {outcome}"] = logging.WARNING
        return notes

    def plan(self, ctx: Context) -> Plan:
        seen: Sensed = ctx.observed[self.name]
        notes = self._notes_of(ctx, seen.node)
        decisions: tuple = tuple(Report(message, level, __name__) for message, level in notes.items()
                                 if message not in self._notes)
        self._notes = frozenset(notes)
        self._maybe_shaped = True
        self.online_mbps = seen.online_mbps
        self.cap_mbps = None if seen.node.mbps is None else be_cap_mbps(
            seen.node.mbps, ctx.policy.features.egress_bandwidth, self.online_mbps)
        rates = pod_rates_mbps(self.cap_mbps, [(pod.tidal_level, own_limit(pod)[0]) for pod, _ in seen.pods])
        shapes, reported = [], self._reported
        for (pod, (veth, ifindex)), rate in zip(seen.pods, rates):
            if rate is None:
                continue
            shape = TcShape(veth, ifindex, int(rate * 1e6))
            shapes.append(shape)
            if reported.get(ifindex) != shape.bits_per_second:
                decisions += (Report(self._describe(pod, rate), logging.INFO, __name__, written=(shape.key,)),)
        self._pending = tuple(shapes) if decisions else ()
        if not shapes and seen.node.mbps is None:
            return Plan((TcUnshapeAll(),), decisions)
        return Plan((TcShapeOnly(tuple(shapes)),), decisions)

    def _describe(self, pod: PodState, rate: float) -> str:
        own = own_limit(pod)[0]
        who = f"egress of {pod.tidal_level} pod {pod.namespace}/{pod.name} capped at {rate:.1f} Mbit/s"
        if not pod.is_be:
            return f"{who} (its own limit, {qos.EGRESS_BANDWIDTH_ANNOTATION})"
        if self.cap_mbps is None:
            return f"{who} (its own limit; the node's bandwidth is unknown)"
        mine = "" if own is None else f", its own limit {own:g} Mbit/s"
        return (f"{who} (BE cap {self.cap_mbps:.1f} Mbit/s{mine}; "
                f"online egress {self.online_mbps:.1f} Mbit/s)")

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
        self._notes = frozenset()
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
