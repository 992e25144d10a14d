# SPDX-License-Identifier: Apache-2.0
"""Helpers of the tests that deploy Tidal as pods on the lab's real node with playbooks/site.yml
(tests/lab/test_site.py, tests/faults/): running a playbook against the lab, pods pinned to the
real node, their cgroups under the real node's kubelet, and what the in-cluster controllers
show (the leader's Lease, the agent's pod, their logs)."""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tidal.agent.collector.cgroups import BE_IDLE_GROUP
from tidal_dev.testing.playbook import run as playbook_run
from tidal_dev.testing.policy import put_spec

ROOT = Path(__file__).resolve().parents[3]
PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
REAL_NODE = "lab-real-0"
NAMESPACE = "tidal-system"
CGROUP = Path("/sys/fs/cgroup")
TIDAL_PREFIX = "colocation.tidal.io/"
BATCH_PREFIX = "kubernetes.io/batch-"


def play(playbook: str, lab, timeout: float = 240, *extra: str) -> subprocess.CompletedProcess:
    """Run a playbook of this checkout against the lab (retried once past ansible-core's
    results-thread race: tidal_dev.testing.playbook)."""
    env = dict(os.environ, TIDAL_LAB_DIR=str(lab.dir), ANSIBLE_NOCOLOR="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    return playbook_run([PLAYBOOK, playbook, *extra], ROOT, env, timeout)


def recap(output: str) -> dict[str, dict[str, int]]:
    """The PLAY RECAP counts by host."""
    return {host: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counts)}
            for host, counts in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.MULTILINE)}


def kubelet_pod_cgroup(pod, controller: str) -> Path:
    """The pod's cgroup directory under the real node's kubelet (cgroupfs driver)."""
    qos_class = pod.status.qos_class.lower()
    base = CGROUP / controller / "tidal-lab" / "kubepods"
    return (base if qos_class == "guaranteed" else base / qos_class) / f"pod{pod.metadata.uid}"


def container_cgroup(pod, controller: str) -> Path:
    """The container's cgroup directory on the real node (cgroupfs driver): in the BE idle group
    (``/tidal-be/pod<uid>/<id>``, where Tidal's NRI plugin creates BE containers while
    ``beIsolation.cpuPriority.idleGroup`` is on, as by default) when it is there, else below the
    kubelet's ``kubepods``."""
    container_id = pod.status.container_statuses[0].container_id.split("://", 1)[1]
    moved = CGROUP / controller / BE_IDLE_GROUP / f"pod{pod.metadata.uid}" / container_id
    if pod.status.qos_class == "BestEffort" and moved.is_dir():
        return moved
    return kubelet_pod_cgroup(pod, controller) / container_id


def read(path: Path) -> str:
    return path.read_text().strip()


def agent_state_dir(lab) -> Path:
    """The agent's state directory on the real node (its journals and history), on the host: its
    hostPath."""
    return lab.dir / "node-roots" / REAL_NODE / "var/lib/tidal-agent"


def agent_journal(lab) -> Path:
    """The agent's restore journal on the real node, on the host."""
    return agent_state_dir(lab) / "qos-journal.json"


def journal_originals(lab) -> dict[str, str]:
    """The agent's restore journal on the real node: file -> original value; empty while there is
    none (the agent writes it atomically: temporary file and rename)."""
    try:
        return json.loads(agent_journal(lab).read_text()).get("originals") or {}
    except FileNotFoundError:
        return {}


def pod_manifest(name: str, image: str, level: str | None, resources: dict, command: list[str], **extra) -> dict:
    """A pod on the real node from the project's image (already in its containerd)."""
    annotations = {"colocation.tidal.io/qos-level": level} if level else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": REAL_NODE}, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never",
                                     "command": command, "resources": resources}], **extra}}


def running(core, namespace: str, name: str):
    """A predicate: the pod, once Running with its container started."""
    def check():
        pod = core.read_namespaced_pod(name, namespace)
        statuses = pod.status.container_statuses or []
        return pod if pod.status.phase == "Running" and statuses and statuses[0].container_id else None
    return check


def gone(core, namespace: str, name: str):
    """A predicate: the pod is deleted."""
    from kubernetes.client.exceptions import ApiException

    def check():
        try:
            core.read_namespaced_pod(name, namespace)
        except ApiException as err:
            return err.status == 404
        return False
    return check


def switch_colocation(lab, on: bool, node: str = REAL_NODE) -> subprocess.CompletedProcess:
    """A node's colocation switch, as a user flips it: the tidal.colocation.node module."""
    return subprocess.run([str(Path(sys.executable).with_name("ansible")), "localhost", "-m", "tidal.colocation.node",
                           "-a", json.dumps({"names": [node], "colocation": on,
                                             "kubeconfig": str(lab.kubeconfig_path)})],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def tidal_pods(core, app: str) -> list:
    """The live (not terminating) pods of one controller (`tidal-manager`, `tidal-agent`, ...)."""
    return [p for p in core.list_namespaced_pod(NAMESPACE, label_selector=f"app.kubernetes.io/name={app}").items
            if p.metadata.deletion_timestamp is None]


def micro_time(text: str | None) -> datetime.datetime | None:
    """A Lease's or a status' timestamp (RFC 3339, with or without fractions), UTC."""
    if not text:
        return None
    text = text.replace("Z", "+00:00")
    return datetime.datetime.fromisoformat(text)


def logs_since(core, pod, container: str, since: datetime.datetime) -> str:
    """A container's log lines written at or after `since` (the kubelet's timestamps); its
    previous instance's too when it restarted."""
    out = []
    for previous in (True, False):
        try:
            text = core.read_namespaced_pod_log(pod.metadata.name, NAMESPACE, container=container,
                                                previous=previous, timestamps=True)
        except Exception:  # no previous instance
            continue
        for line in text.splitlines():
            stamp, _, rest = line.partition(" ")
            try:
                when = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")[:26] + "+00:00"
                                                       if "." in stamp else stamp.replace("Z", "+00:00"))
            except ValueError:
                continue
            if when >= since:
                out.append(rest)
    return "\n".join(out)


@contextlib.contextmanager
def be_isolation_patched(custom, policy: tuple, patch: dict):
    """The shared ColocationPolicy (``policy``: the custom object's group, version, plural and
    name) with ``patch`` merged into its ``beIsolation``; put back as it was afterwards."""
    isolation = custom.get_cluster_custom_object(*policy)["spec"].get("beIsolation")
    custom.patch_cluster_custom_object(*policy, {"spec": {"beIsolation": patch}})
    try:
        yield
    finally:
        restored = custom.get_cluster_custom_object(*policy)["spec"]
        restored.pop("beIsolation", None)
        if isolation is not None:
            restored["beIsolation"] = isolation
        put_spec(custom, policy, restored)
