# SPDX-License-Identifier: Apache-2.0
"""bench/isolation.py's pure parts: the online server's CPU time per request, the summary."""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import isolation  # noqa: E402
import lab_background  # noqa: E402


@pytest.mark.parametrize("before, after, requests, expected", [
    # two threads ran 3 ms and 1 ms over 100 requests: 40 µs each
    ({1: 0, 2: 5_000_000}, {1: 3_000_000, 2: 6_000_000}, 100, 40.0),
    # a thread that came or went has no difference; a reused id (counter went back) neither
    ({1: 0, 2: 9_000_000}, {1: 2_000_000, 3: 7_000_000, 2: 10}, 100, 20.0),
    # nothing served: nothing to say
    ({1: 0}, {1: 1000}, 0, None),
])
def test_cpu_us_per_request(before, after, requests, expected):
    assert isolation.cpu_us_per_request(before, after, requests) == expected


def test_median_of_rounds_carries_the_cpu_per_request():
    runs = [{"p50_ms": 1, "p99_ms": p99, "achieved_rps": 500, "node_busy_pct": 90, "be_ops_per_s": 10,
             "loadavg1": 1, "ls_runqueue_delay_us": 50, "ls_cpu_us_per_request": cpu}
            for p99, cpu in ((2, 40.0), (3, 60.0), (9, 45.0))]
    out = isolation.median_of(runs)
    assert out["p99_ms"] == 3 and out["ls_cpu_us_per_request"] == 45.0


def test_steal_is_the_hypervisors_share_of_the_interval():
    before = isolation.steal_ticks("cpu  100 0 50 800 10 0 5 35 0 0\ncpu0 1 2 3\n")
    after = isolation.steal_ticks("cpu  160 0 70 900 10 0 5 55 0 0\n")
    assert before == (35, 1000) and after == (55, 1200)
    assert isolation.steal_pct(before, after) == 10.0  # 20 of 200 ticks
    assert isolation.steal_pct(after, after) is None
    with pytest.raises(ValueError, match="cpu line"):
        isolation.steal_ticks("intr 1 2 3\n")


def test_median_of_rounds_leaves_out_a_figure_some_round_lacks():
    runs = [{"p50_ms": 1, "p99_ms": 2, "achieved_rps": 500, "node_busy_pct": 90, "be_ops_per_s": 10,
             "loadavg1": 1, "ls_runqueue_delay_us": delay, "ls_cpu_us_per_request": 40.0, "steal_pct": 0.5}
            for delay in (50, None)]
    out = isolation.median_of(runs)
    assert "ls_runqueue_delay_us" not in out and out["steal_pct"] == 0.5


@pytest.mark.parametrize("text, expected", [
    ("tidal,k8s_default", ("solo", "k8s_default", "tidal")),
    ("solo, tidal_usage", ("solo", "tidal_usage")),
    (",".join(isolation.TREATMENTS), isolation.TREATMENTS),
])
def test_treatments_run_in_the_benchs_order_with_solo_first(text, expected):
    assert isolation.treatment_list(text) == expected


def test_the_slice_and_always_treatments_run_only_when_named():
    assert {"tidal_slice", "tidal_always"}.isdisjoint(isolation.DEFAULT_TREATMENTS)
    assert isolation.treatment_list("k8s_default,tidal,tidal_slice") == ("solo", "k8s_default", "tidal", "tidal_slice")
    assert isolation.treatment_list("tidal_always,tidal") == ("solo", "tidal", "tidal_always")
    assert "tidal_always" in isolation.TIDAL  # it runs the agent


def test_the_a_a_control_runs_only_when_named_listed_last_and_without_a_be_job():
    assert "solo_again" not in isolation.DEFAULT_TREATMENTS
    assert isolation.treatment_list("solo_again,tidal") == ("solo", "tidal", "solo_again")
    assert set(isolation.SOLO) == {"solo", "solo_again"} and not set(isolation.SOLO) & set(isolation.TIDAL)


