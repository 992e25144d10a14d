# SPDX-License-Identifier: Apache-2.0
"""bench/agent_pod.py: the kubelet's values for the agent's pod (table-driven), the role's
defaults read as deployed, and the pod's cgroups on this machine with the agent moved in."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import agent_pod  # noqa: E402


@pytest.mark.parametrize("resources, expected", [
    # the role's defaults: 100m request, 500m and 256 MiB limits
    ({"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}},
     {"cpu.shares": "102", "cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "50000",
      "memory.limit_in_bytes": str(256 << 20)}),
    # no limits: the request's shares only
    ({"requests": {"cpu": "1"}}, {"cpu.shares": "1024"}),
    # no CPU request: the kubelet's minimum shares; a whole-core limit
    ({"limits": {"cpu": 2}}, {"cpu.shares": "2", "cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "200000"}),
    # a limit below the kernel's 1 ms quota is raised to it, as the kubelet does
    ({"requests": {"cpu": "5m"}, "limits": {"cpu": "5m"}},
     {"cpu.shares": "5", "cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "1000"}),
])
def test_the_kubelets_values_for_the_agents_pod(resources, expected):
    assert agent_pod.cgroup_values(resources) == expected


def test_the_role_deploys_the_agent_with_a_cpu_request_and_limits():
    resources = agent_pod.role_resources()
    assert set(agent_pod.cgroup_values(resources)) == {"cpu.shares", "cpu.cfs_period_us", "cpu.cfs_quota_us",
                                                       "memory.limit_in_bytes"}


def test_the_agent_runs_in_a_burstable_pods_cgroups_with_the_roles_values(hierarchy, real):
    from tidal_dev.testing.local_kubelet import LocalKubelet
    if not Path("/sys/fs/cgroup/cpu/cpu.shares").exists():
        pytest.skip("the bench's --agent-cgroup pod writes cgroup v1 files: no v1 cpu hierarchy here")
    kubelet = LocalKubelet(real)
    dirs = agent_pod.create(kubelet, log=lambda _: None)
    values = agent_pod.cgroup_values(agent_pod.role_resources())
    for d in (*dirs, *(d.parent for d in dirs)):
        assert "/kubepods/burstable/pod" in str(d)
        for name, value in values.items():
            if (d / name).exists():
                assert (d / name).read_text().strip() == value, d / name
    assert any((d / "cpu.shares").exists() for d in dirs) and any((d / "memory.limit_in_bytes").exists() for d in dirs)
    agent = subprocess.Popen(["sleep", "60"])
    try:
        kubelet.move(agent.pid, dirs)
        for d in dirs:
            assert str(agent.pid) in (d / "cgroup.procs").read_text().split()
    finally:
        agent.kill()
        agent.wait()
