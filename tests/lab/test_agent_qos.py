"""The node QoS engine end to end: tidal-agent run against this machine's real cgroups and the lab.

A kwok node stands for this machine (its CPUs and memory). Its pods are created in the lab and
bound to it; the test plays the kubelet's part on this machine: it reports container IDs in the
pods' status and creates the kubelet's cgroup tree under a private cgroup root, with real
processes as the containers (tidal_dev.testing.local_kubelet). The agent then runs as on a node.
"""
from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tidal.api import qos
from tidal.agent.collector.cgroups import PodQOSClass
from tidal.agent.executor import sched
from tidal.agent.executor.cgroupfs import device_lines
from tidal.agent.qos.be_block_io import node_disks
from tidal_dev.lab import processes
from tidal_dev.lab.ports import free_port
from tidal_dev.lab.pytest_plugin import wait_for

pytestmark = pytest.mark.lab
sys.path.insert(0, str(Path(__file__).resolve().parent))
from agent_fixtures import (CPUS, POLICY, _agent, _be, _busy_percent, _cpu_cores, _pod, _read, scraped,  # noqa: E402,F401
                            hierarchy, kubelet, node)


def test_agent_isolates_be_pods_follows_the_policy_and_restores_everything_when_colocation_goes_off(
        lab, core, namespace, node, kubelet, policy, tmp_path):
    # Suppression's own quota is checked: the run-queue delay control (which may only lower it,
    # when the machine keeps the LS task waiting) is off here; its tests are
    # test_qos_be_cpu_interference*.py and bench-isolation. The usage outside the pods (the lab's
    # control plane beside them on the same cores) is left out first, then counted.
    slice_on = {"onlineSchedSlice": {"enabled": True}, "blockIO": {"enabled": True, "readMiBPerSecond": 50}}
    policy({"beIsolation": {"cpuInterference": {"enabled": False}}, "overselling": {"includeSystemUsage": False},
            "features": slice_on})
    web_pod = kubelet.run_pod(core, namespace, _pod(node, "web", "LS", {"cpu": "500m", "memory": "256Mi"}))
    be_pod_ = kubelet.run_pod(core, namespace, _be(node, "batch", 500))
    web_uid, web_class, web = web_pod.uid, web_pod.qos_class, web_pod.dirs
    be_uid, be_class, be = be_pod_.uid, be_pod_.qos_class, be_pod_.dirs
    assert (web_class, be_class) == (PodQOSClass.BURSTABLE, PodQOSClass.BEST_EFFORT)
    web_process = kubelet.idle(web)
    be_process = kubelet.spin(be)
    slices, why_not = sched.probe()
    base_slice = sched.get_attr(web_process.pid).runtime_ns
    cpu = kubelet.cpu_root
    be_pod = cpu / kubelet.layout.pod_relpath(be_uid, be_class)
    be_parent = cpu / kubelet.layout.qos_relpath(PodQOSClass.BEST_EFFORT)
    be_cpu, be_memory = be[0], next(d for d in be if "memory" in d.parts)
    be_blkio = next((d for d in be if "blkio" in d.parts), None)
    originals = {p: _read(p) for p in (be_pod / "cpu.idle", be_parent / "cpu.cfs_quota_us",
                                       be_cpu / "cpu.cfs_quota_us", be_cpu / "cpu.shares",
                                       be_memory / "memory.limit_in_bytes",
                                       *([be_blkio / "blkio.throttle.read_bps_device"] if be_blkio else []))}
    port = free_port()
    agent = _agent(lab, node, kubelet, tmp_path, port)
    try:
        log = tmp_path / "agent.log"
        # BE CPU priority and batch resources on the kernel's files
        wait_for(lambda: _read(be_pod / "cpu.idle") == "1", 30, f"cpu.idle=1 on the BE pod (log {log})")
        wait_for(lambda: _read(be_cpu / "cpu.cfs_quota_us") == "50000", 10, "BE quota from batch-cpu 500")
        assert _read(be_cpu / "cpu.shares") == "512"
        assert int(_read(be_memory / "memory.limit_in_bytes")) == 256 * 1024**2
        # BE CPU suppression on the BE parent: CPUs x 65 % - online usage. The LS pod counts at
        # its request (500 m) until its usage is measured (second sample), then at what it uses.
        wait_for(lambda: CPUS * 65_000 * 0.9 <= int(_read(be_parent / "cpu.cfs_quota_us")) <= CPUS * 65_000,
                 10, "suppression quota at CPUs x 65 % minus the idle LS pod's usage")
        # ... and what the process gets: its 500 m quota, not a whole CPU
        assert _cpu_cores(be) < 0.55
        # With the usage outside the pods counted (includeSystemUsage, the default), suppression
        # leaves it to the system: a process busy outside every pod lowers the BE quota.
        held = int(_read(be_parent / "cpu.cfs_quota_us"))
        daemon = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            policy({"beIsolation": {"cpuInterference": {"enabled": False}}, "features": slice_on})
            wait_for(lambda: int(_read(be_parent / "cpu.cfs_quota_us")) <= held - 30_000, 15,
                     f"suppression quota below {held} by the busy process's usage (log {log})")
        finally:
            daemon.kill()
            daemon.wait()
        # the online pod's cgroups are never touched; its threads ask for the short wake-up slice
        # (features.onlineSchedSlice, switched on here), BE's keep theirs
        assert _read(cpu / kubelet.layout.pod_relpath(web_uid, web_class) / "cpu.shares") == "1024"
        if slices:
            wait_for(lambda: sched.get_attr(web_process.pid).runtime_ns == 100_000, 10,
                     f"the LS pod's thread at a 100 µs slice (log {log})")
            assert sched.get_attr(be_process.pid).runtime_ns == base_slice
        else:
            print(f"online wake-up slice not checked: {why_not}")
        # the BE container's reads capped on every disk of the machine (features.blockIO, 50 MiB/s,
        # one BE container); the LS pod's disk left alone
        if be_blkio is not None:
            disks = node_disks()
            wait_for(lambda: device_lines(_read(be_blkio / "blkio.throttle.read_bps_device"))
                     == {d.device: str(50 << 20) for d in disks}, 10,
                     f"BE reads capped at 50 MiB/s on {disks} (log {log})")
            assert _read(next(d for d in web if "blkio" in d.parts) / "blkio.throttle.read_bps_device") == ""
            # each disk's largest request said with the caps; on this v1 node, a disk taking more
            # than 64 KiB (the kernel's default; the lab leaves this machine's disk alone) is warned about
            text = log.read_text()
            assert all(f"{d.name} ({d.device}, requests ≤ {d.max_request_kib} KiB)" in text for d in disks), text[-3000:]
            large = [d.name for d in disks if (d.max_request_kib or 0) > 64]
            assert ("buffered writes of BE pods are not capped on cgroup v1" in text) == bool(large), text[-3000:]
        else:
            print("BE block I/O not checked: no v1 blkio hierarchy here")

        # A policy change applies within 5 s, without a restart.
        policy({"beIsolation": {"cpuSuppression": {"thresholdPercent": 30, "floorMillicores": 200, "quota": "always"},
                                "cpuPriority": {"enabled": False}},
                "features": {"cacheLimits": {"enabled": True}, **slice_on}})
        wait_for(lambda: 0 < int(_read(be_parent / "cpu.cfs_quota_us")) <= CPUS * 30_000, 5, "suppression at 30 %")
        wait_for(lambda: _read(be_pod / "cpu.idle") == originals[be_pod / "cpu.idle"], 5,
                 "cpu.idle restored when the strategy is switched off")
        # ... and the node reports, at once, which generation it runs and what it cannot do
        custom = client.CustomObjectsApi(core.api_client)
        generation = custom.get_cluster_custom_object(*POLICY)["metadata"]["generation"]

        def policy_status():
            try:
                status = custom.get_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "nodeprofiles", node)
            except ApiException:
                return None
            applied = (status.get("status") or {}).get("policy") or {}
            return applied if applied.get("appliedGeneration") == generation else None
        applied = wait_for(policy_status, 5, f"NodeProfile reports policy generation {generation}")
        assert applied["effective"]["beIsolation"]["cpuSuppression"]["thresholdPercent"] == 30
        assert any(p.startswith("spec.features.cacheLimits: enabled but not supported on this node (resctrl.l3: ")
                   for p in applied["problems"]), applied["problems"]

        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert f'tidal_agent_cgroup_writes_total{{node="{node}",strategy="be-batch-resources"}}' in metrics
        if be_blkio is not None:
            assert f'tidal_agent_cgroup_writes_total{{node="{node}",strategy="be-block-io"}}' in metrics
            for d in node_disks():
                assert f'tidal_disk_max_request_kib{{disk="{d.name}",node="{node}"}} {float(d.max_request_kib)}' in metrics
        assert f'tidal_be_cpu_quota_millicores{{node="{node}"}}' in metrics
        if slices:
            assert f'tidal_online_sched_slice_pods{{node="{node}"}} 1.0' in metrics
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).status == 200

        # Colocation switched off for the node: every value the agent changed goes back.
        core.patch_node(node, {"metadata": {"labels": {qos.COLOCATION_NODE_LABEL: None}}})
        wait_for(lambda: all(_read(p) == v for p, v in originals.items()), 10,
                 f"original values restored: {originals}")
        wait_for(lambda: sched.get_attr(web_process.pid).runtime_ns == base_slice, 10,
                 "the LS pod's thread has its own slice back")
        assert processes.alive(agent)
    finally:
        processes.stop(agent)


