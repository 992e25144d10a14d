"""Egress bandwidth of BE pods: the pure rules (table-driven), and for real on this machine with
network namespaces, veth pairs on a bridge, tc (ingress + IFB + TBF) and iperf3: online traffic
above the watermark pushes the BE pod's rate to about 10 % of the node bandwidth."""
from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import time

import pytest
from tidal.agent.collector.cgroups import PodQOSClass
from tidal.agent.qos.egress_bandwidth import (
    EgressActuator,
    be_cap_mbps,
    node_bandwidth_mbps,
    parse_link_indexes,
    parse_link_peers,
    per_pod_mbps,
)
from tidal.agent.qos.strategy import ContainerState, PodState
from tidal.api.policy import ColocationPolicy
from tidal.api.qos import QoSLevel
from tidal_dev.testing.local_kubelet import LocalKubelet


def config(**kw):
    return ColocationPolicy.from_spec({"features": {"egressBandwidth": {"enabled": True, **kw}}}).features.egress_bandwidth


@pytest.mark.parametrize("online, cap", [(0, 400), (799, 400), (800, 400), (801, 100), (1000, 100)])
def test_cap_follows_online_egress(online, cap):
    assert be_cap_mbps(1000, config(), online) == cap


def test_cap_with_custom_watermarks_and_split():
    assert be_cap_mbps(200, config(onlineWatermarkPercent=50, offlineLowPercent=5, offlineHighPercent=20), 101) == 10
    assert per_pod_mbps(100, 4) == 25 and per_pod_mbps(100, 0) == 0


@pytest.mark.parametrize("policy_mbps, annotations, link, expected", [
    (0, {}, 10000, (10000.0, None)),                                 # the NIC's speed
    (2000, {}, 10000, (2000.0, None)),                               # the policy
    (2000, {"colocation.tidal.io/egress-bandwidth-mbps": "500"}, 10000, (500.0, None)),  # the node
    (0, {}, None, (None, "egressBandwidth.nodeBandwidthMbps is 0 and the link speed")),
    (2000, {"colocation.tidal.io/egress-bandwidth-mbps": "fast"}, None,
     (2000.0, "node annotation colocation.tidal.io/egress-bandwidth-mbps='fast': must be a positive number")),
])
def test_node_bandwidth(policy_mbps, annotations, link, expected):
    value, problem = node_bandwidth_mbps(config(nodeBandwidthMbps=policy_mbps), annotations, link)
    assert value == expected[0]
    assert (problem is None) if expected[1] is None else problem.startswith(expected[1])


def test_parse_links():
    inside = ("1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN\\    link/loopback 00:00\n"
              "2: eth0@if17: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP\\    link/ether x\n")
    assert parse_link_peers(inside) == {"eth0": 17}
    host = "1: lo: <LOOPBACK> mtu 65536\n17: vethab12@if2: <BROADCAST> mtu 1500\n18: tfb17: <BROADCAST> mtu 1500\n"
    assert parse_link_indexes(host) == {1: "lo", 17: "vethab12", 18: "tfb17"}


# --- for real ---------------------------------------------------------------------------------

NODE_MBPS = 200


def sh(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=30).stdout


