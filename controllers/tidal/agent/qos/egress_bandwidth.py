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

How (:class:`TcShaper`, on the host side of each BE pod's veth, the same on cgroup v1 and v2,
needing neither net_cls nor the pod's cooperation): traffic the pod sends arrives on the host
veth's *ingress*; an ``ingress`` qdisc there redirects it (u32 match-all, ``mirred``) to an IFB
device ``tfb<veth ifindex>`` whose root TBF qdisc holds it to the rate — the way the CNI
bandwidth plugin shapes pod egress. Switched off, or the node leaving colocation: every ``tfb*``
device and the ingress qdisc on its veth are removed (the state is in the device names, so a
restarted agent or ``tidal-agent restore`` finds it).

Finding a pod's host veth: a process of the pod (first PID of a container cgroup) gives the
pod's network namespace; ``ip -o link`` inside it shows ``eth0@ifN``, ``N`` being the host-side
peer's ifindex.
"""
from __future__ import annotations

import logging
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tidal.agent.collector.cgroups import CgroupLayout
from tidal.api.policy import EgressBandwidth
from tidal.api import qos
from tidal.api.qos import QoSLevel

from .strategy import PodState

log = logging.getLogger(__name__)

__all__ = [
    "BANDWIDTH_ANNOTATION", "EgressActuator", "TcShaper", "be_cap_mbps", "node_bandwidth_mbps",
    "parse_link_peers", "per_pod_mbps",
]

BANDWIDTH_ANNOTATION = qos.EGRESS_BANDWIDTH_ANNOTATION
IFB_PREFIX = "tfb"
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


_LINK = re.compile(r"^\d+:\s+([^:@\s]+)(?:@if(\d+))?:")


def parse_link_peers(text: str) -> dict[str, int]:
    """``ip -o link`` inside a pod: interface -> host-side peer ifindex (veths only)."""
    out = {}
    for line in text.splitlines():
        m = _LINK.match(line)
        if m and m[2] and m[1] != "lo":
            out[m[1]] = int(m[2])
    return out


def parse_link_indexes(text: str) -> dict[int, str]:
    """``ip -o link`` on the host: ifindex -> name (``veth1@if2`` -> ``veth1``)."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(\d+):\s+([^:@\s]+)", line)
        if m:
            out[int(m[1])] = m[2]
    return out


