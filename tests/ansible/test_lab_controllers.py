"""`tidal lab controllers`: Tidal's controllers as supervised lab processes (real processes)."""
import json
import sys

import pytest
import yaml

from tidal_dev.lab import controllers, processes
from tidal_dev.lab.cli import main as lab_main
from tidal_dev.lab.lab import Lab

SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]


@pytest.mark.parametrize("data, message", [
    ({"name": "x"}, "spec: must be a list"),
    ([{"name": "x"}], r"spec\[0\]: must have exactly the keys name and argv"),
    ([{"name": "Bad_Name", "argv": ["a"]}], r"spec\[0\].name: must be a lower-case DNS label"),
    ([{"name": "a", "argv": ["x"]}, {"name": "a", "argv": ["y"]}], r"spec\[1\].name: 'a' appears twice"),
    ([{"name": "a", "argv": []}], r"spec\[0\].argv: must be a non-empty list"),
    ([{"name": "a", "argv": "sleep 1"}], r"spec\[0\].argv: must be a non-empty list"),
])
def test_spec_errors_name_the_entry_and_the_rule(data, message):
    with pytest.raises(controllers.ControllerSpecError, match=message):
        controllers.parse_spec(data)


def test_up_starts_reuses_restarts_and_stops(tmp_path):
    try:
        first = controllers.up(tmp_path, {"manager": SLEEP, "agent": SLEEP})
        assert sorted(first.started) == ["agent", "manager"]
        records = {s["name"]: s for s in controllers.status(tmp_path)}
        assert all(s["running"] for s in records.values())
        again = controllers.up(tmp_path, {"manager": SLEEP, "agent": SLEEP})
        assert sorted(again.reused) == ["agent", "manager"] and not again.started
        changed = controllers.up(tmp_path, {"manager": SLEEP + ["--changed"]})
        assert changed.restarted == ["manager"] and changed.stopped == ["agent"]
        assert [s["name"] for s in controllers.status(tmp_path)] == ["manager"]
        assert (tmp_path / "logs" / "manager.log").exists()
    finally:
        stopped = controllers.down(tmp_path)
    assert stopped == ["manager"]
    assert controllers.status(tmp_path) == []


def test_a_dead_controller_is_started_again(tmp_path):
    try:
        controllers.up(tmp_path, {"agent": SLEEP})
        (record,) = controllers._load(tmp_path).values()
        processes.stop(record, timeout=5)
        assert controllers.up(tmp_path, {"agent": SLEEP}).started == ["agent"]
    finally:
        controllers.down(tmp_path)


def test_cli_up_status_down(tmp_path, capsys):
    spec = tmp_path / "spec.yml"
    spec.write_text(yaml.safe_dump([{"name": "agent", "argv": SLEEP}]))
    lab_dir = tmp_path / "lab"
    try:
        assert lab_main(["--dir", str(lab_dir), "controllers", "up", "--spec", str(spec)]) == 0
        assert "started: agent" in capsys.readouterr().out
        assert lab_main(["--dir", str(lab_dir), "controllers", "up", "--spec", str(spec)]) == 0
        assert capsys.readouterr().out.strip() == "reused: agent"
        assert lab_main(["--dir", str(lab_dir), "controllers", "status"]) == 0
        assert json.loads(capsys.readouterr().out)[0]["running"] is True
    finally:
        assert lab_main(["--dir", str(lab_dir), "controllers", "down"]) == 0
    assert "stopped: agent" in capsys.readouterr().out


def test_cli_rejects_a_bad_spec_and_starts_nothing(tmp_path, capsys):
    spec = tmp_path / "spec.yml"
    spec.write_text(yaml.safe_dump([{"name": "agent"}]))
    assert lab_main(["--dir", str(tmp_path / "lab"), "controllers", "up", "--spec", str(spec)]) == 2
    assert "must have exactly the keys name and argv" in capsys.readouterr().err
    assert controllers.status(tmp_path / "lab") == []


def test_lab_down_stops_the_controllers_first(tmp_path):
    controllers.up(tmp_path, {"agent": SLEEP})
    (record,) = controllers._load(tmp_path).values()
    stopped = Lab(tmp_path, log=lambda _: None).down()
    assert stopped == ["controller agent"]
    assert not processes.alive(record)
