"""Faults in Tidal's own objects and in what users type onto nodes: a NodeProfile deleted, the
policy deleted, garbage in the node annotations Tidal reads, Volcano's scheduler ConfigMap
edited by hand, the Node itself deleted and registered again. (Runs last of the suite: deleting
the policy puts the defaults in force for a few seconds, and the Node's deletion moves every
Tidal pod.)"""
import sys
import time
from io import StringIO
from pathlib import Path

import pytest
import yaml
from kubernetes.client.exceptions import ApiException
from ruamel.yaml import YAML

from tidal.api import qos
from tidal.api.policy import ColocationPolicy
from tidal_dev.lab.pytest_plugin import wait_for
from tidal_dev.testing.site import (REAL_NODE, container_cgroup, gone, journal_originals, micro_time, read, running,
                                    tidal_pods)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fault_helpers import (BE_QUOTA_US, POLICY, PROFILES, VOLCANO_CONFIGMAP, VOLCANO_KEY,  # noqa: E402
                           VOLCANO_NAMESPACE, batch_cpu, be_pod, evictions, now_utc,
                           pod_ready, tracebacks)

pytestmark = pytest.mark.lab


def _profile(custom):
    try:
        return custom.get_cluster_custom_object(*PROFILES, REAL_NODE)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def _status(custom, part: str) -> dict:
    """A part of the real node's NodeProfile status; {} while the profile, its status or the part
    is missing (the agent creates the profile, then writes its status; the master adds the
    breakdown)."""
    return (((_profile(custom) or {}).get("status") or {}).get(part)) or {}


def _agrees(core, profile) -> bool:
    """The profile's breakdown names the batch amounts the node carries."""
    oversell = ((profile or {}).get("status") or {}).get("oversell")
    if not oversell:
        return False
    allocatable = core.read_node(REAL_NODE).status.allocatable
    return (oversell["cpuMillicores"]["result"], oversell["memoryBytes"]["result"]) == (
        int(allocatable.get("kubernetes.io/batch-cpu", "0")), int(allocatable.get("kubernetes.io/batch-memory", "0")))


def test_node_profile_deleted_the_agent_recreates_it_and_the_master_republishes_the_breakdown(
        core, custom, workload, recovery):
    """The real node's NodeProfile deleted. Must hold: the agent creates it again with its report,
    the master publishes the breakdown into it again, and the node's batch resources agree with
    it (while it is missing the node may fall to 0 — fail safe — and come back); the BE pod is
    not evicted; no traceback."""
    uid = wait_for(lambda: _profile(custom), 60, "the real node's NodeProfile")["metadata"]["uid"]
    evicted_before = len(evictions(core, workload))
    started = now_utc()
    custom.delete_cluster_custom_object(*PROFILES, REAL_NODE)
    deleted = time.monotonic()

    def back():
        profile = _profile(custom)
        return (profile and profile["metadata"]["uid"] != uid and (profile.get("status") or {}).get("observedAt")
                and _agrees(core, profile) and batch_cpu(core) > 0 and profile)
    wait_for(back, 60, "the NodeProfile recreated, reported and its breakdown published", interval=0.25)
    recovery("NodeProfile deleted", time.monotonic() - deleted, "recreated by the agent, breakdown republished")
    assert len(evictions(core, workload)) == evicted_before
    assert not tracebacks(core, started)


