"""Egress bandwidth of pods: the pure rules (table-driven: the BE cap, the per-pod rates with
pods' own limits, the node's bandwidth and its annotations), feature rounds with a fake tc, and
for real on this machine with network namespaces, veth pairs on a bridge, tc (ingress + IFB +
TBF) and iperf3: online traffic above the watermark pushes the BE pod's rate to about 10 % of the
node bandwidth."""
from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from tidal.agent.collector.cgroups import PodQOSClass
from tidal.agent.qos.egress_bandwidth import (
    EgressActuator,
    be_cap_mbps,
    be_rates_mbps,
    node_bandwidth_mbps,
    parse_link_indexes,
    parse_link_peers,
    pod_rates_mbps,
)
from tidal.agent.qos.pod_features import FeaturePodState
from tidal.agent.qos.strategy import ContainerState, PodState
from tidal.api.policy import ColocationPolicy
from tidal.api.qos import QoSLevel
from tidal_dev.lab.pytest_plugin import wait_for
from tidal_dev.testing.local_kubelet import LocalKubelet


def config(**kw):
    return ColocationPolicy.from_spec({"features": {"egressBandwidth": {"enabled": True, **kw}}}).features.egress_bandwidth


@pytest.mark.parametrize("online, cap", [(0, 400), (799, 400), (800, 400), (801, 100), (1000, 100)])
def test_cap_follows_online_egress(online, cap):
    assert be_cap_mbps(1000, config(), online) == cap


def test_cap_with_custom_watermarks():
    assert be_cap_mbps(200, config(onlineWatermarkPercent=50, offlineLowPercent=5, offlineHighPercent=20), 101) == 10


@pytest.mark.parametrize("cap, limits, rates", [
    (100, [], []),
    (100, [None, None, None, None], [25, 25, 25, 25]),             # an equal share each
    (100, [10, None, None], [10, 45, 45]),                          # a small own limit leaves the rest
    (100, [None, 60, None], [100 / 3, 100 / 3, 100 / 3]),           # a limit above the share: the share
    (100, [10, 20, 500], [10, 20, 70]),
    (100, [5, 5], [5, 5]),                                          # under the cap: the limits alone
    (None, [None, 30], [None, 30]),                                 # no cap: own limits only
])
def test_be_rates_share_the_cap_max_min_fairly(cap, limits, rates):
    got = be_rates_mbps(cap, limits)
    assert got == pytest.approx(rates)
    if cap is not None:
        assert sum(got) <= cap + 1e-9
    assert all(r is None or own is None or r <= own for r, own in zip(got, limits))


BE, LS, HLS = QoSLevel.BE, QoSLevel.LS, QoSLevel.HLS


@pytest.mark.parametrize("cap, pods, rates", [
    # online pods: their own limit whatever the cap; without one, not shaped
    (100, [(LS, None), (HLS, 300), (LS, 50)], [None, 300, 50]),
    (None, [(LS, 50)], [50]),
    # BE pods share the cap around online pods
    (100, [(BE, None), (LS, 500), (BE, 20)], [80, 500, 20]),
    # pods without a Tidal QoS level are left alone, even with a limit
    (100, [(None, 10), (BE, None)], [None, 100]),
    (None, [(BE, None), (None, 10)], [None, None]),
])
def test_pod_rates(cap, pods, rates):
    assert pod_rates_mbps(cap, pods) == pytest.approx(rates)


NODE = "colocation.tidal.io/node-egress-bandwidth-mbps"
OLD = "colocation.tidal.io/egress-bandwidth-mbps"
VOLCANO = "volcano.sh/network-bandwidth-rate"
RENAME = f"node annotation {OLD} is deprecated as the node's bandwidth (on a pod it is the pod's own limit): rename it to {NODE}"
ALLOWED = "allowed: a positive number of Mbit/s up to 1000000, e.g. 100 or 2.5"


