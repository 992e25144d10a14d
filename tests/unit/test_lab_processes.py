import dataclasses
import sys
import time

from tidal_dev.lab import processes


def test_started_process_is_alive_until_stopped_and_its_log_is_kept(tmp_path):
    log = tmp_path / "logs" / "sleeper.log"
    record = processes.start("sleeper", [sys.executable, "-c",
                                         "import time; print('hello', flush=True); time.sleep(60)"], log)
    try:
        assert processes.alive(record)
        deadline = time.monotonic() + 10
        while "hello" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "hello" in log.read_text()
        assert processes.stop(record, timeout=5)
        assert not processes.alive(record)
    finally:
        processes.stop(record, timeout=1)


def test_a_reused_pid_is_not_mistaken_for_the_recorded_process(tmp_path):
    record = processes.start("sleeper", ["sleep", "60"], tmp_path / "s.log")
    try:
        impostor = dataclasses.replace(record, start_ticks=record.start_ticks + 1)
        assert not processes.alive(impostor)
        assert not processes.stop(impostor)  # never signals a process that is not ours
        assert processes.alive(record)
    finally:
        processes.stop(record)


def test_stop_kills_a_process_that_ignores_sigterm(tmp_path):
    script = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    log = tmp_path / "stubborn.log"
    record = processes.start("stubborn", [sys.executable, "-c", script], log)
    deadline = time.monotonic() + 10
    while "ready" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes.stop(record, timeout=0.5)
    assert not processes.alive(record)


def test_record_round_trips_through_json(tmp_path):
    record = processes.ProcessRecord("etcd", 42, 123, ("etcd", "--name", "lab"), "/x.log")
    assert processes.ProcessRecord.from_json(record.to_json()) == record
