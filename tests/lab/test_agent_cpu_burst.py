"""CPU burst end to end: tidal-agent run reads an LS pod's burst annotation from the lab and sets
cfs_burst_us on this machine's real cgroups (the kubelet's part played by tidal_dev.testing.local_kubelet,
as in test_agent_qos.py, whose fixtures are reused), then restores it when the policy turns it off."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tidal.api import qos
from tidal_dev.lab import processes
from tidal_dev.lab.ports import free_port
from tidal_dev.lab.pytest_plugin import wait_for

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agent_fixtures import _agent, _pod, _read, hierarchy, kubelet, node  # noqa: F401 (fixtures)

pytestmark = pytest.mark.lab


def test_agent_bursts_annotated_ls_pods_only_and_restores_when_switched_off(
        lab, core, namespace, node, kubelet, policy, tmp_path):  # noqa: F811
    if not (kubelet.cpu_root / "cpu.cfs_burst_us").exists():
        pytest.skip("kernel without CFS burst")
    policy({})
    resources = {"cpu": "200m", "memory": "64Mi"}
    bursty = _pod(node, "bursty", "LS", resources, limits=resources)
    bursty["metadata"]["annotations"][qos.CPU_BURST_ANNOTATION] = "true"
    plain = _pod(node, "plain", "LS", resources, limits=resources)
    pods = {name: kubelet.run_pod(core, namespace, body) for name, body in (("bursty", bursty), ("plain", plain))}
    files = {}
    for name, pod in pods.items():
        pod_dir = kubelet.cpu_root / kubelet.layout.pod_relpath(pod.uid, pod.qos_class)
        container_dir = kubelet.cpu_root / kubelet.layout.container_relpath(pod.uid, pod.qos_class, pod.container_id)
        for d in (pod_dir, container_dir):  # what the kubelet writes for a 200m CPU limit
            (d / "cpu.cfs_quota_us").write_text("20000")
        files[name] = (pod_dir / "cpu.cfs_burst_us", container_dir / "cpu.cfs_burst_us")
        kubelet.idle(pod.dirs)
    agent = _agent(lab, node, kubelet, tmp_path, free_port())
    try:
        log = tmp_path / "agent.log"
        # the machine's own load is far below 60 % online (these pods are idle): the full burst
        wait_for(lambda: all(_read(f) == "20000" for f in files["bursty"]), 30,
                 f"cfs_burst_us = quota on the annotated LS pod (log {log})")
        assert [_read(f) for f in files["plain"]] == ["0", "0"]  # no annotation, no burst
        policy({"features": {"cpuBurst": {"enabled": False}}})
        wait_for(lambda: all(_read(f) == "0" for f in files["bursty"]), 10, "burst restored when switched off")
        assert processes.alive(agent)
    finally:
        processes.stop(agent)