def test_policy_deleted_the_defaults_apply_and_the_status_says_so(core, custom, workload, suite_policy, recovery):
    """The ColocationPolicy deleted. Must hold: every node runs the defaults, and says so in its
    NodeProfile (`status.policy.appliedGeneration` 0, `effective` the defaults); created again,
    the policy is in force again; no traceback."""
    policy = custom.get_cluster_custom_object(*POLICY)
    defaults = ColocationPolicy.from_spec({}).to_spec()
    started = now_utc()
    custom.delete_cluster_custom_object(*POLICY)
    deleted = time.monotonic()
    try:
        def on_defaults():
            status = (_profile(custom) or {}).get("status", {}).get("policy") or {}
            return status.get("appliedGeneration") == 0 and status.get("effective") == defaults and status
        wait_for(on_defaults, 30, "the node reporting the defaults in force", interval=0.25)
        recovery("policy deleted", time.monotonic() - deleted, "node reports appliedGeneration 0 and the defaults")
    finally:
        custom.create_cluster_custom_object(*POLICY[:3], {
            "apiVersion": policy["apiVersion"], "kind": policy["kind"], "metadata": {"name": "default"},
            "spec": suite_policy})
    again = custom.get_cluster_custom_object(*POLICY)["metadata"]["generation"]
    wait_for(lambda: _status(custom, "policy").get("appliedGeneration") == again, 30,
             "the node running the policy created again")
    _wait_breakdown_on(custom, suite_policy)  # the manager's side too, not only the agent's
    assert not tracebacks(core, started)


GARBAGE = {
    "colocation.tidal.io/oversell-types": "gpu,banana",
    "colocation.tidal.io/oversell-ratio-percent": "lots",
    "colocation.tidal.io/oversell-safety-margin-percent": "-5",
}


def _wait_breakdown_on(custom, spec: dict) -> dict:
    """The node's breakdown in its NodeProfile once the manager computes it with ``spec``'s cap
    (a cycle run while the policy was away leaves the defaults' cap for up to one interval)."""
    cap = spec["overselling"]["ratioPercent"]

    def on_policy():
        oversell = _status(custom, "oversell")
        return all((oversell.get(r) or {}).get("capPercent") == cap for r in ("cpuMillicores", "memoryBytes")) \
            and oversell
    return wait_for(on_policy, 60, f"the node's breakdown in its NodeProfile with the policy's cap {cap} %",
                    interval=0.5)


def test_garbage_node_annotations_are_named_in_the_status_and_change_nothing(core, custom, workload, suite_policy):
    """Garbage in the node annotations a user types (oversell types, ratio and margin
    overrides). Must hold: each is named with what is allowed in the node's NodeProfile
    breakdown, and nothing changes: both types still oversold, the policy's cap and margin in
    force, no eviction; removed, the notes go."""
    before = _wait_breakdown_on(custom, suite_policy)
    evicted_before = len(evictions(core, workload))
    core.patch_node(REAL_NODE, {"metadata": {"annotations": GARBAGE}})
    try:
        def named():
            oversell = _status(custom, "oversell")
            notes = " ".join(oversell.get("notes") or [])
            return all(key in notes for key in GARBAGE) and oversell
        oversell = wait_for(named, 30, f"notes naming each of {sorted(GARBAGE)} in the breakdown", interval=0.5)
        notes = oversell["notes"]
        assert any("oversell-types" in n and "cpu" in n and "memory" in n for n in notes), notes  # the allowed values
        assert any("oversell-ratio-percent" in n and "0-100" in n for n in notes), notes
        for resource in ("cpuMillicores", "memoryBytes"):
            assert oversell[resource]["capPercent"] == before[resource]["capPercent"]
            assert oversell[resource]["safetyMargin"] == before[resource]["safetyMargin"] or \
                oversell[resource]["allocatable"] != before[resource]["allocatable"]
        assert oversell["memoryBytes"]["result"] > 0 and batch_cpu(core) > 0   # both types still oversold
    finally:
        core.patch_node(REAL_NODE, {"metadata": {"annotations": dict.fromkeys(GARBAGE)}})
    wait_for(lambda: not any(key in " ".join(_status(custom, "oversell").get("notes") or [])
                             for key in GARBAGE), 30, "the notes gone with the annotations")
    assert len(evictions(core, workload)) == evicted_before


def _volcano_conf(core) -> tuple[str, dict]:
    text = core.read_namespaced_config_map(VOLCANO_CONFIGMAP, VOLCANO_NAMESPACE).data[VOLCANO_KEY]
    return text, yaml.safe_load(text)


