# SPDX-License-Identifier: Apache-2.0
"""An eviction that did not take effect (refused by a PodDisruptionBudget, failed, held back by the
node's mode) frees only the machine that chose it; one that may have taken effect keeps its
cooldown until the next round knows; a restarted agent's finished eviction starts the cooldown."""
from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from prometheus_client import CollectorRegistry
from tidal.agent.collector.cgroups import CgroupDriver, CgroupHierarchy, CgroupLayout, CgroupVersion
from tidal.agent.qos.engine import QoSEngine
from tidal.agent.qos.eviction_journal import EvictionIntent, EvictionJournal
from tidal.agent.qos.feature import Options
from tidal.agent.qos.node_actions import EvictOutcome
from tidal.agent.qos.node_qos import NodeQoS
from tidal.metrics import node_metrics, zero_evictions

sys.path.insert(0, str(Path(__file__).parent))  # the round's fakes from the neighbouring tests
from test_qos_eviction_journal import TERMINATING, Actions, _agent, _run  # noqa: E402
from test_qos_node_mode_round import CO, OV, Sample, pods  # noqa: E402
from test_qos_restore_pending import until  # noqa: E402

GiB = 1 << 30


def test_a_request_that_failed_and_did_not_take_effect_frees_the_machine(tmp_path):
    actions = Actions(tmp_path / "evictions-journal.json", fail=["evict"])
    agent = _agent(tmp_path, actions)
    agent.metrics = node_metrics(CollectorRegistry())
    zero_evictions(agent.metrics, agent.node)
    agent.observe_policy({"metadata": {"resourceVersion": "2"}, "spec": {
        "evictionWatermarks": {"dwellSeconds": 0, "cooldownSeconds": 600}}})

    async def rounds():
        agent.round(Sample(), pods(10))
        await until(lambda: not actions.fail)
        await until(lambda: not agent._work.qsize() and agent._unsettled)
        agent.round(Sample(), pods(10))  # the pod still runs: dropped, chosen again
        await until(lambda: len(actions.evictions) == 2)
    _run(agent, rounds)
    assert actions.evictions == [("ns", "batch"), ("ns", "batch")]
    assert _failures(agent) == {"api-error": 1.0, "disruption-budget": 0.0}


def _failures(agent) -> dict[str, float]:
    """The agent's tidal_eviction_failures_total by reason."""
    return {s.labels["reason"]: s.value for metric in agent.metrics.eviction_failures.collect()
            for s in metric.samples if s.name.endswith("_total")}


class PDBActions(Actions):
    def __init__(self, path, refuse):
        super().__init__(path)
        self.refuse = refuse

    async def evict(self, namespace, name):
        self.evictions.append((namespace, name))
        return EvictOutcome.BLOCKED if name in self.refuse else EvictOutcome.EVICTED


def _psi_agent(tmp_path, clock, label, cooldown=600):
    proc = tmp_path / "proc"
    (proc / "pressure").mkdir(parents=True)
    (proc / "pressure" / "cpu").write_text("some avg10=40.00 avg60=1.00 avg300=0.00 total=1\n")
    layout = CgroupLayout(CgroupHierarchy(CgroupVersion.V1, tmp_path, tmp_path), CgroupDriver.CGROUPFS)
    agent = NodeQoS("n1", layout, QoSEngine(tmp_path / "j.json", options=Options(proc_root=proc)),
                    {"psi": True}, node_cpus=4, clock=clock)
    agent.observe_policy({"metadata": {"resourceVersion": "1"}, "spec": {
        "beIsolation": {"cpuSuppression": {"enabled": False}, "cpuPriority": {"enabled": False},
                        "batchResources": {"enabled": False}},
        "features": {"memoryReclaim": {"enabled": False},
                     "psiInterference": {"enabled": True, "resources": ["cpu"], "cooldownSeconds": 60}},
        "evictionWatermarks": {"dwellSeconds": 0, "cooldownSeconds": cooldown}}})
    agent.observe_node({"metadata": {"labels": {label: "true"}},
                        "status": {"allocatable": {"cpu": "4", "memory": "16Gi"}}})
    return agent


