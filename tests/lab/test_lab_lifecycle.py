"""The lab's own life cycle, on a second lab directory so the session lab is untouched."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tidal_dev.lab.components import components

# The second lab runs without a real node: the session's lab has this machine's one.
COMPONENT_NAMES = [c.name for c in components(0)]

pytestmark = pytest.mark.lab

TIDAL = str(Path(sys.executable).with_name("tidal"))


def _tidal(lab_dir, *args, check=True):
    proc = subprocess.run([TIDAL, "lab", "--dir", str(lab_dir), *args], capture_output=True,
                          text=True, timeout=600)
    if check and proc.returncode != 0:
        pytest.fail(f"tidal lab {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def _running(pid):
    """True while `pid` runs; a zombie waiting for init to reap it has stopped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def _processes_mentioning(path):
    """PIDs of every process whose command line mentions `path` (orphans would)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(path) in cmdline:
                found.append(int(entry.name))
    return found


def test_up_reuses_down_stops_everything_and_state_survives_a_restart(lab, tmp_path_factory):
    lab_dir = tmp_path_factory.mktemp("second-lab")
    try:
        first = _tidal(lab_dir, "up", "--nodes", "1", "--real-nodes", "0", "--no-build")
        assert first.stdout.splitlines()[0].startswith("started: ")
        status = json.loads(_tidal(lab_dir, "status", "--json").stdout)
        assert status["healthy"] is True
        assert [c["name"] for c in status["components"]] == list(COMPONENT_NAMES)
        assert [n["name"] for n in status["nodes"]] == ["lab-node-0"] and status["nodes"][0]["ready"]
        pids = [c["pid"] for c in status["components"]]

        again = _tidal(lab_dir, "up", "--nodes", "1", "--real-nodes", "0", "--no-build")
        assert "started:" not in again.stdout
        assert again.stdout.splitlines()[0] == "reused: " + ", ".join(COMPONENT_NAMES)

        down = _tidal(lab_dir, "down")
        assert down.stdout.strip() == "stopped: " + ", ".join(reversed(COMPONENT_NAMES))
        assert not [pid for pid in pids if _running(pid)]
        assert _processes_mentioning(lab_dir) == []
        assert _tidal(lab_dir, "status", check=False).returncode == 1

        # etcd's data was kept: the node exists without being created again.
        restarted = _tidal(lab_dir, "up", "--nodes", "1", "--real-nodes", "0", "--no-build")
        assert "node lab-node-0" not in restarted.stdout.splitlines()[0]
        assert json.loads(_tidal(lab_dir, "status", "--json").stdout)["healthy"] is True
    finally:
        _tidal(lab_dir, "down", "--wipe", check=False)
    assert _processes_mentioning(lab_dir) == []
    assert not (lab_dir / "etcd").exists() and not (lab_dir / "lab.json").exists()


def test_a_second_lab_cannot_take_the_machines_real_node(lab, tmp_path_factory):
    if not int(lab._load_state().get("real_nodes", 0)):
        pytest.skip("the session's lab runs no real node, so there is nothing to take")
    lab_dir = tmp_path_factory.mktemp("third-lab")
    try:
        proc = _tidal(lab_dir, "up", "--nodes", "1", "--no-build", check=False)
        assert proc.returncode == 1
        assert f"the lab in {lab.dir} runs this machine's real node" in proc.stderr, proc.stderr
        assert _processes_mentioning(lab_dir) == []
    finally:
        _tidal(lab_dir, "down", "--wipe", check=False)