def test_the_idle_group_lead_runs_only_when_named_without_the_agent():
    assert "be_idle_group" not in isolation.DEFAULT_TREATMENTS
    assert "be_idle_group" not in isolation.TIDAL and "be_idle_group" not in isolation.SOLO
    assert isolation.treatment_list("be_idle_group,tidal") == ("solo", "tidal", "be_idle_group")


def test_the_idle_group_is_an_idle_cgroup_at_the_cgroup_root(hierarchy, real):
    """``be_idle_group`` on this machine's cgroups: an idle cgroup (``cpu.idle = 1``) at the cpu
    hierarchy's root, named after the bench's cgroups; asked again (every round), the same one."""
    if not lab_background.CPU_ROOT.joinpath("cpu.idle").exists():
        pytest.skip(f"no cgroup v1 cpu hierarchy with cpu.idle at {lab_background.CPU_ROOT}")
    group = isolation.be_idle_group_dir(real)
    assert group == lab_background.CPU_ROOT / f"{real.name}-be"
    assert (group / "cpu.idle").read_text().strip() == "1"
    assert isolation.be_idle_group_dir(real) == group


def test_an_unknown_treatment_is_refused_naming_it_and_the_allowed_ones():
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        isolation.treatment_list("tidal,koordinator")
    assert "koordinator" in str(refused.value) and "k8s_default" in str(refused.value)


def test_a_policy_patch_is_a_json_object():
    patch = '{"beIsolation": {"cpuInterference": {"targetDelayMicroseconds": 25}}}'
    assert isolation.policy_patch(patch) == {"beIsolation": {"cpuInterference": {"targetDelayMicroseconds": 25}}}