def test_a_psi_eviction_refused_by_a_pdb_leaves_the_watermarks_cooldown_alone(tmp_path):
    """One round: the watermarks evict one BE pod, PSI picks another, which a PDB refuses. The
    watermarks' cooldown (600 s) stands: the next round evicts no third pod for them."""
    agent = _psi_agent(tmp_path, lambda: 100.0, CO)
    path = tmp_path / "evictions-journal.json"
    agent.evictions = EvictionJournal(path)
    be = pods(10)[1]
    bes = [be, dataclasses.replace(be, uid="be-2", name="batch-2"), dataclasses.replace(be, uid="be-3", name="batch-3")]
    actions = PDBActions(path, refuse={"batch-2"})
    agent.actions = actions
    agent.metrics = node_metrics(CollectorRegistry())

    async def rounds():
        first = agent.round(Sample(), [pods(10)[0], *bes])
        assert {d.pod_uid for d in first.decisions if d.pod_uid} == {"be", "be-2"}, first.decisions
        await until(lambda: len(actions.evictions) == 2 and not agent._work.qsize())
        running = [dataclasses.replace(p, terminating=True) if p.uid == "be" else p for p in [pods(10)[0], *bes]]
        second = agent.round(Sample(), running)
        assert not [d for d in second.decisions if getattr(d, "kind", "watermark") == "watermark" and d.pod_uid]
        await asyncio.sleep(0.05)
    _run(agent, rounds)
    assert ("ns", "batch-3") not in actions.evictions[:2] and actions.evictions.count(("ns", "batch")) == 1
    assert _failures(agent)["disruption-budget"] == actions.evictions.count(("ns", "batch-2")) >= 1


class Busy(Sample):
    node_cpu_millicores = 1000.0  # 25 %: below the CPU high watermark; only PSI acts

    def pod_usage(self, uid):
        return SimpleNamespace(cpu_millicores={"be": 900.0, "be-2": 100.0}.get(uid, 50.0), memory_bytes=GiB // 4)


def test_a_psi_eviction_held_back_by_the_nodes_mode_starts_no_cooldown_and_spares_no_pod(tmp_path):
    """Oversubscription only: evictions wait until the node's requests pass 100 %. PSI's choices
    while they do not must leave no trace: once they pass, PSI evicts at once, and the largest
    BE user, not the next one."""
    now = [100.0]
    agent = _psi_agent(tmp_path, lambda: now[0], OV)

    def pods_at(percent):
        ls, be = pods(percent)
        return [ls, be, dataclasses.replace(be, uid="be-2", name="batch-2", node_requests=(0, 0))]

    held = agent.round(Busy(), pods_at(80))
    assert held.eviction_allowed is False and not held.decisions
    now[0] = 101.0
    allowed = agent.round(Busy(), pods_at(120))
    assert allowed.eviction_allowed and [d.pod_uid for d in allowed.decisions if d.pod_uid] == ["be"]


def test_a_restarted_agents_finished_eviction_starts_the_cooldown_from_its_request(tmp_path):
    """An eviction requested 30 s before the agent restarted, found terminating: finished, and the
    watermarks' cooldown (600 s) runs from the request, so no second pod goes in the first round."""
    path = tmp_path / "evictions-journal.json"
    EvictionJournal(path).record(EvictionIntent("be", "ns", "batch", "memory above the high watermark",
                                                "memory", "watermark", time.time() - 30))
    actions = Actions(path)
    agent = _agent(tmp_path, actions)
    agent.observe_policy({"metadata": {"resourceVersion": "2"}, "spec": {
        "evictionWatermarks": {"dwellSeconds": 0, "cooldownSeconds": 600}}})
    other = dataclasses.replace(pods(10)[1], uid="be-2", name="batch-2")

    async def rounds():
        first = agent.round(Sample(), [*TERMINATING, other])
        assert not [d for d in first.decisions if d.pod_uid == "be-2"], first.decisions
        await until(lambda: actions.events)
    _run(agent, rounds)
    assert actions.evictions == []