def test_watermark_eviction_taints_evicts_be_only_respects_pdbs_and_untaints_without_flapping(
        lab, core, namespace, node, kubelet, policy, tmp_path, request):
    # Only the strategy under test acts on BE CPU: suppression would cap the BE pods together.
    policy({"beIsolation": {"cpuSuppression": {"enabled": False}}})
    # The watermarks sit above this machine's own load (the lab, this test). The BE pods below are
    # held to their batch-cpu quotas: 0.3 CPU at the lowest priority but protected by a PDB, 0.8
    # and 0.2 — 1.3 CPUs in all, 0.5 once the 0.8 one is gone. High = own load + 1 CPU, low = own
    # load + 0.75 CPU: a quarter of a CPU of slack on either side for the machine's own noise.
    # Eviction starts; the lowest-priority pod is asked first and its budget refuses; the largest
    # of the rest goes; usage is then below low and the taint is removed.
    baseline = _busy_percent()
    if baseline > 35:
        pytest.skip(f"this machine is too busy for a watermark test: {baseline:.0f} % CPU before the pods start")
    high, low = round(baseline + 100 * 1.0 / CPUS), round(baseline + 100 * 0.75 / CPUS)
    # Per-node overrides: evict above high, stop at or below low; quick dwell and cooldown.
    core.patch_node(node, {"metadata": {"annotations": {
        "colocation.tidal.io/eviction-cpu-high-percent": str(high),
        "colocation.tidal.io/eviction-cpu-low-percent": str(low),
        "colocation.tidal.io/eviction-memory-high-percent": "99", "colocation.tidal.io/eviction-memory-low-percent": "98",
        "colocation.tidal.io/eviction-dwell-seconds": "2", "colocation.tidal.io/eviction-cooldown-seconds": "3"}}})
    scheduling = client.SchedulingV1Api(core.api_client)
    low_priority = f"tidal-test-lowest-{namespace}"
    scheduling.create_priority_class({"metadata": {"name": low_priority}, "value": -10})
    request.addfinalizer(lambda: scheduling.delete_priority_class(low_priority))
    protected = _be(node, "be-protected", 300, labels={"app": "protected"})
    protected["spec"]["priorityClassName"] = low_priority
    pods = {"web": _pod(node, "web", "LS", {"cpu": "500m", "memory": "128Mi"}),
            "be-protected": protected, "be-big": _be(node, "be-big", 800), "be-small": _be(node, "be-small", 200)}
    client.PolicyV1Api(core.api_client).create_namespaced_pod_disruption_budget(namespace, {
        "metadata": {"name": "protected"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "protected"}}}})
    workers = {}
    for name, body in pods.items():
        dirs = kubelet.run_pod(core, namespace, body).dirs
        workers[name] = kubelet.idle(dirs) if name == "web" else kubelet.spin(dirs)
    wait_for(lambda: client.PolicyV1Api(core.api_client).read_namespaced_pod_disruption_budget(
        "protected", namespace).status.current_healthy == 1, 30, "PDB sees its pod")

    def remaining():
        names = {p.metadata.name for p in core.list_namespaced_pod(namespace).items
                 if p.metadata.deletion_timestamp is None}
        for name, worker in workers.items():  # the kubelet stops the containers of evicted pods
            if name not in names and worker.poll() is None:
                worker.kill()
        return names

    def tainted():
        taints = core.read_node(node).spec.taints or []
        return any(t.key == qos.OFFLINE_EVICTING_TAINT_KEY and t.effect == "NoSchedule" for t in taints)

    port = free_port()
    agent = _agent(lab, node, kubelet, tmp_path, port)
    log = tmp_path / "agent.log"
    try:
        wait_for(tainted, 40, f"offline-evicting taint (log {log})")
        wait_for(lambda: "be-big" not in remaining(), 30, f"the largest evictable BE pod evicted (log {log})")
        def untainted_with_pods_left():
            left = remaining()  # first: it also stops the containers of pods evicted meanwhile
            return left if not tainted() else None

        wait_for(untainted_with_pods_left, 60, f"taint removed after usage dropped (log {log})")
        left = remaining()
        # BE pods only; the PDB held its pod
        assert {"web", "be-protected"} <= left, left
        time.sleep(4)  # no flapping: usage is below low, nothing is re-tainted
        assert not tainted() and remaining() == left
        events = core.list_namespaced_event(namespace).items + core.list_namespaced_event("default").items
        ours = [e for e in events if e.source and e.source.component == "tidal-agent"
                and e.involved_object.name in (*pods, node)]
        evicted = sorted(e.involved_object.name for e in ours if e.reason == "TidalEvicted")
        assert evicted and set(evicted) <= {"be-big", "be-small"}, evicted
        assert all("cpu usage" in e.message and "watermark" in e.message for e in ours if e.reason == "TidalEvicted")
        # the lowest-priority BE pod was asked first and refused by its budget
        assert any(e.reason == "TidalEvictionBlocked" and e.involved_object.name == "be-protected" for e in ours)
        assert "be-big" in evicted, evicted
        # ... and both counted: the refusal too, which used to be in the log only
        assert scraped(port, "tidal_eviction_failures_total", node=node, reason="disruption-budget") >= 1
        assert scraped(port, "tidal_evictions_total", node=node, reason="watermark", resource="cpu") == len(evicted)
        node_events = [e.reason for e in ours if e.involved_object.name == node]
        assert node_events.count("TidalOfflineEvicting") == 1
        assert node_events.count("TidalOfflineEvictingCleared") == 1
        assert processes.alive(agent)
    finally:
        processes.stop(agent)


