"""The file-editing modules run end to end in-process (ansible-core's patch_module_args): what
they return, check mode and diff, and that a refused request leaves the file untouched. The
cluster modules run against the lab in the integration targets."""
import json
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from collection_tools import ROOT, fake_sysfs
from tidal_dev.testing.loop_device import free_loop_device
from ansible_collections.tidal.colocation.plugins.modules import (
    containerd_nri, disk_queue, kubelet_config, volcano_scheduler_config,
)

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


# -- disk_queue: a sysfs tree of files, then the machine's own sysfs ----------------------

@pytest.fixture
def sysfs(tmp_path) -> Path:
    return fake_sysfs(tmp_path / "sys", {"vda": (4096, 2147483647), "vdb": (64, 2147483647), "sda": (512, 32)},
                      others={"loop0": (1280, 1280), "dm-0": (4096, 2147483647)})


def _queue(sysfs: Path, name: str) -> int:
    return int((sysfs / "block" / name / "queue" / "max_sectors_kb").read_text())


def test_disk_queue_check_mode_reports_and_writes_nothing(sysfs, capsys):
    code, result = run_module(disk_queue, capsys, max_request_kib=64, sys_root=str(sysfs),
                              _ansible_check_mode=True, _ansible_diff=True)
    assert code == 0 and result["changed"]
    # every whole disk with a driver, none of the others; a disk whose hardware takes less keeps its limit
    assert result["before"] == {"sda": 512, "vda": 4096, "vdb": 64}
    assert result["after"] == {"sda": 32, "vda": 64, "vdb": 64}
    assert "vda max_sectors_kb=4096" in result["diff"]["before"] and "vda max_sectors_kb=64" in result["diff"]["after"]
    assert [_queue(sysfs, n) for n in ("vda", "sda", "loop0")] == [4096, 512, 1280]


def test_disk_queue_applies_once(sysfs, capsys):
    _, first = run_module(disk_queue, capsys, max_request_kib=64, sys_root=str(sysfs))
    _, second = run_module(disk_queue, capsys, max_request_kib=64, sys_root=str(sysfs))
    assert first["changed"] and not second["changed"]
    assert second["before"] == second["after"] == {"sda": 32, "vda": 64, "vdb": 64}
    assert [_queue(sysfs, n) for n in ("vda", "vdb", "sda", "loop0", "dm-0")] == [64, 64, 32, 1280, 4096]


def test_disk_queue_named_disks_only(sysfs, capsys):
    _, result = run_module(disk_queue, capsys, max_request_kib=128, disks=["dm-0"], sys_root=str(sysfs))
    assert result["changed"] and result["after"] == {"dm-0": 128}
    assert [_queue(sysfs, n) for n in ("vda", "dm-0")] == [4096, 128]


@pytest.mark.parametrize("args, named", [
    ({"max_request_kib": 2}, "max_request_kib"),
    ({"max_request_kib": -64}, "max_request_kib"),
    ({"max_request_kib": 64, "disks": ["vdz"]}, "vdz is not a block device"),
    ({"max_request_kib": 64, "disks": ["vda", "../../etc"]}, "disks"),
    ({"max_request_kib": 64, "disks": []}, "disks"),
])
def test_disk_queue_refusal_changes_nothing(sysfs, capsys, args, named):
    code, result = run_module(disk_queue, capsys, sys_root=str(sysfs), **args)
    assert code == 1 and named in result["msg"] and "nothing was changed" in result["msg"], result
    assert [_queue(sysfs, n) for n in ("vda", "vdb", "sda")] == [4096, 64, 512]


def test_disk_queue_unknown_disk_lists_the_disks(sysfs, capsys):
    _, result = run_module(disk_queue, capsys, max_request_kib=64, disks=["nvme0n1"], sys_root=str(sysfs))
    assert "the whole disks are: sda, vda, vdb" in result["msg"]


def test_disk_queue_check_mode_predicts_the_kernel_default(sysfs, capsys):
    _, result = run_module(disk_queue, capsys, max_request_kib=0, sys_root=str(sysfs), _ansible_check_mode=True)
    assert result["after"] == {"sda": 32, "vda": 4096, "vdb": 4096} and result["changed"]


def test_disk_queue_on_the_machines_sysfs(capsys):
    """The kernel's own files: the cap is set, a second run changes nothing, a value above the
    hardware's limit gets the limit, and 0 puts the kernel's default back."""
    name = free_loop_device()
    if name is None:
        pytest.skip("no free loop device with a writable queue/max_sectors_kb in /sys/block")
    queue = Path("/sys/block") / name / "queue"
    original = int((queue / "max_sectors_kb").read_text())
    hardware = int((queue / "max_hw_sectors_kb").read_text())
    try:
        _, first = run_module(disk_queue, capsys, max_request_kib=64, disks=[name])
        _, second = run_module(disk_queue, capsys, max_request_kib=64, disks=[name])
        assert first["after"] == {name: 64} and int((queue / "max_sectors_kb").read_text()) == 64
        assert (first["changed"], second["changed"]) == (original != 64, False)
        _, above = run_module(disk_queue, capsys, max_request_kib=hardware + 4, disks=[name])
        assert above["after"] == {name: hardware}
        code, reset = run_module(disk_queue, capsys, max_request_kib=0, disks=[name])
        if code == 1:
            assert "kernels before 6.9" in reset["msg"]
            pytest.skip("this kernel does not take 0 for max_sectors_kb")
        assert reset["after"] == {name: int((queue / "max_sectors_kb").read_text())}
        assert reset["after"][name] == min(hardware, disk_queue.DEFAULT_CAP_KIB)
    finally:
        (queue / "max_sectors_kb").write_text(str(original))