def _plugins(conf: dict) -> dict[str, dict]:
    return {p["name"]: p for tier in conf.get("tiers") or [] for p in tier.get("plugins") or []}


def test_volcano_configmap_edited_by_hand_tidals_keys_come_back_and_the_users_stay(core, custom, suite_policy,
                                                                                    recovery):
    """Volcano's scheduler configuration (a ConfigMap, as in a cluster) edited by hand: Tidal's
    `usage` plugin deleted and the node-affinity weight it needs set to 0, while the user adds an
    argument to another plugin and a comment. Must hold: within the reconciler's 30 s (it also reads
    the ConfigMap on every change of the policy, the nodes or the NodeProfiles) the usage
    plugin is back with the policy's thresholds and the weight is positive again, and the
    user's argument and comment are still there; no traceback."""
    load_aware = ColocationPolicy.from_spec(custom.get_cluster_custom_object(*POLICY)["spec"]).load_aware_scheduling
    text, conf = _volcano_conf(core)
    assert _plugins(conf)["usage"]["arguments"]["thresholds"] == {
        "cpu": load_aware.cpu_threshold_percent, "mem": load_aware.memory_threshold_percent}
    round_trip = YAML()
    edited = round_trip.load(text)
    for tier in edited["tiers"]:
        tier["plugins"] = [p for p in tier["plugins"] if p["name"] != "usage"]
        for plugin in tier["plugins"]:
            if plugin["name"] == "nodeorder":
                plugin["arguments"]["nodeaffinity.weight"] = 0
            if plugin["name"] == "binpack":
                plugin["arguments"] = {"binpack.weight": 7}
    out = StringIO()
    round_trip.dump(edited, out)
    mine = "# the platform team's note: binpack weighs 7\n" + out.getvalue()
    started = now_utc()
    core.patch_namespaced_config_map(VOLCANO_CONFIGMAP, VOLCANO_NAMESPACE, {"data": {VOLCANO_KEY: mine}})
    edited_at = time.monotonic()

    def restored():
        text, conf = _volcano_conf(core)
        plugins = _plugins(conf)
        usage = plugins.get("usage")
        return (usage and usage["arguments"]["thresholds"] == {"cpu": load_aware.cpu_threshold_percent,
                                                              "mem": load_aware.memory_threshold_percent}
                and plugins["nodeorder"]["arguments"]["nodeaffinity.weight"] > 0 and (text, plugins))
    text, plugins = wait_for(restored, 45, "Tidal's keys back in Volcano's ConfigMap", interval=0.5)
    recovery("Volcano ConfigMap edited by hand", time.monotonic() - edited_at,
             "usage plugin and node-affinity weight restored (the reconciler reads it at least every 30 s)")
    assert plugins["binpack"]["arguments"] == {"binpack.weight": 7}
    assert "# the platform team's note: binpack weighs 7" in text
    assert not tracebacks(core, started)


MODE_LABELS = (qos.COLOCATION_NODE_LABEL, qos.OVERSUBSCRIPTION_NODE_LABEL)


