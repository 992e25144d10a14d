"""The leading tidal-manager killed (SIGKILL) in the middle of an oversell cycle."""
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tidal_dev.lab.pytest_plugin import wait_for
from tidal_dev.testing.site import REAL_NODE, container_cgroup, tidal_pods

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fault_helpers import POLICY, PROFILES, batch_cpu, evictions, lease, now_utc, tracebacks  # noqa: E402

pytestmark = pytest.mark.lab
RETRY_SECONDS = 2   # tidal.manager.leader's retry period: a waiting replica tries this often


def _kill(pod) -> list[int]:
    """SIGKILL every process of the pod's container (on the real node, they are this machine's)."""
    pids = [int(p) for p in (container_cgroup(pod, "cpu") / "cgroup.procs").read_text().split()]
    assert pids, f"no process in {pod.metadata.name}'s container"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    return pids


def _half_written(core, custom) -> dict:
    """Nodes whose NodeProfile breakdown names other batch amounts than the Node carries."""
    out = {}
    for profile in custom.list_cluster_custom_object(*PROFILES)["items"]:
        oversell = (profile.get("status") or {}).get("oversell")
        if not oversell:
            continue
        name = profile["metadata"]["name"]
        allocatable = core.read_node(name).status.allocatable
        carried = (int(allocatable.get("kubernetes.io/batch-cpu", "0")),
                   int(allocatable.get("kubernetes.io/batch-memory", "0")))
        published = (oversell["cpuMillicores"]["result"], oversell["memoryBytes"]["result"])
        if carried != published:
            out[name] = {"node": carried, "breakdown": published}
    return out


def test_leading_manager_sigkilled_mid_cycle_a_replica_leads_within_the_lease_and_nothing_is_half_written(
        core, custom, workload, recovery):
    """SIGKILL of the leading manager right as its oversell cycle patches the real node (a
    policy change makes the cycle rewrite it), and the state a kill between the Node's patch and
    the NodeProfile's leaves (the breakdown disagreeing with the node). Must hold: a manager
    leads again within the Lease duration of the kill; no node is left with a breakdown that
    disagrees with its batch amounts; no Event is duplicated; the BE pod is not evicted; no
    traceback in the surviving processes' logs."""
    spec = lease(core)
    leader = next(p for p in tidal_pods(core, "tidal-manager") if p.metadata.name == spec.holder_identity)
    before = batch_cpu(core)
    assert before > 0, "the real node offers no batch-cpu to change"
    evicted_before = len(evictions(core, workload))
    started = now_utc()
    # A cycle that rewrites the real node: a lower cap (ratioPercent) lowers its batch-cpu.
    custom.patch_cluster_custom_object(*POLICY, {"spec": {"overselling": {"ratioPercent": 80}}})
    try:
        wait_for(lambda: batch_cpu(core) != before, 60, f"the leader's cycle to patch {REAL_NODE} (from {before}m)",
                 interval=0.05)
        pids = _kill(leader)
        killed, killed_at = time.monotonic(), now_utc()
        # What a kill between the two writes leaves: the node patched, its breakdown not.
        profile = custom.get_cluster_custom_object(*PROFILES, REAL_NODE)
        stale = profile["status"]["oversell"]["cpuMillicores"]["result"] + 123
        custom.patch_cluster_custom_object_status(*PROFILES, REAL_NODE, {"status": {"oversell": {
            "cpuMillicores": {"result": stale}}}})
        assert REAL_NODE in _half_written(core, custom)

        def leads():
            current = lease(core)
            return current if current.renew_time and current.renew_time > killed_at else None
        new = wait_for(leads, spec.lease_duration_seconds + 2 * RETRY_SECONDS + 10, "a manager leading again",
                       interval=0.2)
        took = time.monotonic() - killed
        who = ("the other replica" if new.holder_identity != spec.holder_identity
               else "the killed pod's restarted container (same identity)")
        wait_for(lambda: not _half_written(core, custom), 30, "no half-written node", interval=0.5)
        finished = time.monotonic() - killed
        recovery("leading manager SIGKILLed mid-cycle", took,
                 f"leader again {took:.1f}s after the kill ({who}); half-written node finished {finished:.1f}s after")
        # The replica counts the Lease's duration on its own clock from when it saw the killed
        # leader's last renewal (up to one retry after it was written, as client-go's election:
        # the holder's renewTime is another machine's clock), and tries again every retry.
        assert took <= spec.lease_duration_seconds + 2 * RETRY_SECONDS, \
            f"no leader for {took:.1f}s after the kill (Lease duration {spec.lease_duration_seconds}s)"
        print(f"killed {spec.holder_identity} (pids {pids}); {who} leads {took:.1f}s later")
    finally:
        custom.patch_cluster_custom_object(*POLICY, {"spec": {"overselling": {"ratioPercent": 100}}})
    # No duplicate Events: each (object, reason, message) of Tidal's since the kill at most once.
    seen = {}
    for event in core.list_event_for_all_namespaces().items:
        stamp = event.last_timestamp or event.event_time or event.metadata.creation_timestamp
        if event.source and (event.source.component or "").startswith("tidal") and stamp and stamp >= started:
            key = (event.involved_object.kind, event.involved_object.name, event.reason, event.message)
            seen[key] = seen.get(key, 0) + (event.count or 1)
    assert not {k: n for k, n in seen.items() if n > 1}, seen
    assert len(evictions(core, workload)) == evicted_before
    managers = tidal_pods(core, "tidal-manager")
    assert len(managers) == 2 and lease(core).holder_identity in {p.metadata.name for p in managers}
    assert not tracebacks(core, started)
