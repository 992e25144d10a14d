# SPDX-License-Identifier: Apache-2.0
"""``--agent-cgroup pod``: the benches' ``tidal-agent run`` where its DaemonSet puts it on a node.

Deployed, the agent is a Burstable pod: the kubelet runs it in ``kubepods/burstable/pod<uid>``
with the ``cpu.shares`` of its CPU request, the CFS quota of its CPU limit and the memory limit
of its container (the role's ``tidal_controllers_agent_resources``: 100m / 500m CPU, 256 MiB).
A bench that runs the agent as a plain process leaves it beside the node's daemons (``loose``,
every figure before 2026-12-04 late): one task of weight 1024 at the cpu hierarchy's root or in
``system.slice``, where a pod of 100m weighs 102 among the Burstable pods next to the online one.
:func:`create` makes such a pod's cgroups for the agents the bench starts, with the values read from the
role's defaults, so the bench measures the agent's cost as it would be on a node."""
from __future__ import annotations

import secrets
from pathlib import Path

from tidal.agent.collector.cgroups import PodQOSClass
from tidal.agent.qos.be_batch_resources import CFS_PERIOD_US, milli_cpu_to_quota, milli_cpu_to_shares
from tidal.api.quantities import parse_quantity

#: where the agent runs: as a plain process beside the node's daemons, or in its pod's cgroups
CHOICES = ("loose", "pod")
ROLE_DEFAULTS = Path(__file__).resolve().parents[1] / "roles/tidal_controllers/defaults/main.yml"


def role_resources(defaults: Path = ROLE_DEFAULTS) -> dict:
    """The agent container's ``resources`` as the role deploys it by default."""
    from ruamel.yaml import YAML
    return YAML(typ="safe").load(defaults.read_text())["tidal_controllers_agent_resources"]


def cgroup_values(resources: dict) -> dict[str, str]:
    """What the kubelet (cgroupfs driver, cgroup v1) writes for a one-container Burstable pod of
    these ``resources``: ``cpu.shares`` from the CPU request, the quota from the CPU limit (none
    without one), the memory limit (none without one)."""
    requests, limits = resources.get("requests", {}), resources.get("limits", {})
    out = {"cpu.shares": str(milli_cpu_to_shares(int(parse_quantity(requests.get("cpu", 0)) * 1000)))}
    if "cpu" in limits:
        out["cpu.cfs_period_us"] = str(CFS_PERIOD_US)
        out["cpu.cfs_quota_us"] = str(milli_cpu_to_quota(int(parse_quantity(limits["cpu"]) * 1000)))
    if "memory" in limits:
        out["memory.limit_in_bytes"] = str(int(parse_quantity(limits["memory"])))
    return out


def create(kubelet, log=print, resources: dict | None = None) -> list[Path]:
    """A Burstable pod's container cgroups for the agent, created by ``kubelet`` (a
    ``tidal_dev.testing.local_kubelet.LocalKubelet``; removed with the bench's cgroups), the pod
    and the container carrying :func:`cgroup_values` as the kubelet writes them on both. Returns
    the container's directories: each agent the bench starts goes there (``kubelet.move``)."""
    values = cgroup_values(role_resources() if resources is None else resources)
    container_id = f"containerd://{secrets.token_hex(32)}"
    dirs = kubelet.create_pod(f"tidal-agent-{secrets.token_hex(4)}", PodQOSClass.BURSTABLE,
                              [container_id])[container_id]
    for d in (*(d.parent for d in dirs), *dirs):  # the pod's first: a child's quota within its parent's
        for name, value in values.items():
            if (d / name).exists():
                (d / name).write_text(value)
    log(f"tidal-agent run in a Burstable pod's cgroups ({dirs[0].parent}): "
        + ", ".join(f"{name} {value}" for name, value in values.items()))
    return dirs


def add_argument(parser) -> None:
    """bench-isolation's and bench-memory's ``--agent-cgroup``."""
    parser.add_argument("--agent-cgroup", choices=CHOICES, default="loose",
                        help="where tidal-agent run runs: loose (default; every figure before 2026-12-04 late) = a "
                             "process beside the node's daemons (see --daemons-cgroup); pod = in a Burstable pod's "
                             "cgroups with the cpu.shares, CFS quota and memory limit of the role's "
                             "tidal_controllers_agent_resources, as its DaemonSet runs it (bench/agent_pod.py)")
