"""Faults of the control plane under Tidal deployed as pods on the real node: the API server
away for 60 s, etcd restarted, the API server restarted. What must hold: the agent keeps
enforcing from what it knew, nothing is evicted because the API was away (and nothing twice),
no controller logs a traceback, and everything converges within 10 s of the API's return."""
import sys
import time
from pathlib import Path

import pytest

from tidal_dev.lab.pytest_plugin import wait_for
from tidal_dev.testing.site import REAL_NODE, container_cgroup, read

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fault_helpers import (BE_QUOTA_US, agent_health_url, api_answers, convergence, evictions, healthy,  # noqa: E402
                           now_utc, service_answers, service_ip, tracebacks)

pytestmark = pytest.mark.lab

OUTAGE_SECONDS = 60
CONVERGE_SECONDS = 10


def _converge(core, custom, recovery, fault: str, since, service: str) -> dict[str, float]:
    """Once the API server answers: poll until it answers through the `kubernetes` Service
    (`back`: the lab's kube-proxy routes to it again), then until every part of convergence
    holds; record the time it took from `back`, with when each part first held, and check it.
    (The Service routes again 0.1-53 s after kube-apiserver is back, measured 2026-11-26: the lab's
    kube-proxy and the API server's endpoint reconciler, not Tidal; hence the long deadline.)"""
    answered = time.monotonic()
    wait_for(lambda: service_answers(service), 120, f"the API server through the kubernetes Service {service}",
             interval=0.1)
    back = time.monotonic()
    first: dict[str, float] = {"service routes": round(back - answered, 1)}

    def check():
        parts = convergence(core, custom, since)
        for name, holds in parts.items():
            if holds:
                first.setdefault(name, round(time.monotonic() - back, 1))
        return all(parts.values())
    wait_for(check, 60, f"convergence after {fault} (parts held so far, s: {first})", interval=0.25)
    took = time.monotonic() - back
    recovery(fault, took, "after the Service routes again; " + ", ".join(f"{name} {seconds}s"
                                                                          for name, seconds in first.items()))
    assert took <= CONVERGE_SECONDS, f"{fault}: converged {took:.1f}s after the API server was back ({first})"
    return first


def test_api_server_stopped_60s_agent_keeps_enforcing_and_all_converges_within_10s(
        lab, core, custom, workload, recovery):
    """The API server stopped for 60 s. Must hold: the agent stays healthy (its rounds run) and
    keeps enforcing from its last known state — a BE quota set back by hand during the outage
    is put back without the API; the BE pod is not evicted (not once, so not twice); after the
    API server returns, the Lease is renewed, the node reported, its batch resources and the
    breakdown agree and every Tidal pod is ready within 10 s; no controller logs a traceback."""
    be = core.read_namespaced_pod("transcode", workload)
    quota = container_cgroup(be, "cpu") / "cpu.cfs_quota_us"
    health = agent_health_url(core)
    service = service_ip(core)
    evicted_before = len(evictions(core, workload))
    started = now_utc()
    assert lab.stop("kube-apiserver"), "the API server was not running"
    stopped = time.monotonic()
    try:
        assert not api_answers(core)
        # The agent enforces from what it knew: the BE quota undone by hand comes back.
        quota.write_text("-1")
        wait_for(lambda: read(quota) == BE_QUOTA_US, 20, "the agent to set the BE quota back without the API")
        put_back = time.monotonic() - stopped
        # The rest of the outage: the agent's rounds keep running the whole time (/healthz).
        unhealthy = []
        while time.monotonic() - stopped < OUTAGE_SECONDS:
            if not healthy(health):
                unhealthy.append(round(time.monotonic() - stopped, 1))
            time.sleep(1)   # the outage's length, not a wait for an outcome
        assert not unhealthy, f"the agent's /healthz failed during the outage at {unhealthy} s"
        assert read(quota) == BE_QUOTA_US
    finally:
        lab.restart("kube-apiserver")
    print(f"API server away {time.monotonic() - stopped:.0f}s; BE quota put back {put_back:.1f}s into the outage")
    _converge(core, custom, recovery, "API server stopped 60 s", started, service)
    after = core.read_namespaced_pod("transcode", workload)
    assert after.metadata.uid == be.metadata.uid and after.status.phase == "Running"
    assert len(evictions(core, workload)) == evicted_before, "a BE pod was evicted because the API was away"
    assert not tracebacks(core, started)


@pytest.mark.parametrize("component", ["etcd", "kube-apiserver"])
def test_control_plane_component_restarted_everything_converges_within_10s(
        lab, core, custom, workload, recovery, component):
    """etcd, or the API server, restarted. Must hold: everything converges within 10 s of the
    API server answering again (Lease renewed, node reported, batch resources and breakdown
    agree, every Tidal pod ready), the BE pod is the same pod still Running with its quota,
    nothing evicted, no traceback."""
    be = core.read_namespaced_pod("transcode", workload)
    evicted_before = len(evictions(core, workload))
    service = service_ip(core)
    started = now_utc()
    lab.restart(component)
    wait_for(lambda: api_answers(core), 60, "the API server answering")
    _converge(core, custom, recovery, f"{component} restarted", started, service)
    after = core.read_namespaced_pod("transcode", workload)
    assert after.metadata.uid == be.metadata.uid and after.status.phase == "Running"
    assert read(container_cgroup(after, "cpu") / "cpu.cfs_quota_us") == BE_QUOTA_US
    assert len(evictions(core, workload)) == evicted_before
    assert core.read_node(REAL_NODE).spec.unschedulable is not True
    assert not tracebacks(core, started)
