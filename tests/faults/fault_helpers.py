"""Helpers of the fault suite (tests/faults): the suite's policy, its BE pod, and the checks
every fault ends with (convergence, evictions, tracebacks)."""
import datetime
import json
import ssl
import urllib.error
import urllib.request

from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tidal.agent.executor.cgroupfs import _normalize
from tidal_dev.testing.site import (NAMESPACE, REAL_NODE, agent_state_dir, logs_since, micro_time, pod_manifest,
                                    tidal_pods)

POLICY = ("colocation.tidal.io", "v1alpha1", "colocationpolicies", "default")
PROFILES = ("colocation.tidal.io", "v1alpha1", "nodeprofiles")
LEASE = "tidal-manager"
# The policy of the suite: the real node oversells what its pods use (the lab's control plane
# shares the machine: counted, it leaves nothing to oversell), and the CPU watermark is out of
# the machine's reach, so no fault test evicts because the machine is busy.
SUITE_POLICY = {
    "overselling": {"predictor": "max", "windowSeconds": 60, "ratioPercent": 100, "safetyMarginPercent": 0,
                    "includeSystemUsage": False},
    "evictionWatermarks": {"cpu": {"highPercent": 99, "lowPercent": 95}},
}
# The ConfigMap the suite's manager reconciles as Volcano's scheduler configuration (conftest).
VOLCANO_NAMESPACE, VOLCANO_CONFIGMAP, VOLCANO_KEY = "tidal-faults-volcano", "volcano-scheduler-configmap", \
    "volcano-scheduler.conf"
VOLCANO_TARGET = f"configmap:{VOLCANO_NAMESPACE}/{VOLCANO_CONFIGMAP}/{VOLCANO_KEY}"
BE_QUOTA_US = "30000"   # the BE pod's 300 m of batch-cpu on a 100 ms period


def _namespace_gone(core, name):
    try:
        core.read_namespace(name)
    except ApiException as err:
        return err.status == 404
    return False


def be_pod(name: str, image: str) -> dict:
    return pod_manifest(name, image, "BE", {"requests": {"cpu": "200m", "memory": "64Mi"},
                                            "limits": {"cpu": "300m", "memory": "64Mi"}},
                        ["python3", "-c", "import signal; signal.pause()"])


def batch_cpu(core) -> int:
    """The real node's allocatable batch-cpu (millicores)."""
    return int(core.read_node(REAL_NODE).status.allocatable.get("kubernetes.io/batch-cpu", "0"))


def batch_memory(core) -> int:
    """The real node's allocatable batch-memory (bytes)."""
    return int(core.read_node(REAL_NODE).status.allocatable.get("kubernetes.io/batch-memory", "0"))


def now_utc() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def api_answers(core) -> bool:
    try:
        core.read_namespace("default", _request_timeout=2)
        return True
    except Exception:
        return False


def service_ip(core) -> str:
    """The `kubernetes` Service's address: the API server as every pod reaches it."""
    return core.read_namespaced_service("kubernetes", "default").spec.cluster_ip