def test_agent_keeps_enforcing_while_the_api_server_is_unreachable_and_is_restart_safe(
        lab, core, namespace, node, kubelet, policy, tmp_path):
    import re

    from tidal_dev.testing.tcp_proxy import TCPProxy
    policy({})
    running = kubelet.run_pod(core, namespace, _be(node, "batch", 500))
    uid, qos_class, be = running.uid, running.qos_class, running.dirs
    kubelet.spin(be)
    be_pod = kubelet.cpu_root / kubelet.layout.pod_relpath(uid, qos_class)
    be_parent = kubelet.cpu_root / kubelet.layout.qos_relpath(PodQOSClass.BEST_EFFORT)
    originals = {p: _read(p) for p in (be_pod / "cpu.idle", be[0] / "cpu.cfs_quota_us", be_parent / "cpu.cfs_quota_us")}

    # The agent reaches the API server only through a proxy the test can cut.
    kubeconfig = Path(lab.kubeconfig_path).read_text()
    host, port = re.search(r"server: https://([\d.]+):(\d+)", kubeconfig).groups()
    proxy = TCPProxy(host, int(port))
    proxy_port = proxy.start()
    own = tmp_path / "kubeconfig"
    own.write_text(kubeconfig.replace(f"https://{host}:{port}", f"https://127.0.0.1:{proxy_port}"))
    lab_kubeconfig = type("L", (), {"kubeconfig_path": own})()
    agent = _agent(lab_kubeconfig, node, kubelet, tmp_path, free_port())
    log = tmp_path / "agent.log"
    try:
        wait_for(lambda: _read(be_pod / "cpu.idle") == "1" and _read(be[0] / "cpu.cfs_quota_us") == "50000",
                 30, f"BE pod isolated (log {log})")
        proxy.cut()
        # Something resets the values while the API server is unreachable (as a kubelet's own
        # reconciliation would): the agent puts them back from the pods and policy it last knew.
        time.sleep(2)
        (be_pod / "cpu.idle").write_text("0")
        (be[0] / "cpu.cfs_quota_us").write_text("-1")
        wait_for(lambda: _read(be_pod / "cpu.idle") == "1" and _read(be[0] / "cpu.cfs_quota_us") == "50000",
                 10, f"values enforced again without the API server (log {log})")  # verified every 5 rounds
        assert processes.alive(agent)

        # Back online: the agent resumes its watches; a policy change made meanwhile applies.
        policy({"beIsolation": {"cpuSuppression": {"thresholdPercent": 30, "floorMillicores": 200, "quota": "always"}}})
        proxy.start()
        wait_for(lambda: 0 < int(_read(be_parent / "cpu.cfs_quota_us")) <= CPUS * 30_000, 30,
                 f"the policy changed during the outage applied after it (log {log})")

        # Restart-safe: a new agent finds the kernel as the old one left it (nothing to write)
        # and still knows the originals, so switching colocation off restores them.
        processes.stop(agent)
        assert _read(be_pod / "cpu.idle") == "1"
        agent = _agent(lab_kubeconfig, node, kubelet, tmp_path, free_port())
        time.sleep(3)
        assert _read(be_pod / "cpu.idle") == "1"
        core.patch_node(node, {"metadata": {"labels": {qos.COLOCATION_NODE_LABEL: None}}})
        wait_for(lambda: all(_read(p) == v for p, v in originals.items()), 10,
                 f"originals restored by the restarted agent (log {log})")
    finally:
        processes.stop(agent)
        proxy.cut()
