"""`make flake-hunt` (tidal_dev.testing.flake_hunt): a real pytest run's JUnit report read back,
and the pass rate per test over runs, a flaky test told from a failing one."""
import json
import subprocess
import sys

from tidal_dev.testing.flake_hunt import format_table, main, outcomes, tally

FLAKY = '''
import os, pathlib
def test_passes():
    pass
def test_fails():
    assert False
def test_flaky(tmp_path_factory):
    marker = pathlib.Path(os.environ["FLAKE_MARKER"])
    first = not marker.exists()
    marker.write_text("x")
    assert first          # passes in the first run only
import pytest
@pytest.mark.skip(reason="needs a quiet machine")
def test_skipped():
    pass
'''


def test_outcomes_of_a_real_run(tmp_path):
    (tmp_path / "test_sample.py").write_text(FLAKY)
    report = tmp_path / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
                    str(tmp_path / "test_sample.py")], cwd=tmp_path, env={"FLAKE_MARKER": str(tmp_path / "m"),
                                                                          "PATH": ""}, capture_output=True)
    found = {name.rsplit("::", 1)[1]: outcome for name, outcome in outcomes(report).items()}
    assert found == {"test_passes": "passed", "test_fails": "failed", "test_flaky": "passed",
                     "test_skipped": "skipped"}


def test_tally_counts_a_missing_test_as_failed():
    runs = [{"a": "passed", "b": "skipped"}, {"a": "failed"}]
    assert tally(runs) == {"a": {"passed": 1, "failed": 1, "skipped": 0},
                           "b": {"passed": 0, "failed": 1, "skipped": 1}}
    assert "1/2" in format_table(tally(runs), 2)


def test_main_runs_n_sessions_and_ends_with_a_json_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "test_sample.py").write_text(FLAKY)
    monkeypatch.setenv("FLAKE_MARKER", str(tmp_path / "m"))
    monkeypatch.chdir(tmp_path)
    code = main(["--runs", "2", str(tmp_path / "test_sample.py")])
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rates = {name.rsplit("::", 1)[1]: counts for name, counts in last["tests"].items()}
    assert code == 1 and last["runs"] == 2
    assert rates["test_passes"] == {"passed": 2, "failed": 0, "skipped": 0}
    assert rates["test_flaky"] == {"passed": 1, "failed": 1, "skipped": 0}
    assert [n.rsplit("::", 1)[1] for n in last["flaky"]] == ["test_flaky"]
    assert [n.rsplit("::", 1)[1] for n in last["failing"]] == ["test_fails"]


def test_a_budget_ends_the_hunt_after_the_runs_it_holds_and_says_so(tmp_path, capsys, monkeypatch):
    (tmp_path / "test_sample.py").write_text(FLAKY)
    monkeypatch.setenv("FLAKE_MARKER", str(tmp_path / "m"))
    monkeypatch.chdir(tmp_path)
    kept = tmp_path / "reports"
    code = main(["--runs", "3", "--budget", "0.001", "--keep", str(kept), str(tmp_path / "test_sample.py")])
    out = capsys.readouterr().out.strip().splitlines()
    last = json.loads(out[-1])
    assert code == 1 and last["runs"] == 1 and last["planned"] == 3
    assert any(line.startswith("flake-hunt: run 2 not started") for line in out)
    rates = {name.rsplit("::", 1)[1]: counts for name, counts in last["tests"].items()}
    assert rates["test_flaky"] == {"passed": 1, "failed": 0, "skipped": 0}
    assert sorted(p.name for p in kept.iterdir()) == ["run-1.xml"]


def test_tally_reads_kept_reports_as_one_hunt(tmp_path, capsys, monkeypatch):
    (tmp_path / "test_sample.py").write_text(FLAKY)
    monkeypatch.setenv("FLAKE_MARKER", str(tmp_path / "m"))
    monkeypatch.chdir(tmp_path)
    main(["--runs", "2", "--keep", str(tmp_path / "first"), str(tmp_path / "test_sample.py")])
    main(["--runs", "1", "--keep", str(tmp_path / "second"), str(tmp_path / "test_sample.py")])
    capsys.readouterr()
    code = main(["--tally", str(tmp_path / "first"), str(tmp_path / "second" / "run-1.xml")])
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rates = {name.rsplit("::", 1)[1]: counts for name, counts in last["tests"].items()}
    assert code == 1 and last["runs"] == 3
    assert rates["test_flaky"] == {"passed": 1, "failed": 2, "skipped": 0}
    assert rates["test_skipped"] == {"passed": 0, "failed": 0, "skipped": 3}