@pytest.mark.parametrize("policy_mbps, annotations, link, expected", [
    (0, {}, 10000, (10000.0, None, None)),                                        # the NIC's speed
    (2000, {}, 10000, (2000.0, None, None)),                                      # the policy
    (2000, {NODE: "500"}, 10000, (500.0, None, None)),                            # the node
    (2000, {VOLCANO: "700"}, 10000, (700.0, None, None)),                         # Volcano's name for it
    (2000, {OLD: "500"}, 10000, (500.0, None, RENAME)),                           # the old name, deprecated
    (0, {NODE: "500", OLD: "1", VOLCANO: "2"}, None, (500.0, None, None)),        # Tidal's name decides
    (0, {OLD: "500", VOLCANO: "2"}, None, (500.0, None, RENAME)),
    (0, {}, None, (None, "egressBandwidth.nodeBandwidthMbps is 0 and the link speed", None)),
    (2000, {NODE: "fast"}, None,
     (2000.0, f'node annotation "{NODE}": invalid value "fast"; {ALLOWED}; using 2000 Mbit/s', None)),
    (0, {VOLCANO: "1000Mbps"}, 100,
     (100.0, f'node annotation "{VOLCANO}": invalid value "1000Mbps"; {ALLOWED} '
             "(the unit is Mbit/s, write the number alone); using 100 Mbit/s", None)),
    (0, {OLD: "0"}, None, (None, f'node annotation "{OLD}": invalid value "0"; {ALLOWED}', None)),
])
def test_node_bandwidth(policy_mbps, annotations, link, expected):
    value, problem, warning = node_bandwidth_mbps(config(nodeBandwidthMbps=policy_mbps), annotations, link)
    assert value == expected[0]
    assert (problem is None) if expected[1] is None else problem.startswith(expected[1]), problem
    assert warning == expected[2]


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
        pid = int(wait_for(lambda: sh("ip", "netns", "pids", ns).split(), 30, f"the sandbox in {ns}",
                           interval=0.05)[0])
        LocalKubelet.move(pid, dirs)
        assert sandbox.poll() is None
        pods.append(PodState(uid, qos_class, level, (ContainerState(cid),), "ns", name))
    actuator = EgressActuator(kubelet.layout)
    cfg = config(nodeBandwidthMbps=NODE_MBPS)
    for port in ("5201", "5202"):
        wait_for(lambda: sh("ip", "netns", "exec", sink, "ss", "-Hltn", f"sport = :{port}").strip(), 30,
                 f"the iperf3 server listening on port {port}", interval=0.05)

    caps, last = [], [time.monotonic()]

    def rounds_until(done, seconds: float, what: str) -> None:
        """A round every second (as the agent runs them: rates are per reading interval) until
        ``done()``, failing after ``seconds``."""
        deadline = time.monotonic() + seconds
        while True:
            time.sleep(max(0.0, last[0] + 1.0 - time.monotonic()))
            last[0] = time.monotonic()
            assert actuator.round(last[0], True, cfg, pods, {}) == []
            caps.append(actuator.cap_mbps)
            if done():
                return
            assert time.monotonic() < deadline, f"{what} within {seconds} s (online {actuator.online_mbps:.1f} Mbit/s)"

    try:
        rounds_until(lambda: actuator.cap_mbps == NODE_MBPS * 0.4, 30, "the high watermark without online traffic")
        quiet = net.start(be_ns, "iperf3", "-c", "10.251.0.9", "-p", "5201", "-t", "3", "-J")
        rounds_until(lambda: quiet.poll() is not None, 60, "the BE transfer alone finished")
        be_alone = iperf_mbps(quiet)
        # online traffic at 90 % of the node bandwidth, above the 80 % watermark, for longer than
        # the rounds below need even on a loaded machine
        online = net.start(online_ns, "iperf3", "-c", "10.251.0.9", "-p", "5202", "-t", "25", "-b",
                           f"{NODE_MBPS * 0.9:.0f}M", "-J")
        rounds_until(lambda: actuator.cap_mbps == NODE_MBPS * 0.1, 20, "the low watermark under online traffic")
        del caps[:]
        squeezed = net.start(be_ns, "iperf3", "-c", "10.251.0.9", "-p", "5201", "-t", "3", "-J")
        rounds_until(lambda: squeezed.poll() is not None, 60, "the squeezed BE transfer finished")
        assert online.poll() is None, "the online transfer ended before the squeezed BE transfer"
        assert set(caps) == {NODE_MBPS * 0.1}, caps  # held at the low watermark all the while
        be_squeezed = iperf_mbps(squeezed)
        online_rate = iperf_mbps(online)
    finally:
        assert actuator.round(time.monotonic(), False, cfg, pods, {}) == []  # switched off: undone
    print(f"\nBE alone {be_alone:.1f} Mbit/s (cap {NODE_MBPS * 0.4:.0f}), with online traffic "
          f"{be_squeezed:.1f} Mbit/s (cap {NODE_MBPS * 0.1:.0f}); online {online_rate:.1f} Mbit/s")
    assert NODE_MBPS * 0.4 * 0.6 <= be_alone <= NODE_MBPS * 0.4 * 1.15
    assert NODE_MBPS * 0.1 * 0.6 <= be_squeezed <= NODE_MBPS * 0.1 * 1.3
    # this test's IFB devices are gone (another session's, e.g. a lab agent's, are not this test's)
    ours = [f"tfb{(Path('/sys/class/net') / link / 'ifindex').read_text().strip()}"
            for link in net.links if link != net.bridge]
    assert not [d for d in ours if (Path("/sys/class/net") / d).exists()], ours


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


