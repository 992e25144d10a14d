"""The file-editing modules run end to end in-process (ansible-core's patch_module_args): what
they return, check mode and diff, and that a refused request leaves the file untouched. The
cluster modules run against the lab in the integration targets."""
import json
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from collection_tools import ROOT
from ansible_collections.tidal.colocation.plugins.modules import containerd_nri, kubelet_config, volcano_scheduler_config

NODE_ROOT = ROOT / "playbooks" / "files" / "node-root"


def run_module(module, capsys, **args):
    """Run a module's main() with `args`; returns (exit code, the JSON it printed)."""
    with patch_module_args(args), pytest.raises(SystemExit) as stop:
        module.main()
    return stop.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def kubelet_file(tmp_path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text((NODE_ROOT / "kubelet-config.yaml").read_text())
    return path


def test_kubelet_config_check_mode_reports_and_writes_nothing(kubelet_file, capsys):
    original = kubelet_file.read_text()
    code, result = run_module(kubelet_config, capsys, path=str(kubelet_file), cpu_manager_policy="static",
                              reserved_system_cpus="0", _ansible_check_mode=True, _ansible_diff=True)
    assert code == 0 and result["changed"] and result["cpu_manager_policy_changed"]
    assert "cpuManagerPolicy: static" in result["diff"]["after"]
    assert kubelet_file.read_text() == original


def test_kubelet_config_applies_once(kubelet_file, capsys):
    args = dict(path=str(kubelet_file), cpu_manager_policy="static", reserved_system_cpus="0",
                topology_manager_policy="restricted", mode="0640")
    _, first = run_module(kubelet_config, capsys, **args)
    _, second = run_module(kubelet_config, capsys, **args)
    assert first["changed"] and Path(first["backup_file"]).exists()
    assert not second["changed"] and not second["cpu_manager_policy_changed"]
    assert oct(kubelet_file.stat().st_mode & 0o777) == "0o640"


def test_kubelet_config_refusal_changes_nothing(kubelet_file, capsys):
    original = kubelet_file.read_text()
    code, result = run_module(kubelet_config, capsys, path=str(kubelet_file), cpu_manager_policy="static")
    assert code == 1 and "cpuManagerPolicy: static requires a CPU reservation" in result["msg"]
    assert kubelet_file.read_text() == original


def test_kubelet_config_missing_file_fails_naming_it(tmp_path, capsys):
    code, result = run_module(kubelet_config, capsys, path=str(tmp_path / "nope.yaml"), cpu_manager_policy="none")
    assert code == 1 and "nope.yaml does not exist" in result["msg"]


@pytest.mark.parametrize("source, version, schema", [
    ("containerd-config.toml", "containerd github.com/containerd/containerd v1.7.22 7f7fdf5", 2),
    ("containerd-config-v3.toml", "2.0.4", 3),
])
def test_containerd_nri_enables_nri_once(tmp_path, capsys, source, version, schema):
    path = tmp_path / "config.toml"
    path.write_text((NODE_ROOT / source).read_text())
    _, check = run_module(containerd_nri, capsys, path=str(path), containerd_version=version, _ansible_check_mode=True)
    assert check["changed"] and path.read_text() == (NODE_ROOT / source).read_text()
    _, first = run_module(containerd_nri, capsys, path=str(path), containerd_version=version, backup=False)
    _, second = run_module(containerd_nri, capsys, path=str(path), containerd_version=version)
    assert first["changed"] and first["schema"] == schema and first["after"]["disable"] is False
    assert not second["changed"]


def test_containerd_nri_refuses_a_bad_timeout(tmp_path, capsys):
    path = tmp_path / "config.toml"
    path.write_text("version = 2\n")
    code, result = run_module(containerd_nri, capsys, path=str(path), plugin_request_timeout="two seconds")
    assert code == 1 and "plugin_request_timeout: must be a Go duration" in result["msg"]
    assert path.read_text() == "version = 2\n"


def test_volcano_scheduler_config_file_mode(tmp_path, capsys):
    path = tmp_path / "volcano-scheduler.conf"
    path.write_text((ROOT / "devtools" / "tidal_dev" / "lab" / "assets" / "volcano-scheduler.conf").read_text())
    args = dict(path=str(path), actions=["allocate", "backfill", "preempt"],
                plugins=[{"name": "usage", "tier": 2, "settings": {"arguments": {"thresholds": {"cpu": 60, "mem": 60}}}}])
    _, first = run_module(volcano_scheduler_config, capsys, **args)
    _, second = run_module(volcano_scheduler_config, capsys, **args)
    assert first["changed"] and not second["changed"]
    assert first["actions"] == ["allocate", "backfill", "preempt"]
    assert first["configuration"]["tiers"][1]["plugins"][-1]["name"] == "usage"


def test_volcano_scheduler_config_path_and_configmap_are_exclusive(tmp_path, capsys):
    code, result = run_module(volcano_scheduler_config, capsys, path=str(tmp_path / "x"), configmap={"name": "x"})
    assert code == 1 and "mutually exclusive" in result["msg"]