class Net:
    """A bridge with pod network namespaces on veths and a sink namespace running iperf3 servers."""

    def __init__(self) -> None:
        self.tag = secrets.token_hex(2)
        self.bridge = f"tbr{self.tag}"
        self.namespaces: list[str] = []
        self.links: list[str] = []
        self.procs: list[subprocess.Popen] = []
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "link", "set", self.bridge, "up")
        self.links.append(self.bridge)

    def netns(self, name: str, address: str) -> str:
        ns, host = f"t{name}{self.tag}", f"tv{name}{self.tag}"
        sh("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        sh("ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns)
        self.links.append(host)
        sh("ip", "link", "set", host, "master", self.bridge, "up")
        sh("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        return ns

    def start(self, ns: str, *args: str) -> subprocess.Popen:
        proc = subprocess.Popen(["ip", "netns", "exec", ns, *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        self.procs.append(proc)
        return proc

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for link in self.links:
            subprocess.run(["ip", "link", "del", link], capture_output=True)


def iperf_mbps(proc: subprocess.Popen) -> float:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6


@pytest.fixture
def net():
    for tool in ("iperf3", "tc", "ip", "nsenter"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed")
    network = Net()
    try:
        yield network
    finally:
        network.cleanup()


def test_online_traffic_pushes_be_egress_to_the_low_watermark(hierarchy, real, net):
    kubelet = LocalKubelet(real)
    be_ns, online_ns, sink = net.netns("be", "10.251.0.2"), net.netns("on", "10.251.0.3"), net.netns("sk", "10.251.0.9")
    for port in ("5201", "5202"):
        net.start(sink, "iperf3", "-s", "-B", "10.251.0.9", "-p", port)
    pods = []
    for name, ns, level, qos_class in (("be", be_ns, QoSLevel.BE, PodQOSClass.BEST_EFFORT),
                                       ("web", online_ns, QoSLevel.LS, PodQOSClass.BURSTABLE)):
        uid, cid = f"{secrets.token_hex(4)}-{name}", f"containerd://{secrets.token_hex(32)}"
        dirs = kubelet.create_pod(uid, qos_class, [cid])[cid]
        sandbox = net.start(ns, "sleep", "600")  # the pod's "pause": holds its network namespace
        time.sleep(0.2)
        pid = int(sh("ip", "netns", "pids", ns).split()[0])
        LocalKubelet.move(pid, dirs)
        assert sandbox.poll() is None
        pods.append(PodState(uid, qos_class, level, (ContainerState(cid),), "ns", name))
    actuator = EgressActuator(kubelet.layout)
    cfg = config(nodeBandwidthMbps=NODE_MBPS)
    time.sleep(0.5)  # iperf3 servers up

    def rounds(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            assert actuator.round(time.monotonic(), True, cfg, pods, {}) == []
            time.sleep(1.0)

    try:
        rounds(2)
        assert actuator.cap_mbps == NODE_MBPS * 0.4  # no online traffic: the high watermark
        quiet = net.start(be_ns, "iperf3", "-c", "10.251.0.9", "-p", "5201", "-t", "3", "-J")
        rounds(3.5)
        be_alone = iperf_mbps(quiet)
        # online traffic at 90 % of the node bandwidth, above the 80 % watermark
        online = net.start(online_ns, "iperf3", "-c", "10.251.0.9", "-p", "5202", "-t", "10", "-b",
                           f"{NODE_MBPS * 0.9:.0f}M", "-J")
        rounds(3)
        assert actuator.cap_mbps == NODE_MBPS * 0.1, actuator.online_mbps
        squeezed = net.start(be_ns, "iperf3", "-c", "10.251.0.9", "-p", "5201", "-t", "3", "-J")
        rounds(3.5)
        be_squeezed = iperf_mbps(squeezed)
        online_rate = iperf_mbps(online)
    finally:
        assert actuator.round(time.monotonic(), False, cfg, pods, {}) == []  # switched off: undone
    print(f"\nBE alone {be_alone:.1f} Mbit/s (cap {NODE_MBPS * 0.4:.0f}), with online traffic "
          f"{be_squeezed:.1f} Mbit/s (cap {NODE_MBPS * 0.1:.0f}); online {online_rate:.1f} Mbit/s")
    assert NODE_MBPS * 0.4 * 0.6 <= be_alone <= NODE_MBPS * 0.4 * 1.15
    assert NODE_MBPS * 0.1 * 0.6 <= be_squeezed <= NODE_MBPS * 0.1 * 1.3
    assert not [d for d in sh("ip", "-o", "link", "show").splitlines() if ": tfb" in d]


class FakeShaper:
    """Records what the actuator asks of tc (the real one is tested above)."""

    def __init__(self, veths):
        self.veths, self.devices, self.calls = veths, {}, []

    def host_veth(self, pid):
        return self.veths.get(pid)

    def shape(self, veth, ifindex, bps):
        self.calls.append(("shape", veth, bps))
        self.devices[ifindex] = f"tfb{ifindex}"

    def shaped(self):
        self.calls.append(("list",))
        return dict(self.devices)

    def unshape(self, ifindex):
        self.calls.append(("unshape", ifindex))
        self.devices.pop(ifindex)


def test_egress_round_shapes_be_pods_shares_the_cap_and_undoes_once_off(tmp_path, monkeypatch):
    from tidal.agent.collector.cgroups import CgroupDriver, CgroupHierarchy, CgroupLayout, CgroupVersion
    from tidal.agent.qos import egress_bandwidth
    layout = CgroupLayout(CgroupHierarchy(CgroupVersion.V2, tmp_path, tmp_path), CgroupDriver.CGROUPFS)
    pods = []
    for n, level in ((1, QoSLevel.BE), (2, QoSLevel.BE), (3, QoSLevel.LS)):
        pod = PodState(f"{n}{n}{n}{n}-0000", PodQOSClass.BEST_EFFORT if level is QoSLevel.BE else PodQOSClass.BURSTABLE,
                       level, (ContainerState(f"containerd://c{n}"),), "ns", f"p{n}")
        d = layout.cpu_dir(layout.container_relpath(pod.uid, pod.qos_class, pod.containers[0].id))
        d.mkdir(parents=True)
        (d / "cgroup.procs").write_text(f"{100 + n}\n")
        pods.append(pod)
    shaper = FakeShaper({101: ("veth1", 11), 102: ("veth2", 12), 103: ("veth3", 13)})
    monkeypatch.setattr(egress_bandwidth.Path, "exists", lambda self: False)  # no /sys/class/net here
    actuator = EgressActuator(layout, shaper)
    policy = ColocationPolicy.from_spec({"features": {"egressBandwidth": {"enabled": True, "nodeBandwidthMbps": 1000}}})

    def egress_round():  # one agent round of the feature (capability tc, no node annotations)
        assert actuator.round(0.0, True, policy.features.egress_bandwidth, pods, {}, {"tc": True}) == []
    egress_round()
    # no online traffic measured: 40 % of 1000 Mbit/s, shared by the two BE pods; the LS pod is not shaped
    assert [c for c in shaper.calls if c[0] == "shape"] == [("shape", "veth1", 200_000_000), ("shape", "veth2", 200_000_000)]
    shaper.calls.clear()
    egress_round()
    assert [c for c in shaper.calls if c[0] == "shape"] == []  # unchanged rate: no tc call
    policy = ColocationPolicy()  # switched off (the default)
    egress_round()
    assert sorted(c for c in shaper.calls if c[0] == "unshape") == [("unshape", 11), ("unshape", 12)]
    shaper.calls.clear()
    egress_round()
    assert shaper.calls == []  # off and nothing left: no I/O at all