def _run(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


@dataclass
class TcShaper:
    """tc and ip on the host (the I/O of this feature)."""

    def rate_of(self, ifb: str) -> int | None:
        """The TBF rate on an IFB device (bits/s), None when it has none."""
        try:
            text = _run("tc", "-j", "qdisc", "show", "dev", ifb)
        except RuntimeError:
            return None
        import json
        for q in json.loads(text or "[]"):
            if q.get("kind") == "tbf":
                return int((q.get("options") or {}).get("rate", 0)) * 8 or None
        return None

    def shape(self, veth: str, ifindex: int, bits_per_second: int) -> None:
        ifb = f"{IFB_PREFIX}{ifindex}"
        if not Path(f"/sys/class/net/{ifb}").exists():
            _run("ip", "link", "add", ifb, "type", "ifb")
        _run("ip", "link", "set", ifb, "up")
        burst = max(32 * 1024, bits_per_second // 8 // 50)  # 20 ms at the rate, at least 32 KiB
        _run("tc", "qdisc", "replace", "dev", ifb, "root", "tbf", "rate", f"{bits_per_second}bit",
             "burst", str(burst), "latency", "100ms")
        qdiscs = _run("tc", "qdisc", "show", "dev", veth)
        if "ingress ffff:" not in qdiscs:
            _run("tc", "qdisc", "add", "dev", veth, "handle", "ffff:", "ingress")
        filters = _run("tc", "filter", "show", "dev", veth, "parent", "ffff:")
        if f"Egress Redirect to device {ifb}" not in filters:
            _run("tc", "filter", "replace", "dev", veth, "parent", "ffff:", "protocol", "all", "prio", "1",
                 "u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", ifb)

    def shaped(self) -> dict[int, str]:
        """veth ifindex -> IFB device, for every ``tfb<N>`` device on the host."""
        out = {}
        for dev in Path("/sys/class/net").iterdir():
            if dev.name.startswith(IFB_PREFIX) and dev.name[len(IFB_PREFIX):].isdigit():
                out[int(dev.name[len(IFB_PREFIX):])] = dev.name
        return out

    def unshape(self, ifindex: int) -> None:
        names = parse_link_indexes(_run("ip", "-o", "link", "show"))
        veth = names.get(ifindex)
        if veth is not None:
            subprocess.run(["tc", "qdisc", "del", "dev", veth, "handle", "ffff:", "ingress"],
                           capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "del", f"{IFB_PREFIX}{ifindex}"], capture_output=True, timeout=10)

    def host_veth(self, pid: int) -> tuple[str, int] | None:
        """(host-side veth name, its ifindex) of the network namespace of ``pid``."""
        try:
            peers = parse_link_peers(_run("nsenter", f"--net=/proc/{pid}/ns/net", "ip", "-o", "link", "show"))
        except (RuntimeError, OSError):
            return None
        if not peers:
            return None
        ifindex = peers.get("eth0") or sorted(peers.values())[0]
        name = parse_link_indexes(_run("ip", "-o", "link", "show")).get(ifindex)
        return None if name is None else (name, ifindex)


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


@dataclass
class EgressActuator:
    layout: CgroupLayout
    shaper: TcShaper = field(default_factory=TcShaper)
    #: pod uid -> (veth name, ifindex), resolved once per pod (re-resolved when the veth goes)
    veths: dict[str, tuple[str, int]] = field(default_factory=dict)
    _rx: dict[str, tuple[float, int]] = field(default_factory=dict)
    applied: dict[int, int] = field(default_factory=dict)  # veth ifindex -> bits/s
    online_mbps: float = 0.0
    cap_mbps: float | None = None
    leftovers_checked: bool = False
    _problem: str | None = None

    def _pid(self, pod: PodState) -> int | None:
        for c in pod.containers:
            d = self.layout.cpu_dir(self.layout.container_relpath(pod.uid, pod.qos_class, c.id))
            try:
                pids = (d / "cgroup.procs").read_text().split()
            except OSError:
                continue
            if pids:
                return int(pids[0])
        return None

    def veth_of(self, pod: PodState) -> tuple[str, int] | None:
        known = self.veths.get(pod.uid)
        if known is not None and Path(f"/sys/class/net/{known[0]}").exists():
            return known
        pid = self._pid(pod)
        found = None if pid is None else self.shaper.host_veth(pid)
        if found is None:
            self.veths.pop(pod.uid, None)
        else:
            self.veths[pod.uid] = found
        return found

    def measure_online(self, now: float, pods: Sequence[PodState]) -> float:
        total = 0.0
        seen = set()
        for pod in pods:
            veth = self.veth_of(pod)
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

    def round(self, now: float, enabled: bool, config: EgressBandwidth, pods: Iterable[PodState],
              annotations: Mapping[str, str]) -> list[str]:
        if not (enabled and config.enabled):
            return self.undo()
        pods = list(pods)
        node_mbps, problem = node_bandwidth_mbps(config, annotations, link_speed_mbps())
        if problem != self._problem:
            self._problem = problem
            if problem:
                log.error("egress bandwidth: %s", problem)
        if node_mbps is None:
            return self.undo()
        self.online_mbps = self.measure_online(now, [p for p in pods if p.tidal_level in ONLINE])
        self.cap_mbps = be_cap_mbps(node_mbps, config, self.online_mbps)
        be = [(p, v) for p in pods if p.is_be and (v := self.veth_of(p)) is not None]
        rate = int(per_pod_mbps(self.cap_mbps, len(be)) * 1e6)
        problems = []
        wanted = set()
        for pod, (veth, ifindex) in be:
            wanted.add(ifindex)
            if self.applied.get(ifindex) == rate:
                continue
            try:
                self.shaper.shape(veth, ifindex, max(rate, 8000))
                self.applied[ifindex] = rate
                log.info("egress of BE pod %s/%s capped at %.1f Mbit/s (online egress %.1f Mbit/s)",
                         pod.namespace, pod.name, rate / 1e6, self.online_mbps)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as err:
                problems.append(f"{veth}: {err}")
        for ifindex in set(self.shaper.shaped()) - wanted:
            self.shaper.unshape(ifindex)
            self.applied.pop(ifindex, None)
        return problems

    def undo(self) -> list[str]:
        problems = []
        for ifindex in self.shaper.shaped():
            try:
                self.shaper.unshape(ifindex)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as err:
                problems.append(str(err))
        self.applied.clear()
        self._rx.clear()
        self.cap_mbps = None
        return problems


def egress_round(node_qos, enabled: bool) -> None:
    """One round for :class:`~.node_qos.NodeQoS`; no I/O while the feature is off, except once to
    remove ``tfb*`` devices a previous run left."""
    config = node_qos.policy.features.egress_bandwidth
    on = enabled and config.enabled and node_qos.capabilities.get("tc", False)
    if not on:
        # off: undo what this run shaped, and once at start what a previous run may have left
        if not node_qos.capabilities.get("tc", False) or (node_qos.egress.leftovers_checked
                                                          and not node_qos.egress.applied):
            return
        node_qos.egress.leftovers_checked = True
    for problem in node_qos.egress.round(node_qos.clock(), on, config, node_qos._states.values(),
                                         node_qos._annotations):
        log.warning("egress bandwidth: %s", problem)
