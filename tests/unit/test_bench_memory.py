# SPDX-License-Identifier: Apache-2.0
"""bench/memory.py's pure parts: OOM counting, progress and rate, metrics, the summary."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import memory  # noqa: E402

OOM_CONTROL = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"


@pytest.mark.parametrize("text, kills", [
    (OOM_CONTROL, 3),
    ("oom_kill_disable 0\nunder_oom 0\n", 0),  # kernels before 4.13 have no oom_kill line
])
def test_oom_kills_of_a_v1_cgroup(text, kills):
    assert memory.oom_kills(text) == kills


@pytest.mark.parametrize("request_, capacity, adj", [
    (int(2.75 * (1 << 30)), 6 << 30, 542),  # the bench's LS pod on its 6 GiB node
    (0, 6 << 30, 999),                      # no request: just below BestEffort's 1000
    (6 << 30, 6 << 30, 3),                  # all of the node: just above Guaranteed
    (7 << 30, 6 << 30, 3),
])
def test_kubelet_burstable_oom_score_adj(request_, capacity, adj):
    assert memory.kubelet_burstable_oom_score_adj(request_, capacity) == adj


@pytest.mark.parametrize("text, record", [
    ("12.500 1048576" + " " * 30, (12.5, 1048576)),
    ("", None),
    ("12.5", None),
    ("x 1", None),
])
def test_progress_records(text, record):
    assert memory.parse_progress(text) == record


@pytest.mark.parametrize("before, after, rate", [
    ((10.0, 0), (12.0, 200_000_000), 100.0),
    (None, (12.0, 1), 0.0),
    ((12.0, 5), (12.0, 9), 0.0),  # no time passed: no rate, not a division by zero
])
def test_rate_between_progress_records(before, after, rate):
    assert memory.rate_between(before, after) == rate


METRICS = """# HELP tidal_evictions_total Evictions
tidal_evictions_total{node="n",reason="psi",resource="memory"} 2.0
tidal_evictions_total{node="n",reason="watermark",resource="memory"} 1.0
tidal_agent_cgroup_writes_total{node="n",strategy="be-batch-resources"} 5.0
"""


def test_metric_totals_by_labels():
    assert memory.metric_total(METRICS, "tidal_evictions_total") == 3.0
    assert memory.metric_total(METRICS, "tidal_evictions_total", {"reason": "psi"}) == 2.0
    assert memory.metric_total(METRICS, "tidal_agent_cgroup_writes_total", {"strategy": "memory-reclaim"}) == 0.0


def run(p99, be=0.0, used=50.0, ooms=0, evictions=0, errors=0):
    return {"p50_ms": p99 / 4, "p99_ms": p99, "errors": errors, "be_mb_per_s": be, "node_mem_used_pct": used,
            "oom_kills": ooms, "evictions": evictions}


def test_summary_medians_spreads_and_summed_counters():
    runs = {
        "solo": [run(4.0), run(2.0), run(3.0)],
        "agent_solo": [run(3.0), run(3.3), run(3.6)],
        "be_solo": [run(0.0, be=1000.0), run(0.0, be=900.0), run(0.0, be=1100.0)],
        "no_isolation": [run(40.0, be=800.0, used=100.0, errors=1)] * 3,
        "k8s_default": [run(30.0, be=800.0, used=100.0, ooms=1)] * 3,
        "tidal": [run(3.3, be=600.0, used=92.0, evictions=1), run(3.0, be=650.0, used=93.0), run(3.6, be=0.0, used=91.0)],
    }
    summary = memory.summarise(runs)
    assert list(summary) == list(memory.TREATMENTS)
    assert summary["solo"]["p99_ms"] == 3.0 and summary["solo"]["p99_ms_spread"] == [2.0, 4.0]
    assert summary["solo"]["be_mb_per_s"] == 1000.0  # the BE job alone
    assert summary["tidal"]["be_mb_per_s"] == 600.0 and summary["tidal"]["be_mb_per_s_spread"] == [0.0, 650.0]
    assert summary["tidal"]["evictions"] == 1 and summary["k8s_default"]["oom_kills"] == 3
    assert summary["no_isolation"]["errors"] == 3
    assert all(set(memory.SUMMARY_KEYS) <= set(r) for r in summary.values())
    lines = memory.verdict({**summary, "tidal": {**summary["tidal"], "online_oom_kills": 0}})
    assert "tidal p99 1.10x solo (bar <= 1.2x): met" in lines
    assert "node memory used under tidal 92.0% (bar >= 90%): met" in lines
    assert "tidal p99 ratio 1.10 vs k8s default's 10.00 (bar <= half): met" in lines
    assert "BE throughput under tidal 60% of solo (bar >= 50%): met" in lines
    assert "the agent alone (no BE job): p99 1.10x solo; tidal 1.00x that" in lines
    # each round over the same round's solo: tidal 3.3/4, 3.0/2, 3.6/3
    assert (summary["tidal"]["p99_vs_solo"], summary["tidal"]["p99_vs_solo_min"],
            summary["tidal"]["p99_vs_solo_max"]) == (1.2, 0.825, 1.5)
    assert "p99_vs_solo" not in summary["solo"]
    assert ("per round, p99 over the same round's solo (median, min-max): agent_solo 1.20x (0.75-1.65), "
            "no_isolation 13.33x (10.00-20.00), k8s_default 10.00x (7.50-15.00), tidal 1.20x (0.82-1.50)") in lines


@pytest.mark.parametrize("latencies, p99", [
    ([], 0.0),
    ([5000], 5.0),
    (list(range(1, 101)), 0.099),          # rank round(0.99 x 99) = 98: the 99th smallest
    ([1000] * 2969 + [300000] * 31, 300.0),  # one 300-ms stall over 31 of 3,000 requests sets the p99
    ([1000] * 2970 + [300000] * 30, 1.0),
])
def test_pooled_p99_uses_loadgen_s_rank(latencies, p99):
    assert memory.pooled_p99(latencies) == p99


def test_the_verdict_reports_pooled_p99s_over_solo_s():
    summary = memory.summarise({name: [run(10.0)] for name in ("solo", "k8s_default", "tidal")})
    for name, value in (("solo", 20.0), ("k8s_default", 60.0), ("tidal", 30.0)):
        summary[name]["p99_pooled_ms"] = value
    assert ("p99 of all rounds' requests pooled, over solo's: solo 20.0 ms (1.00x), k8s_default 60.0 ms (3.00x), "
            "tidal 30.0 ms (1.50x)") in memory.verdict(summary)
    del summary["tidal"]["p99_pooled_ms"]
    assert not any("pooled" in line for line in memory.verdict(summary))


def test_the_idle_group_lead_is_summarised_after_the_treatments_and_runs_the_agent():
    names = ("solo", "k8s_default", "tidal", "tidal_idle_group")
    summary = memory.summarise({name: [run(10.0)] for name in names})
    assert list(summary) == ["solo", "k8s_default", "tidal", "tidal_idle_group"]
    assert "tidal_idle_group" in memory.AGENT_RUNS and "tidal_idle_group" not in memory.RUNS  # only when asked
    for name, value in zip(names, (20.0, 60.0, 30.0, 24.0)):
        summary[name]["p99_pooled_ms"] = value
    assert ("p99 of all rounds' requests pooled, over solo's: solo 20.0 ms (1.00x), k8s_default 60.0 ms (3.00x), "
            "tidal 30.0 ms (1.50x), tidal_idle_group 24.0 ms (1.20x)") in memory.verdict(summary)


def test_no_verdict_without_every_treatment():
    assert memory.verdict({"solo": run(1.0)}) == ["not every treatment measured: no verdict"]


def test_background_options_are_the_same_in_both_benches():
    import argparse

    import lab_background
    parser = argparse.ArgumentParser()
    lab_background.add_arguments(parser)
    args = parser.parse_args(["--background", "lab", "--background-rate", "20"])
    assert (args.background, args.background_rate) == ("lab", 20)
    assert parser.parse_args([]).background == "none"
    with pytest.raises(SystemExit):
        parser.parse_args(["--background", "busy"])
    # without a background nothing starts (no lab is touched) and the summary says so
    none = parser.parse_args([])
    started, report = lab_background.start(none, Path("/nonexistent/kubeconfig"), Path("/nonexistent"), print)
    assert (started, report) == (None, {"kind": "none"})
    assert lab_background.stop(None, report) == {"kind": "none"}


def test_disk_read_bytes_counts_a_read_the_page_cache_did_not_serve():
    """On this machine's disk: a child reading a file dropped from the page cache has read_bytes;
    once it is gone it counts 0."""
    import os
    import subprocess

    if not Path("/proc/self/io").exists():
        pytest.skip("no /proc/PID/io on this kernel (CONFIG_TASK_IO_ACCOUNTING)")
    path = Path("/var/tmp") / f"tidal-disk-read-{os.getpid()}"  # /tmp may be a tmpfs
    try:
        path.write_bytes(os.urandom(1 << 20))
        os.sync()
        memory.drop_file_cache(path)
        read = "import sys\nsys.stdin.readline()\nopen(sys.argv[1], 'rb').read()\nprint(flush=True)\nsys.stdin.readline()\n"
        with subprocess.Popen([sys.executable, "-c", read, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) as child:
            start = memory.disk_read_bytes([child.pid])
            child.stdin.write("go\n")
            child.stdin.flush()
            child.stdout.readline()
            first = memory.disk_read_bytes([child.pid]) - start
            child.stdin.write("done\n")
            child.stdin.flush()
        if first == 0:
            pytest.skip(f"{path.parent} is not on a block device (its reads are never counted)")
        assert first >= 1 << 19, first  # most of the 1 MiB came from the disk (readahead may add)
        assert memory.disk_read_bytes([child.pid]) == 0  # reaped: nothing to read
    finally:
        path.unlink(missing_ok=True)


def _sysfs_with_a_partitioned_disk(root: Path) -> Path:
    disk = root / "devices" / "virtual" / "block" / "sda"
    (disk / "sda1").mkdir(parents=True)
    (disk / "dev").write_text("8:0\n")
    (disk / "sda1" / "dev").write_text("8:1\n")
    (disk / "sda1" / "partition").write_text("1\n")
    (root / "dev" / "block").mkdir(parents=True)
    (root / "dev" / "block" / "8:0").symlink_to(disk)
    (root / "dev" / "block" / "8:1").symlink_to(disk / "sda1")
    return root


@pytest.mark.parametrize("device, disk", [
    (os.makedev(8, 0), "8:0"),  # a file system on the whole disk
    (os.makedev(8, 1), "8:0"),  # on a partition: the throttle takes its disk
])
def test_the_throttled_disk_is_the_whole_disk(tmp_path, device, disk):
    assert memory.whole_disk(device, _sysfs_with_a_partitioned_disk(tmp_path)) == disk


def test_a_work_directory_on_no_disk_is_refused_by_name(tmp_path):
    with pytest.raises(SystemExit, match="0:42 is not a block device.*--disk-read-mbps"):
        memory.whole_disk(os.makedev(0, 42), _sysfs_with_a_partitioned_disk(tmp_path))


def test_this_machine_s_work_directory_resolves_to_a_disk_its_sysfs_lists():
    st_dev = os.stat("/var/tmp").st_dev
    if not Path(f"/sys/dev/block/{os.major(st_dev)}:{os.minor(st_dev)}").exists():
        pytest.skip("/var/tmp is not on a block device here")
    disk = memory.whole_disk(st_dev)
    assert Path(f"/sys/dev/block/{disk}").exists()
    assert not Path(f"/sys/dev/block/{disk}/partition").exists()


@pytest.mark.parametrize("mb, iops, files", [
    (125, 3000, {"blkio.throttle.read_bps_device": "254:0 125000000",
                 "blkio.throttle.read_iops_device": "254:0 3000"}),
    (62.5, 0, {"blkio.throttle.read_bps_device": "254:0 62500000"}),
    (0, 500, {"blkio.throttle.read_iops_device": "254:0 500"}),
    (0, 0, {}),
])
def test_the_volume_s_throttle_files(mb, iops, files):
    assert memory.disk_throttle("254:0", mb, iops) == files


def test_the_threads_of_cgroups_come_from_their_tasks_files(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "tasks").write_text("10\n11\n12\n")
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "tasks").write_text("12\n13\n")
    (tmp_path / "unified").mkdir()  # a v2 directory has no tasks file: nothing from it
    assert memory.cgroup_tids([tmp_path / "cpu", tmp_path / "memory", tmp_path / "unified"]) == {10, 11, 12, 13}


def test_the_threads_of_a_process_are_its_proc_tasks():
    import threading
    started, done = threading.Event(), threading.Event()
    tid = []

    def run():
        tid.append(threading.get_native_id())
        started.set()
        done.wait(10)
    t = threading.Thread(target=run)
    t.start()
    try:
        assert started.wait(10)
        assert {os.getpid(), tid[0]} <= memory.process_tids(os.getpid())
    finally:
        done.set()
        t.join()
    assert memory.process_tids(2 ** 22 + 1) == set()  # above pid_max: no such process


def test_the_variants_run_the_agent_and_are_reported_beside_what_they_vary():
    assert set(memory.VARIANTS) <= set(memory.AGENT_RUNS) and not set(memory.VARIANTS) & set(memory.RUNS)
    assert "agent_solo_variant" in memory.ONLINE_ALONE and "tidal_variant" not in memory.ONLINE_ALONE
    names = ("solo", "k8s_default", "tidal", "agent_solo", "agent_solo_variant", "tidal_variant")
    summary = memory.summarise({name: [run(p99)] for name, p99 in zip(names, (2.0, 40.0, 2.4, 2.3, 2.1, 2.6))})
    assert list(summary)[-2:] == ["agent_solo_variant", "tidal_variant"]
    lines = memory.verdict(summary)
    assert ("agent_solo_variant: p99 1.05x solo (rounds 1.05x), agent_solo 1.15x solo (rounds 1.15x): "
            "the variant 0.91x agent_solo's") in lines
    assert "tidal_variant: p99 1.30x solo (rounds 1.30x), tidal 1.20x solo (rounds 1.20x): the variant 1.08x tidal's" \
        in lines
    del summary["tidal_variant"]
    assert not any(line.startswith("tidal_variant") for line in memory.verdict(summary))


def test_runs_of_a_round_are_every_run_or_those_named_with_solo_always():
    assert memory.runs_of_round(None, False, False) == memory.RUNS
    assert memory.runs_of_round(None, True, True) == (*memory.RUNS, *memory.LEADS, *memory.VARIANTS)
    assert memory.runs_of_round(["agent_solo_variant", "agent_solo"], False, True) == \
        ("solo", "agent_solo", "agent_solo_variant")
    with pytest.raises(ValueError, match="unknown or not asked for: agent_solo_variant, tidle; allowed: solo, "):
        memory.runs_of_round(["tidle", "agent_solo_variant"], False, False)


def test_the_agent_lines_come_without_every_treatment_too():
    summary = memory.summarise({"solo": [run(2.0)], "agent_solo": [run(2.2)], "agent_solo_variant": [run(2.0)]})
    assert memory.verdict(summary) == [
        "not every treatment measured: no verdict", "the agent alone (no BE job): p99 1.10x solo",
        "agent_solo_variant: p99 1.00x solo (rounds 1.00x), agent_solo 1.10x solo (rounds 1.10x): "
        "the variant 0.91x agent_solo's"]
