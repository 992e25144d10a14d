# SPDX-License-Identifier: Apache-2.0
"""The overview's workflow (pure, static): the four steps of colocating a cluster with Tidal, with
what each step writes.

The environment step shows the configuration the collection's roles write on a node with their
defaults — the KubeletConfiguration keys of ``roles/kubelet_cpu_manager`` and containerd's NRI
table of ``roles/containerd_nri`` — and the workload step an example BE Job. The web page renders
`workflow()`; ``tests/unit/test_console_workflow.py`` checks the snippets against what the roles'
tasks pass to their modules and the example against the admission webhook, so neither can drift.
"""
from __future__ import annotations

from typing import Any

from tidal.api import qos

__all__ = ["BE_JOB_EXAMPLE", "CONTAINERD_NRI_SNIPPET", "KUBELET_SNIPPET", "workflow"]

#: The KubeletConfiguration keys roles/kubelet_cpu_manager sets with its defaults (every other key
#: of the file is kept). A change of cpuManagerPolicy also removes /var/lib/kubelet/cpu_manager_state
#: and restarts the kubelet.
KUBELET_SNIPPET = """\
# /var/lib/kubelet/config.yaml (or /etc/kubernetes/kubelet-config.yaml): the keys Tidal sets
cpuManagerPolicy: static
systemReserved:
  cpu: 500m
  memory: 1Gi
topologyManagerPolicy: best-effort
topologyManagerScope: container
"""

#: The table roles/containerd_nri sets with its defaults (the same plugin ID in config schema 2,
#: containerd 1.7, and schema 3, containerd 2.x); containerd is restarted and the socket awaited.
CONTAINERD_NRI_SNIPPET = """\
# /etc/containerd/config.toml: NRI on, so tidal-agent's plugin sets QoS resources at container creation
[plugins."io.containerd.nri.v1.nri"]
disable = false
disable_connections = false
plugin_config_path = "/etc/nri/conf.d"
plugin_path = "/opt/nri/plugins"
plugin_registration_timeout = "5s"
plugin_request_timeout = "2s"
socket_path = "/var/run/nri/nri.sock"
"""

#: A BE (offline) Job: the annotation is all Tidal needs. The admission webhook turns its native
#: requests into kubernetes.io/batch-cpu / batch-memory, requires a node in mode oversubscription
#: or colocation+oversubscription and hands it to Volcano.
BE_JOB_EXAMPLE = f"""\
apiVersion: batch/v1
kind: Job
metadata:
  name: transcode
spec:
  parallelism: 4
  completions: 4
  template:
    metadata:
      annotations:
        {qos.QOS_ANNOTATION}: BE
    spec:
      restartPolicy: Never
      containers:
        - name: transcode
          image: registry.example/ffmpeg:6
          resources:
            requests: {{cpu: 500m, memory: 512Mi}}
            limits: {{cpu: "1", memory: 512Mi}}
"""


def _snippet(title: str, language: str, source: str, text: str) -> dict[str, str]:
    return {"title": title, "language": language, "source": source, "text": text}


def workflow() -> dict[str, Any]:
    """``{"steps": [{title, link, docs, text, snippets}]}`` (``Workflow`` in the OpenAPI document):
    ``link`` is a console page (``#/policy``) or null, ``docs`` the page of Tidal's documentation
    (a path in the repository) or null."""
    return {"steps": [
        {"title": "Environment preparation", "link": None, "docs": "docs/ansible.md", "text": [
            "Run the Ansible collection tidal.colocation (make site / playbooks/site.yml) on every node.",
            "kubelet: static CPU manager policy, CPUs reserved for system daemons, topology manager; "
            "restarted (after removing cpu_manager_state when the policy changes) and awaited Ready.",
            "containerd: NRI enabled, so the tidal-agent's plugin applies QoS resources when containers start.",
            "Cluster: Volcano scheduler, Tidal CRDs, RBAC, PriorityClasses tidal-hls / tidal-ls / tidal-be, "
            "tidal-manager and tidal-agent."],
         "snippets": [
             _snippet("kubelet (role kubelet_cpu_manager)", "yaml", "roles/kubelet_cpu_manager", KUBELET_SNIPPET),
             _snippet("containerd (role containerd_nri)", "toml", "roles/containerd_nri", CONTAINERD_NRI_SNIPPET)]},
        {"title": "Policy configuration", "link": "#/policy", "docs": "docs/policy.md", "text": [
            "Set each node's mode: off, colocation (label colocation.tidal.io/colocation=true: BE isolation, "
            "native requests), oversubscription (colocation.tidal.io/oversubscription=true: oversold batch "
            "resources) or both.",
            "Tune load-aware scheduling, watermark eviction, overselling and advanced features in the "
            "ColocationPolicy."],
         "snippets": []},
        {"title": "Workload deployment", "link": None, "docs": "docs/admission.md", "text": [
            f"Annotate pods with {qos.QOS_ANNOTATION}: HLS (Guaranteed, whole cores), LS (online, elastic) "
            "or BE (offline).",
            "BE pods ask for native cpu/memory; the admission webhook rewrites them to kubernetes.io/batch-cpu "
            "and batch-memory (each container's limit, or its request without one), requires a node in mode "
            "oversubscription or colocation+oversubscription, and schedules them with Volcano. Example:"],
         "snippets": [_snippet("A BE Job", "yaml", "example", BE_JOB_EXAMPLE)]},
        {"title": "Monitoring", "link": "#/monitoring", "docs": "docs/operations.md", "text": [
            "CPU and memory by QoS level, batch allocatable vs requested, evictions and pressure stall, nodes "
            "and workloads over time, for the cluster or chosen nodes."],
         "snippets": []},
    ]}