@pytest.mark.parametrize("text, message", [("[1]", "must be a JSON object"), ("{beIsolation: 1}", "not valid JSON")])
def test_a_policy_patch_that_is_not_a_json_object_is_refused(text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        isolation.policy_patch(text)


@pytest.mark.parametrize("base, top, expected", [
    # nested fields merge, the top's win, the base's others stay
    ({"a": {"b": 1, "c": 2}, "d": 3}, {"a": {"b": 9}}, {"a": {"b": 9, "c": 2}, "d": 3}),
    # a null stays a null: the applied patch deletes that field (back to the policy's default)
    ({"a": {"b": None}}, {"a": {"c": False}}, {"a": {"b": None, "c": False}}),
    ({"a": {"b": 1}}, {"a": None}, {"a": None}),
    # a value over an object, an object over a value
    ({"a": {"b": 1}}, {"a": 5}, {"a": 5}),
    ({"a": 5}, {"a": {"b": 1}}, {"a": {"b": 1}}),
])
def test_overlay_puts_the_tops_fields_over_the_bases(base, top, expected):
    assert isolation.overlay(base, top) == expected


@pytest.mark.parametrize("patch, spec, expected", [
    # each field the variant names, at the stored value, or null where nothing is stored
    ({"features": {"cpuBurst": {"enabled": False}}}, {"features": {"cpuBurst": {"enabled": True}}},
     {"features": {"cpuBurst": {"enabled": True}}}),
    # nulls on the leaves, also below an object the spec lacks (see the test after the next)
    ({"features": {"cpuBurst": {"enabled": False}}}, {"evictionWatermarks": {"enabled": False}},
     {"features": {"cpuBurst": {"enabled": None}}}),
    ({"features": {"cpuBurst": {"enabled": False}, "memoryReclaim": {"enabled": False}}},
     {"features": {"cpuBurst": {"enabled": True}}},
     {"features": {"cpuBurst": {"enabled": True}, "memoryReclaim": {"enabled": None}}}),
    # a scalar stored where the variant puts an object: the scalar back
    ({"a": {"b": 1}}, {"a": 5}, {"a": 5}),
    ({}, {"a": 1}, {}),
])
def test_undo_patch_puts_back_what_the_variant_changes(patch, spec, expected):
    assert isolation.undo_patch(patch, spec) == expected


def test_the_variant_and_its_undo_leave_the_other_tidal_treatments_as_they_were():
    """Applied in turn as merge patches (RFC 7386), the variant's spec and then another Tidal
    treatment's leave the policy as that treatment alone would."""
    from tidal.api.policy import ColocationPolicy
    from tidal.console.policy_update import merge_patch

    stored = {"evictionWatermarks": {"enabled": False}, "features": {"cpuBurst": {"enabled": True}}}
    variant = {"features": {"cpuBurst": {"enabled": False}, "memoryReclaim": {"enabled": False}},
               "beIsolation": {"cpuInterference": {"enabled": False}}}
    undo = isolation.undo_patch(variant, stored)
    own = {"beIsolation": {"cpuInterference": {"enabled": True}}}
    after_variant = merge_patch(stored, isolation.overlay(own, variant))
    assert after_variant["features"] == {"cpuBurst": {"enabled": False}, "memoryReclaim": {"enabled": False}}
    assert after_variant["beIsolation"]["cpuInterference"] == {"enabled": False}  # the variant wins
    # the same policy the agent reads (an object emptied by the undo's leaf nulls is its defaults)
    after_other = merge_patch(after_variant, isolation.overlay(undo, own))
    assert ColocationPolicy.from_spec(after_other) == ColocationPolicy.from_spec(merge_patch(stored, own))
    assert after_other["features"] == {"cpuBurst": {"enabled": True}, "memoryReclaim": {}}


def test_the_undo_holds_where_the_other_treatments_own_patch_names_the_same_object():
    """A variant's object the stored spec lacks (here ``features``) that the treatment's own patch
    names too (``features.onlineSchedSlice``): a null for the whole object would give way to the
    treatment's object, and the variant's switches would stay off in every later treatment."""
    from tidal.api.policy import ColocationPolicy
    from tidal.console.policy_update import merge_patch

    stored = {"evictionWatermarks": {"enabled": False}}
    variant = {"features": {"cpuBurst": {"enabled": False}, "memoryReclaim": {"enabled": False}},
               "beIsolation": {"cpuPriority": {"enabled": False}}}
    own = {"beIsolation": {"cpuPriority": {"idleGroup": False}}, "features": {"onlineSchedSlice": {"enabled": False}}}
    after_variant = merge_patch(stored, isolation.overlay(own, variant))
    after_other = merge_patch(after_variant, isolation.overlay(isolation.undo_patch(variant, stored), own))
    assert after_other["features"] == {"cpuBurst": {}, "memoryReclaim": {}, "onlineSchedSlice": {"enabled": False}}
    assert after_other["beIsolation"] == {"cpuPriority": {"idleGroup": False}}
    assert ColocationPolicy.from_spec(after_other) == ColocationPolicy.from_spec(merge_patch(stored, own))
    assert isolation.cpu_priority_on(isolation.overlay(own, variant), {}) is False
    assert isolation.cpu_priority_on(isolation.overlay(isolation.undo_patch(variant, stored), own), {}) is True


@pytest.mark.parametrize("spec, policy, expected", [
    ({}, {}, True),  # the policy's default
    ({"beIsolation": {"cpuPriority": {"enabled": False}}}, {}, False),
    ({"beIsolation": {"cpuPriority": {"idleGroup": True}}}, {"beIsolation": {"cpuPriority": {"enabled": False}}}, False),
    ({"beIsolation": {"cpuPriority": {"enabled": True}}}, {"beIsolation": {"cpuPriority": {"enabled": False}}}, True),
    ({"beIsolation": None}, {}, True),
    ({"beIsolation": {"cpuPriority": None}}, {}, True),  # a null: back to the default
])
def test_cpu_priority_is_on_unless_the_treatment_or_the_policy_switches_it_off(spec, policy, expected):
    assert isolation.cpu_priority_on(spec, policy) is expected


OFF = {"beIsolation": {"cpuPriority": {"idleGroup": False}}}


@pytest.mark.parametrize("policy, spec, expected", [
    ({}, {}, True),  # the policy's default since 2026-12-05: the BE container in the BE idle group
    (OFF, {}, False),  # --policy turns it off for every Tidal treatment ...
    (OFF, {"beIsolation": {"cpuPriority": {"idleGroup": True}}}, True),  # ... the variant's patch over it
    ({}, {"beIsolation": {"cpuPriority": {"enabled": False}}}, False),  # not in force without BE CPU priority
    ({"beIsolation": {"cpuPriority": {"idleGroup": None}}}, {}, True),  # a null: back to the default
])
def test_the_be_container_is_in_the_idle_group_where_the_nri_plugin_would_create_it(policy, spec, expected):
    assert isolation.idle_group_asked(policy, spec) is expected


@pytest.mark.parametrize("argv", [["--treatments", "tidal_variant"],
                                  ["--variant-policy", '{"features": {"cpuBurst": {"enabled": false}}}'],
                                  ["--variant-agent-args", "--own-scheduling inherit"]])
def test_the_variant_treatment_and_what_it_changes_go_together(argv):
    ran = subprocess.run([sys.executable, str(Path(isolation.__file__)), *argv], capture_output=True, text=True)
    assert ran.returncode == 2 and ("--variant-policy or --variant-agent-args and the treatment tidal_variant go "
                                    "together") in ran.stderr


def test_the_daemons_go_to_a_system_slice_beside_kubepods_with_the_kubelets_shares(hierarchy, real, tmp_path):
    """``--daemons-cgroup system.slice`` on this machine's cgroups: the process moves to a
    ``system.slice`` beside ``kubepods`` (both below the bench's node cgroup), with the shares a
    systemd node and the kubelet give them; its children follow it there."""
    from tidal_dev.testing.local_kubelet import LocalKubelet
    if not lab_background.CPU_ROOT.joinpath("cpu.shares").exists():
        pytest.skip(f"no cgroup v1 cpu hierarchy at {lab_background.CPU_ROOT}")
    kubelet = LocalKubelet(real)
    daemon = subprocess.Popen(["sleep", "60"])
    try:
        system_slice = lab_background.daemons_in_system_slice(kubelet, real, pid=daemon.pid)
        kubepods = system_slice.parent / "kubepods"
        assert (kubepods / "cpu.shares").read_text().strip() == str(isolation.CPUS * 1024)
        assert (system_slice / "cpu.shares").read_text().strip() == "1024"
        cpu_line = next(line for line in Path(f"/proc/{daemon.pid}/cgroup").read_text().splitlines()
                        if ":cpu," in line or line.split(":")[1] == "cpu")
        assert cpu_line.endswith("/system.slice") and real.name in cpu_line
    finally:
        daemon.kill()
        daemon.wait()


def test_the_longest_wait_is_the_largest_increase_between_readings():
    import wait_sampler
    readings = [{1: 0, 2: 100}, {1: 200_000, 2: 100}, {1: 200_000, 2: 120_000_100, 3: 5},
                {1: 6_200_000, 2: 120_000_200, 3: 10}, {1: 6_200_000, 2: None}]
    # thread 1: waits of 0.2 ms and 6 ms; thread 2: one of 120 ms; thread 3 appeared late; a gone
    # thread's reading (None) counts nothing
    assert wait_sampler.longest_waits(readings) == {1: (6_000_000, 1), 2: (120_000_000, 1), 3: (5, 0)}


@pytest.mark.parametrize("slice_us, expected", [
    (0, ("none", "shares2", "pod_idle", "parent_idle", "pod_idle_quota", "outside_kubepods")),
    (100, ("none", "none_slice", "shares2", "shares2_slice", "pod_idle", "pod_idle_slice", "parent_idle",
           "pod_idle_quota", "outside_kubepods")),
])
def test_the_sched_probe_adds_a_sliced_twin_after_each_of_three_treatments(slice_us, expected):
    import sched_probe
    assert sched_probe.treatments(slice_us) == expected



@pytest.mark.parametrize("round_, order, expected", [
    (0, "fixed", ("solo", "k8s_default", "tidal")),
    (4, "fixed", ("solo", "k8s_default", "tidal")),
    (0, "rotate", ("solo", "k8s_default", "tidal")),
    (1, "rotate", ("k8s_default", "tidal", "solo")),
    (2, "rotate", ("tidal", "solo", "k8s_default")),
    (3, "rotate", ("solo", "k8s_default", "tidal")),
])
def test_the_order_turns_by_one_place_each_round(round_, order, expected):
    assert isolation.round_order(("solo", "k8s_default", "tidal"), round_, order) == expected


def test_rotated_over_as_many_rounds_as_treatments_each_runs_once_in_every_position():
    treatments = isolation.treatment_list("k8s_default,tidal,solo_again")
    rounds = [isolation.round_order(treatments, r, "rotate") for r in range(len(treatments))]
    for position in range(len(treatments)):
        assert sorted(r[position] for r in rounds) == sorted(treatments)


def test_an_unknown_order_is_refused_naming_the_allowed_ones():
    with pytest.raises(ValueError, match="allowed: balanced, rotate, fixed"):
        isolation.round_order(("solo",), 0, "shuffle")


def test_rotation_keeps_each_treatments_predecessor_within_a_round():
    """Why rotate is not the default: over every round, c only ever follows b."""
    rounds = [isolation.round_order(("a", "b", "c"), r, "rotate") for r in range(3)]
    predecessors = {row[i]: set() for row in rounds for i in range(3)}
    for row in rounds:
        for before, after in zip(row, row[1:]):
            predecessors[after].add(before)
    assert predecessors == {"a": {"c"}, "b": {"a"}, "c": {"b"}}


@pytest.mark.parametrize("n", range(1, 9))
def test_the_balanced_order_gives_every_treatment_every_predecessor_equally_often(n):
    from collections import Counter
    treatments = tuple(f"t{i}" for i in range(n))
    rows = [isolation.round_order(treatments, r, "balanced") for r in range(n if n % 2 == 0 else 2 * n)]
    for row in rows:
        assert sorted(row) == sorted(treatments)  # each round runs every treatment once
    pairs = Counter(pair for row in rows for pair in zip(row, row[1:]))
    expected_pairs = {(a, b) for a in treatments for b in treatments if a != b}
    assert set(pairs) == expected_pairs
    assert set(pairs.values()) <= {1 if n % 2 == 0 else 2}
    for position in range(n):  # and every position equally often
        assert set(Counter(row[position] for row in rows).values()) == {1 if n % 2 == 0 else 2}
    # the rows are used in turn
    assert isolation.round_order(treatments, len(rows), "balanced") == rows[0]


def test_the_balanced_order_of_four_treatments():
    assert [isolation.round_order(("solo", "k8s_default", "tidal", "idle"), r, "balanced") for r in range(4)] == [
        ("solo", "k8s_default", "idle", "tidal"), ("k8s_default", "tidal", "solo", "idle"),
        ("tidal", "idle", "k8s_default", "solo"), ("idle", "solo", "tidal", "k8s_default")]


def test_a_design_needs_a_treatment():
    import round_order
    with pytest.raises(ValueError, match="at least one treatment"):
        round_order.williams_rows(0)


def test_events_summary_counts_reasons_and_keeps_the_floor_s_changes():
    events = [("TidalBECPUThrottled", "online tasks waited 300 µs ..."),
              ("TidalBECPUReleased", "...: what BE adds is below the target (40 µs), BE CPU quota lifted "
                                     "(cpuSuppression.quota onInterference); the delay was not BE's: the delay "
                                     "with BE at its floor now stands for 240 s"),
              ("TidalBECPUThrottled", "online tasks waited 280 µs ..."),
              ("TidalBECPUReleased", "...: what BE adds is below the target (40 µs), BE CPU quota lifted"),
              ("TidalBECPUFloorRecheck", "online tasks waited 40 µs per scheduling slice, more than half the "
                                         "target (200 µs) below the 300 µs they waited with BE at its floor, 5 "
                                         "rounds in a row: the delay with BE at its floor now stands for 120 s, so "
                                         "it is measured again soon")]
    assert isolation.events_summary(events) == {
        "be_cpu_events": {"TidalBECPUThrottled": 2, "TidalBECPUReleased": 2, "TidalBECPUFloorRecheck": 1},
        "floor_stands_changes": ["the delay was not BE's: the delay with BE at its floor now stands for 240 s",
                                 "rounds well below the floor's delay: the delay with BE at its floor now stands "
                                 "for 120 s, so it is measured again soon"]}
    assert isolation.events_summary([]) == {"be_cpu_events": {}, "floor_stands_changes": []}


def test_halting_entries_count_every_idle_state_but_polling():
    import cpu_idle
    states = [("POLL", 0, 500), ("haltpoll", 1, 30), ("POLL", 0, 7), ("haltpoll", 1, 12), ("C6", 100, 4)]
    assert cpu_idle.halting_entries(states) == 46
    assert cpu_idle.halting_entries([]) == 0


def test_idle_states_are_read_per_cpu_and_a_cpu_going_offline_is_skipped(tmp_path):
    import cpu_idle
    for cpu, usage in (("cpu0", "30"), ("cpu1", "12"), ("cpu2", "gone")):
        for n, (name, latency, used) in enumerate((("POLL", "0", "9"), ("haltpoll", "1", usage))):
            state = tmp_path / cpu / "cpuidle" / f"state{n}"
            state.mkdir(parents=True)
            for f, v in (("name", name), ("latency", latency), ("usage", used)):
                (state / f).write_text(v + "\n")
    (tmp_path / "cpufreq").mkdir()  # not a CPU
    assert cpu_idle.halts(tmp_path) == 42
    assert cpu_idle.read_states(tmp_path / "nowhere") == []


def test_the_latency_hold_writes_its_request_and_closes_the_file(tmp_path):
    import struct

    import cpu_idle
    request = tmp_path / "cpu_dma_latency"
    request.write_bytes(b"")
    with cpu_idle.IdleLatencyHold(0, request) as hold:
        assert hold._fd is not None
        assert struct.unpack("i", request.read_bytes()) == (0,)
    assert hold._fd is None
    with pytest.raises(SystemExit, match="cannot hold a CPU latency request on .*nowhere"):
        with cpu_idle.IdleLatencyHold(0, tmp_path / "nowhere" / "file"):
            pass
    with pytest.raises(ValueError, match="≥ 0 µs"):
        cpu_idle.IdleLatencyHold(-1, request)


@pytest.mark.skipif(not Path("/dev/cpu_dma_latency").exists() or not Path("/sys/devices/system/cpu/cpu0/cpuidle").exists(),
                    reason="this machine has no PM QoS CPU latency file or no cpuidle")
def test_the_hold_keeps_this_machines_cpus_from_halting():
    import os
    import time

    import cpu_idle
    if os.geteuid() != 0:
        pytest.skip("holding a CPU latency request needs root")
    if not any(name != "POLL" and latency > 0 for name, latency, _ in cpu_idle.read_states()):
        pytest.skip("this machine's cpuidle has no halting state")
    with cpu_idle.IdleLatencyHold(0):
        # entries already under way when the request came may still finish: wait for a full
        # second without a new one, for 20 s at most
        deadline = time.monotonic() + 20
        while True:
            before = cpu_idle.halts()
            time.sleep(1)
            if cpu_idle.halts() == before:
                break
            assert time.monotonic() < deadline, "idle CPUs kept halting under a 0 µs latency request"
