"""tidal-agent run: this machine's real /proc and cgroups, the lab's pods, its NodeProfile."""
import os
import sys
from pathlib import Path

import pytest
from kubernetes import client

from tidal.api import qos
from tidal.crds import crd_manifests
from tidal_dev.lab import processes
from tidal_dev.lab.apply import create_or_replace_all
from tidal_dev.lab.pytest_plugin import wait_for

pytestmark = pytest.mark.lab


@pytest.fixture
def node(core, lab_api):
    """A kwok node of this test's own: the shared lab's nodes may be replayed by someone else."""
    import secrets

    from tidal_dev.testing.kwok import kwok_node
    name = f"tidal-agent-node-{secrets.token_hex(3)}"
    kwok_node(core, name, {"cpu": "16", "memory": "64Gi", "pods": "110"})
    yield name
    core.delete_node(name)


def _pod(name, level, cpu, node):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {qos.QOS_ANNOTATION: level}},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.invalid/app:1",
                                                        "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}


def test_agent_reports_real_node_usage_and_counts_unmeasured_pods_at_request(lab, lab_api, core, namespace, node,
                                                                           tmp_path):
    NODE = node
    create_or_replace_all(lab_api, crd_manifests(), wait_established=True)
    custom = client.CustomObjectsApi(lab_api)
    core.create_namespaced_pod(namespace, _pod("web", "LS", "1500m", node))
    agent = processes.start("agent", [str(Path(sys.executable).with_name("tidal-agent")), "run", "--node", NODE,
                                      "--kubeconfig", str(lab.kubeconfig_path), "--report-interval", "1",
                                      "--history-step-seconds", "2", "--state-dir", str(tmp_path / "state"),
                                      "--metrics-address", "127.0.0.1", "--metrics-port", "0"],
                            tmp_path / "agent.log")

    def profile_with(predicate):
        def check():
            try:
                status = custom.get_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "nodeprofiles", NODE)["status"]
            except Exception:
                return None
            return status if predicate(status) else None
        return check

    def pods_at_request(status):
        return {p["name"] for p in status.get("perQoS", {}).get("LS", {}).get("podsAtRequest", [])}

    try:
        status = wait_for(profile_with(lambda s: "web" in pods_at_request(s) and "predictions" in s), 60,
                          f"NodeProfile {NODE} with pod web (log {tmp_path / 'agent.log'})")
        # Real node usage from /proc: some CPU and memory are always in use on this machine.
        minute = next(u for u in status["usage"] if u["windowSeconds"] == 60)
        assert minute["samples"] >= 1 and minute["memoryBytes"]["max"] > 100 * 1024**2
        # The policy's default predictor (Tidal's own) ran on the agent's history; the kwok pod has
        # no cgroup and is young, so it is reserved at its full request.
        assert status["predictions"]["predictor"] == "tidal"
        # What this machine's kernel supports, each missing feature with its reason.
        capabilities = {c["name"]: c for c in status["capabilities"]}
        assert capabilities["cpu.idle"]["supported"] is True
        assert capabilities["resctrl.l3"]["supported"] is False and capabilities["resctrl.l3"]["reason"]
        assert status["predictions"]["onlinePeak"]["cpuMillicores"] >= 1500
        # Its threads, all of them, yield to online work (SCHED_BATCH, --own-scheduling's default).
        policies = {int(t.name): os.sched_getscheduler(int(t.name))
                    for t in Path(f"/proc/{agent.pid}/task").iterdir()}
        assert policies and set(policies.values()) == {os.SCHED_BATCH}, policies
        # A pod created later reaches the agent through its watch.
        core.create_namespaced_pod(namespace, _pod("search", "LS", "500m", node))
        wait_for(profile_with(lambda s: "search" in pods_at_request(s)), 30, "pod search reported")
        core.delete_namespaced_pod("web", namespace, grace_period_seconds=0)
        wait_for(profile_with(lambda s: "web" not in pods_at_request(s)), 30, "pod web gone from the report")
    finally:
        processes.stop(agent)
        custom.delete_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "nodeprofiles", NODE)


def _tick_errors(port: int) -> float:
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("tidal_agent_tick_errors_total{"))


@pytest.fixture
def proc_with_own_stat(tmp_path):
    """This machine's /proc, bind-mounted, with ``stat`` replaced by a file of the test's (bind-mounted
    over it): what the agent reads there is the test's to spoil."""
    import shutil
    import subprocess
    if shutil.which("mount") is None:
        pytest.skip("no mount(8) here")
    proc, stat = tmp_path / "proc", tmp_path / "stat"
    proc.mkdir()
    stat.write_text(Path("/proc/stat").read_text())
    mounted = []
    try:
        for source, target in (("/proc", proc), (stat, proc / "stat")):
            done = subprocess.run(["mount", "--bind", str(source), str(target)], capture_output=True, text=True)
            if done.returncode:
                pytest.skip(f"cannot bind-mount {source} here: {done.stderr.strip()}")
            mounted.append(target)
        yield proc, stat
    finally:
        for target in reversed(mounted):
            subprocess.run(["umount", str(target)], check=True)


def test_a_tick_failing_on_an_odd_kernel_file_does_not_end_the_agent(lab, lab_api, core, node, tmp_path,
                                                                     proc_with_own_stat):
    """/proc/stat unreadable for a while (here: not in the kernel's format): every tick fails, is
    counted and logged once with its traceback, the agent keeps running and reports again once the
    file reads right; before, the first such tick ended the agent."""
    from tidal_dev.lab.ports import free_port
    create_or_replace_all(lab_api, crd_manifests(), wait_established=True)
    custom = client.CustomObjectsApi(lab_api)
    proc, stat = proc_with_own_stat
    port = free_port()
    log = tmp_path / "agent.log"
    agent = processes.start("agent", [str(Path(sys.executable).with_name("tidal-agent")), "run", "--node", node,
                                      "--kubeconfig", str(lab.kubeconfig_path), "--report-interval", "1",
                                      "--proc-root", str(proc), "--state-dir", str(tmp_path / "state"),
                                      "--metrics-address", "127.0.0.1", "--metrics-port", str(port)], log)

    def reported_at():
        try:
            profile = custom.get_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "nodeprofiles", node)
        except client.ApiException:
            return None
        return (profile.get("status") or {}).get("observedAt")  # the sample's time, to the second

    try:
        wait_for(reported_at, 60, f"NodeProfile {node} reported (log {log})")
        assert _tick_errors(port) == 0
        good = stat.read_text()
        stat.write_text("not the kernel's format\n")
        failing = wait_for(lambda: (n := _tick_errors(port)) >= 5 and n, 30, "five failed ticks counted")
        assert processes.alive(agent), f"the agent ended (log {log}):\n{log.read_text()[-3000:]}"
        text = log.read_text()
        # logged with its traceback, not at every tick: once, or twice when a tick read the file
        # while it was being rewritten (empty or half old: another kind of error)
        assert 1 <= text.count("a tick failed, the next one runs") <= 2 < failing and "Traceback" in text, \
            text[-3000:]
        stat.write_text(good)
        failed = _tick_errors(port)
        before = reported_at()
        wait_for(lambda: reported_at() not in (None, before), 30,
                 f"a new report once /proc/stat reads right (log {log})")
        assert _tick_errors(port) <= failed + 1  # at most the tick that was running when the file came back
        assert processes.alive(agent)
    finally:
        processes.stop(agent)
        try:
            custom.delete_cluster_custom_object(qos.API_GROUP, qos.API_VERSION, "nodeprofiles", node)
        except client.ApiException:
            pass