def _node(core):
    try:
        return core.read_node(REAL_NODE)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def _ready(node) -> bool:
    return bool(node) and any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def test_node_deleted_and_registered_again_comes_back_off_and_is_switched_on_again(
        lab, core, custom, workload, image, recovery):
    """The Node object deleted, and the kubelet restarted so that it registers the node again (as
    after a node repair). Must hold: the node comes back as the kubelet registers it, with no
    Tidal label, taint or batch resource (its mode off: nothing of the old node carried over);
    the agent restores the node's cgroups (its journal empties) and the DaemonSet removes it; no
    Tidal pod restarts; nothing is evicted by Tidal. The BE pod on batch resources is refused by
    the kubelet's own admission when it restarts (the new node has no batch resources: the pod
    fails with OutOfkubernetes.io/batch-cpu or -memory; its Job would place it again), which is
    Kubernetes' rule, not Tidal's. Switched on again, the agent is back, the node reports and is oversold, and a BE
    pod created then gets its quota."""
    old = _node(core)
    labels = {k: v for k, v in old.metadata.labels.items() if k in MODE_LABELS}
    assert labels, old.metadata.labels
    restarts = {p.metadata.name: sum(s.restart_count for s in p.status.container_statuses or [])
                for app in ("tidal-manager", "tidal-console") for p in tidal_pods(core, app)}
    try:
        started = now_utc()
        core.delete_node(REAL_NODE)
        deleted = time.monotonic()
        lab.restart("kubelet")
        new = wait_for(lambda: (n := _node(core)) and n.metadata.uid != old.metadata.uid and _ready(n) and n, 120,
                       "the node registered again and Ready", interval=0.5)
        recovery("node deleted and registered again", time.monotonic() - deleted,
                 "from the deletion (kubelet restarted at once) to the node Ready again")
        assert not {k for k in new.metadata.labels if k.startswith("colocation.tidal.io/")}, new.metadata.labels
        assert not [t for t in new.spec.taints or [] if t.key.startswith("colocation.tidal.io/")]
        assert not {k for k in new.status.allocatable if k.startswith("kubernetes.io/batch-")}

        def agent_gone_node_restored():
            pods = core.list_namespaced_pod("tidal-system", label_selector="app.kubernetes.io/name=tidal-agent").items
            return not pods and not journal_originals(lab)  # terminating pods included: it restores on its way out
        wait_for(agent_gone_node_restored, 90, "the agent restored everything it had changed and is gone from "
                                               "the node, which is off")
        assert not {k for k in core.read_node(REAL_NODE).metadata.labels if k.startswith("colocation.tidal.io/")}
        be = wait_for(lambda: (p := core.read_namespaced_pod("transcode", workload)).status.phase != "Running" and p,
                      60, "the kubelet's verdict on the BE pod on batch resources the new node does not have")
        # the first batch resource the kubelet finds missing: batch-cpu or batch-memory
        assert be.status.phase == "Failed" and be.status.reason.startswith("OutOfkubernetes.io/batch-"), be.status
        assert not [e for e in evictions(core, workload)
                    if e.reason == "TidalEvicted" and e.involved_object.name == "transcode"]
    finally:  # whatever failed above, the node is switched on again for the tests after this one
        wait_for(lambda: _node(core), 120, "the node registered again")
        core.patch_node(REAL_NODE, {"metadata": {"labels": labels}})
    switched = time.monotonic()
    wait_for(lambda: [p for p in tidal_pods(core, "tidal-agent") if pod_ready(p)] or None, 120,
             "an agent pod ready again")

    def reporting():
        profile = _profile(custom) or {}
        observed = micro_time((profile.get("status") or {}).get("observedAt"))
        return observed is not None and observed >= started.replace(microsecond=0) and batch_cpu(core) >= 300 \
            and profile
    wait_for(reporting, 120, "the node reporting and oversold again")
    recovery("node switched on after its re-registration", time.monotonic() - switched,
             "labels set again to the agent reporting and batch-cpu published")
    core.delete_namespaced_pod("transcode", workload, grace_period_seconds=0)
    wait_for(gone(core, workload, "transcode"), 60, "the failed BE pod deleted")
    core.create_namespaced_pod(workload, be_pod("transcode", image))
    pod = wait_for(running(core, workload, "transcode"), 120, "a BE pod on the node again")
    wait_for(lambda: read(container_cgroup(pod, "cpu") / "cpu.cfs_quota_us") == BE_QUOTA_US, 60,
             "the new BE pod's quota from its batch-cpu")
    after = {p.metadata.name: sum(s.restart_count for s in p.status.container_statuses or [])
             for app in ("tidal-manager", "tidal-console") for p in tidal_pods(core, app)}
    assert after == restarts
    assert not tracebacks(core, started)