def _feature_pods(layout, specs):
    """FeaturePodStates, each with a container cgroup holding PID 100 + n (its "veth" in FakeShaper)."""
    pods = []
    for n, (level, mbps, problem) in enumerate(specs, start=1):
        qos_class = PodQOSClass.BEST_EFFORT if level is QoSLevel.BE else PodQOSClass.BURSTABLE
        pod = FeaturePodState(f"{n}{n}{n}{n}-0000", qos_class, level, (ContainerState(f"containerd://c{n}"),),
                              "ns", f"p{n}", egress_mbps=mbps, egress_problem=problem)
        d = layout.cpu_dir(layout.container_relpath(pod.uid, pod.qos_class, pod.containers[0].id))
        d.mkdir(parents=True)
        (d / "cgroup.procs").write_text(f"{100 + n}\n")
        pods.append(pod)
    return pods


BAD = 'annotation "colocation.tidal.io/egress-bandwidth-mbps": invalid value "fast"; allowed: ...'


def test_pods_own_limits_bad_annotations_and_the_deprecated_node_name_in_rounds(tmp_path, monkeypatch, caplog):
    from tidal.agent.collector.cgroups import CgroupDriver, CgroupHierarchy, CgroupLayout, CgroupVersion
    from tidal.agent.qos import egress_bandwidth
    layout = CgroupLayout(CgroupHierarchy(CgroupVersion.V2, tmp_path, tmp_path), CgroupDriver.CGROUPFS)
    pods = _feature_pods(layout, [
        (QoSLevel.BE, 50.0, ""),      # p1: its own limit, below its share
        (QoSLevel.BE, None, BAD),     # p2: a bad annotation: its share of the cap all the same
        (QoSLevel.LS, 30.0, ""),      # p3: online with a limit: held to it
        (QoSLevel.LS, None, BAD),     # p4: online with a bad annotation: not shaped
        (QoSLevel.LS, None, ""),      # p5: online without: not shaped
        (None, 10.0, ""),             # p6: no Tidal QoS level: left alone
    ])
    shaper = FakeShaper({100 + n: (f"veth{n}", 10 + n) for n in range(1, 7)})
    monkeypatch.setattr(egress_bandwidth.Path, "exists", lambda self: False)
    monkeypatch.setattr(egress_bandwidth, "link_speed_mbps", lambda: None)
    actuator = EgressActuator(layout, shaper)
    cfg = config()  # nodeBandwidthMbps 0, no link speed: the annotation says

    def egress_round(annotations):
        caplog.clear()
        with caplog.at_level("INFO", logger=egress_bandwidth.__name__):
            assert actuator.round(0.0, True, cfg, pods, annotations, {"tc": True}) == []
        return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]

    warnings = egress_round({"colocation.tidal.io/egress-bandwidth-mbps": "1000"})  # the old node name
    # the BE cap is 40 % of 1000: p1 takes its 50, p2 the other 350; p3 its own 30
    assert sorted(c for c in shaper.calls if c[0] == "shape") == [
        ("shape", "veth1", 50_000_000), ("shape", "veth2", 350_000_000), ("shape", "veth3", 30_000_000)]
    assert sorted(warnings) == sorted([
        f"egress bandwidth: {RENAME}",
        f"egress bandwidth: pod ns/p2: {BAD}; its share of the BE cap only",
        f"egress bandwidth: pod ns/p4: {BAD}; not shaped",
    ])
    shaper.calls.clear()
    assert egress_round({"colocation.tidal.io/egress-bandwidth-mbps": "1000"}) == []  # reported once
    assert [c for c in shaper.calls if c[0] == "shape"] == []
    # renamed: no warning; Tidal's node name at 100 Mbit/s: a BE cap of 40 shared as 20 + 20
    assert egress_round({NODE: "100"}) == []
    assert sorted(c for c in shaper.calls if c[0] == "shape") == [
        ("shape", "veth1", 20_000_000), ("shape", "veth2", 20_000_000)]
    shaper.calls.clear()
    # the node's bandwidth unknown: only the pods' own limits are left
    caplog.clear()
    egress_round({})
    assert sorted(c for c in shaper.calls if c[0] in ("shape", "unshape")) == [
        ("shape", "veth1", 50_000_000), ("unshape", 12)]
    assert sorted(shaper.devices) == [11, 13]


@pytest.mark.parametrize("annotations, mbps, problem", [
    ({}, None, ""),
    ({OLD: "250"}, 250.0, ""),
    ({VOLCANO: "250"}, None, ""),  # Volcano's annotation is a node's bandwidth, not a pod's limit
    ({OLD: "250M"}, None, f'annotation "{OLD}": invalid value "250M"; {ALLOWED} '
                          "(the unit is Mbit/s, write the number alone)"),
])
def test_feature_pod_state_carries_the_pods_own_limit_or_its_problem(annotations, mbps, problem):
    from tidal.agent.qos.pod_features import feature_views
    obj = {"metadata": {"uid": "u1", "namespace": "ns", "name": "p",
                        "annotations": {"colocation.tidal.io/qos-level": "BE", **annotations}},
           "spec": {"containers": []}, "status": {"qosClass": "BestEffort"}}
    _, pod = feature_views(obj)
    assert (pod.egress_mbps, pod.egress_problem) == (mbps, problem)