def service_answers(ip: str) -> bool:
    """Whether the API server answers at the `kubernetes` Service's address (routed by the real
    node's kube-proxy): in-cluster clients see the API back only then."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"https://{ip}:443/readyz", timeout=2, context=context):
            return True
    except urllib.error.HTTPError:   # 401/403: it answered
        return True
    except OSError:
        return False


def lease(core):
    return client.CoordinationV1Api(core.api_client).read_namespaced_lease(LEASE, NAMESPACE).spec


def agent_health_url(core) -> str:
    """The agent's /healthz on the node's address (it runs in the host's network namespace)."""
    (agent,) = tidal_pods(core, "tidal-agent")
    port = next(p.container_port for c in agent.spec.containers for p in c.ports or [] if p.name == "metrics")
    return f"http://{agent.status.host_ip}:{port}/healthz"


def agent_metrics(url: str) -> str:
    with urllib.request.urlopen(url.replace("/healthz", "/metrics"), timeout=3) as response:
        return response.read().decode()


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def pod_ready(pod) -> bool:
    """Every container of `pod` started and ready (a pod the kubelet has not started yet has
    no container statuses: not ready)."""
    statuses = pod.status.container_statuses or []
    return bool(statuses) and all(s.ready for s in statuses)


TIDAL_APPS = ("tidal-manager", "tidal-agent", "tidal-console")


def unready(pods: dict[str, list]) -> list[str]:
    """What keeps Tidal's pods, by app, from the deployed state (empty: all there and ready): two
    manager replicas, the agent and the console, each ready. The agent is ready only once it acts
    on the node (its /readyz)."""
    missing = [f"{app}: {len(found)} pods" for app, found in pods.items()
               if len(found) != (2 if app == "tidal-manager" else 1)]
    return missing + [f"{p.metadata.name} not ready" for found in pods.values() for p in found if not pod_ready(p)]


def settled(core) -> list[str]:
    """What keeps the deployment from the state every fault test starts from (empty: settled)."""
    try:
        return unready({app: tidal_pods(core, app) for app in TIDAL_APPS})
    except Exception as err:
        return [f"the API server: {err}"]


def convergence(core, custom, since: datetime.datetime) -> dict[str, bool]:
    """What "everything converged" means after a control-plane fault, each after `since`:
    `leader` a manager renewed the Lease (a leader works), `reported` the agent wrote its
    NodeProfile, `published` the node carries the batch-cpu its breakdown names, `ready` every
    Tidal pod is ready. Each part True or False (all False while the API does not answer)."""
    parts = dict.fromkeys(("leader", "reported", "published", "ready"), False)
    try:
        spec = lease(core)
        profile = custom.get_cluster_custom_object(*PROFILES, REAL_NODE)
        node = core.read_node(REAL_NODE)
        pods = {app: tidal_pods(core, app) for app in TIDAL_APPS}
    except Exception:
        return parts
    parts["leader"] = bool(spec.renew_time and spec.renew_time >= since)
    status = profile.get("status") or {}
    observed = micro_time(status.get("observedAt"))
    parts["reported"] = observed is not None and observed >= since.replace(microsecond=0)
    published = ((status.get("oversell") or {}).get("cpuMillicores") or {}).get("result")
    parts["published"] = published == int(node.status.allocatable.get("kubernetes.io/batch-cpu", "0"))
    parts["ready"] = not unready(pods)
    return parts


def evictions(core, namespace: str) -> list:
    """Every eviction Event of the namespace's pods (the kubelet's and Tidal's)."""
    events = core.list_namespaced_event(namespace).items
    return [e for e in events if e.reason in ("Evicted", "TidalEvicted") or "evict" in (e.message or "").lower()]


def tracebacks(core, since: datetime.datetime) -> list[str]:
    """Tracebacks in any Tidal container's log since `since` (a fault handled is a log line, not one)."""
    found = []
    for app in ("tidal-manager", "tidal-agent", "tidal-console"):
        for pod in tidal_pods(core, app):
            for container in pod.spec.containers:
                text = logs_since(core, pod, container.name, since)
                if "Traceback" in text:
                    found.append(f"{pod.metadata.name}/{container.name}: ...{text[text.index('Traceback'):][:1500]}")
    return found


def eviction_intents(lab) -> list[dict]:
    """The evictions the agent on the real node has requested and not yet finished (its
    evictions journal on the host)."""
    try:
        return json.loads((agent_state_dir(lab) / "evictions-journal.json").read_text()).get("evictions") or []
    except (FileNotFoundError, ValueError):  # absent, or caught between truncate and write
        return []


def _host(path: str) -> Path:
    """A journalled path (as the agent's container sees the host's cgroupfs, under /host) on the host."""
    return Path(path.removeprefix("/host"))


def not_restored(originals: dict[str, str]) -> list[str]:
    """The journalled files not back at their original value (a file gone needs nothing)."""
    wrong = []
    for path, original in originals.items():
        try:
            now = _normalize(Path(path).name, _host(path).read_text())
        except FileNotFoundError:
            continue
        if now != original:
            wrong.append(f"{path}: {now!r}, original {original!r}")
    return wrong
