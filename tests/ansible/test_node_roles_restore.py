"""kubelet_cpu_manager and containerd_nri keep the untouched configuration file as
`<file>.tidal-original` (state=present) and put it back byte for byte (state=absent), restarting
the service only when that changed the file; playbooks/uninstall.yml does it on every node.

The roles run with ansible-playbook on localhost into a temporary node root. The services are a
stand-in command (as `tidal lab stop|restart` stands in for systemd on the lab's real node) that
records each call with what the kubelet would see at that moment; nothing here needs the lab.
"""
from __future__ import annotations

import json
import re
import stat
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from collection_tools import ROOT, play_locally, run, tool

NODE_FILES = ROOT / "playbooks" / "files" / "node-root"
KUBELET_CONFIG = "var/lib/kubelet/config.yaml"
CHECKPOINT = "var/lib/kubelet/cpu_manager_state"
CONTAINERD_CONFIG = "etc/containerd/config.toml"
NRI_SOCKET = "var/run/nri/nri.sock"
# Bytes a structural edit would not keep as they are: a comment with trailing blanks, no final
# newline. Only a byte-for-byte restore gives them back.
ODD_BYTES = "# written by hand  \t\n"
# Not 0644 (what containerd_nri sets): the restore must give back the mode too.
ORIGINAL_MODE = 0o640

FAKE_SERVICE = """\
#!{python}
# Stand-in for systemd (`tidal lab stop|restart` on the lab): records its arguments, the kubelet
# configuration's hash and whether the CPU manager checkpoint exists at that moment.
import hashlib, json, os, sys
root = os.environ["FAKE_SERVICE_ROOT"]
def sha(path):
    try:
        with open(os.path.join(root, path), "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except FileNotFoundError:
        return None
with open(os.environ["FAKE_SERVICE_CALLS"], "a") as calls:
    calls.write(json.dumps({{"argv": sys.argv[1:], "kubelet_config": sha({kubelet!r}),
                            "containerd_config": sha({containerd!r}),
                            "checkpoint": os.path.exists(os.path.join(root, {checkpoint!r}))}}) + "\\n")
"""

ROLES = {
    "kubelet_cpu_manager": KUBELET_CONFIG,
    "containerd_nri": CONTAINERD_CONFIG,
}


def sha256(data: bytes) -> str:
    import hashlib
    return hashlib.sha256(data).hexdigest()


class Node:
    """A temporary node root with kubeadm's kubelet configuration, the containerd 1.7 package's
    config.toml and a CPU manager checkpoint of the none policy; runs the roles against it."""

    def __init__(self, tmp_path: Path, kubelet_text: str):
        self.tmp = tmp_path
        self.root = tmp_path / "root"
        self.originals = {
            KUBELET_CONFIG: (ODD_BYTES + kubelet_text.rstrip("\n")).encode(),
            CONTAINERD_CONFIG: (ODD_BYTES + (NODE_FILES / "containerd-config.toml").read_text().rstrip("\n")).encode(),
        }
        for relative, data in self.originals.items():
            path = self.root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            path.chmod(ORIGINAL_MODE)
        self.write_checkpoint()
        # containerd_nri waits for the NRI socket after a restart that enabled NRI.
        (self.root / NRI_SOCKET).parent.mkdir(parents=True)
        (self.root / NRI_SOCKET).write_text("")
        self.service = tmp_path / "service"
        self.service.write_text(FAKE_SERVICE.format(python=sys.executable, kubelet=KUBELET_CONFIG,
                                                    containerd=CONTAINERD_CONFIG, checkpoint=CHECKPOINT))
        self.service.chmod(0o755)
        self.calls_file = tmp_path / "calls.jsonl"

    def write_checkpoint(self) -> None:
        (self.root / CHECKPOINT).write_text('{"policyName":"none","defaultCpuSet":"","checksum":1353318690}')

    def path(self, relative: str) -> Path:
        return self.root / relative

    def original_copy(self, relative: str) -> Path:
        return self.root / (relative + ".tidal-original")

    def role_vars(self, manage_service: bool) -> dict:
        return {
            "kubelet_cpu_manager_root": str(self.root),
            "kubelet_cpu_manager_reserved_system_cpus": "0",
            "kubelet_cpu_manager_manage_service": manage_service,
            "kubelet_cpu_manager_wait_ready": False,
            "kubelet_cpu_manager_service_commands": {
                "stop": [str(self.service), "kubelet", "stop"],
                "restart": [str(self.service), "kubelet", "restart"],
            },
            "containerd_nri_root": str(self.root),
            "containerd_nri_version": "containerd github.com/containerd/containerd v1.7.22 7f7fdf5",
            "containerd_nri_manage_service": manage_service,
            "containerd_nri_socket_timeout": 5,
            "containerd_nri_service_commands": {"restart": [str(self.service), "containerd", "restart"]},
        }

    def run(self, state: str, *options: str, manage_service: bool = True, roles=tuple(ROLES)):
        """ansible-playbook of `roles` with `<role>_state: state`; returns the process with
        `.recap` (localhost's counts), `.calls` (the service calls of this run) and `.output`."""
        self.calls_file.write_text("")
        proc = play_locally(self.tmp, {
            "name": "Node roles",
            "vars": self.role_vars(manage_service),
            "roles": [{"role": f"tidal.colocation.{role}", "vars": {f"{role}_state": state}} for role in roles],
        }, *options, FAKE_SERVICE_ROOT=str(self.root), FAKE_SERVICE_CALLS=str(self.calls_file))
        return finish(proc, self.calls_file, "localhost")


def finish(proc, calls_file: Path, host: str):
    proc.output = proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.output[-8000:]
    match = re.search(rf"^{re.escape(host)}\s+:\s+(.*)$", proc.stdout, re.MULTILINE)
    assert match, proc.output[-8000:]
    proc.recap = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", match.group(1))}
    proc.calls = [json.loads(line) for line in calls_file.read_text().splitlines()]
    return proc


def kubeadm_kubelet_config(**overrides) -> str:
    text = (NODE_FILES / "kubelet-config.yaml").read_text()
    for key, value in overrides.items():
        text += f"\n{key}: {value}"
    return text


@pytest.fixture
def node(tmp_path, dependency_collections):
    return Node(tmp_path, kubeadm_kubelet_config())


# -- present ------------------------------------------------------------------------------------

@pytest.mark.parametrize("role", list(ROLES))
def test_present_keeps_the_untouched_original_once(node, role):
    relative = ROLES[role]
    node.run("present", manage_service=False, roles=(role,))
    copy = node.original_copy(relative)
    assert copy.read_bytes() == node.originals[relative]
    assert stat.S_IMODE(copy.stat().st_mode) == ORIGINAL_MODE
    assert node.path(relative).read_bytes() != node.originals[relative], "the role changed nothing"

    # A second run (the file is Tidal's now, and changed again) does not overwrite the original.
    converged = node.path(relative).read_bytes()
    again = node.run("present", manage_service=False, roles=(role,))
    assert again.recap["changed"] == 0, again.output[-4000:]
    assert node.path(relative).read_bytes() == converged
    assert copy.read_bytes() == node.originals[relative]


@pytest.mark.parametrize("role", list(ROLES))
def test_present_keeps_no_copy_of_a_file_it_does_not_change(node, role):
    """A file already as the role wants it (say, converged before Tidal kept originals) is not
    Tidal's change to undo: no copy, and state=absent leaves it alone."""
    relative = ROLES[role]
    node.run("present", manage_service=False, roles=(role,))
    node.original_copy(relative).unlink()
    converged = node.path(relative).read_bytes()
    again = node.run("present", manage_service=False, roles=(role,))
    assert again.recap["changed"] == 0, again.output[-4000:]
    assert not node.original_copy(relative).exists()
    absent = node.run("absent", manage_service=False, roles=(role,))
    assert absent.recap["changed"] == 0 and "nothing to restore" in absent.output
    assert node.path(relative).read_bytes() == converged


def test_present_in_check_mode_keeps_no_copy(node):
    proc = node.run("present", "--check", manage_service=False)
    assert proc.recap["changed"] > 0
    for relative in ROLES.values():
        assert not node.original_copy(relative).exists()
        assert node.path(relative).read_bytes() == node.originals[relative]


# -- absent -------------------------------------------------------------------------------------

@pytest.mark.parametrize("role", list(ROLES))
def test_absent_restores_the_original_byte_for_byte_and_removes_the_copy(node, role):
    relative = ROLES[role]
    node.run("present", manage_service=False, roles=(role,))
    proc = node.run("absent", manage_service=False, roles=(role,))
    assert proc.recap["changed"] >= 2  # the file put back, the copy removed
    assert node.path(relative).read_bytes() == node.originals[relative]
    assert stat.S_IMODE(node.path(relative).stat().st_mode) == ORIGINAL_MODE
    assert not node.original_copy(relative).exists()
    assert proc.calls == []  # manage_service false: nothing to restart (the lab's kwok nodes)


@pytest.mark.parametrize("role", list(ROLES))
def test_absent_without_a_kept_original_changes_nothing_and_says_so(node, role):
    relative = ROLES[role]
    converged = b"# converged before Tidal kept originals\n" + node.originals[relative]
    node.path(relative).write_bytes(converged)
    proc = node.run("absent", roles=(role,))
    assert proc.recap["changed"] == 0, proc.output[-4000:]
    assert node.path(relative).read_bytes() == converged
    assert proc.calls == []
    assert "nothing to restore" in proc.output


def test_absent_twice_changes_nothing_the_second_time(node):
    node.run("present")
    first = node.run("absent")
    second = node.run("absent")
    assert first.recap["changed"] > 0
    assert second.recap["changed"] == 0, second.output[-4000:]
    assert second.calls == []
    for relative, data in node.originals.items():
        assert node.path(relative).read_bytes() == data


def test_absent_in_check_mode_reports_and_changes_nothing(node):
    node.run("present")
    converged = {relative: node.path(relative).read_bytes() for relative in ROLES.values()}
    proc = node.run("absent", "--check", "--diff")
    assert proc.recap["changed"] > 0
    assert proc.calls == []  # commands do not run in check mode
    for relative in ROLES.values():
        assert node.path(relative).read_bytes() == converged[relative]
        assert node.original_copy(relative).exists()


# -- restarts -----------------------------------------------------------------------------------

# The original's cpuManagerPolicy against Tidal's static: a different policy needs the kubelet
# stopped, the checkpoint of Tidal's policy removed and the kubelet started again; the same policy
# only a restart, the checkpoint kept.
@pytest.mark.parametrize(("original_overrides", "kubelet_calls", "checkpoint_removed"), [
    pytest.param({}, [["kubelet", "stop"], ["kubelet", "restart"]], True, id="none-policy-original"),
    pytest.param({"cpuManagerPolicy": "none"}, [["kubelet", "stop"], ["kubelet", "restart"]], True,
                 id="explicit-none-original"),
    pytest.param({"cpuManagerPolicy": "static", "reservedSystemCPUs": '"0"', "topologyManagerPolicy": "none"},
                 [["kubelet", "restart"]], False, id="static-policy-original"),
])
def test_restore_runs_the_service_commands_exactly_once(tmp_path, dependency_collections, original_overrides,
                                                        kubelet_calls, checkpoint_removed):
    node = Node(tmp_path, kubeadm_kubelet_config(**original_overrides))
    node.run("present")
    node.write_checkpoint()  # the checkpoint the kubelet wrote with Tidal's policy
    proc = node.run("absent")
    argv = [call["argv"] for call in proc.calls]
    assert argv == kubelet_calls + [["containerd", "restart"]], proc.output[-4000:]
    by_argv = {tuple(call["argv"]): call for call in proc.calls}
    original_kubelet = sha256(node.originals[KUBELET_CONFIG])
    original_containerd = sha256(node.originals[CONTAINERD_CONFIG])
    if ("kubelet", "stop") in by_argv:
        # stopped with Tidal's configuration still in place
        assert by_argv["kubelet", "stop"]["kubelet_config"] != original_kubelet
    # started again with the original and, after a policy change, without the old checkpoint
    assert by_argv["kubelet", "restart"]["kubelet_config"] == original_kubelet
    assert by_argv["kubelet", "restart"]["checkpoint"] is not checkpoint_removed
    assert by_argv["containerd", "restart"]["containerd_config"] == original_containerd
    assert node.path(CHECKPOINT).exists() is not checkpoint_removed


def test_nothing_restarts_when_the_original_is_already_in_place(node):
    node.run("present")
    for relative, data in node.originals.items():  # someone put the files back by hand
        node.path(relative).write_bytes(data)
        node.path(relative).chmod(ORIGINAL_MODE)
    proc = node.run("absent")
    assert proc.calls == []
    assert proc.recap["changed"] == 2  # the two copies removed, nothing else
    for relative in ROLES.values():
        assert not node.original_copy(relative).exists()


# -- playbooks/uninstall.yml --------------------------------------------------------------------

def test_uninstall_puts_every_nodes_files_back(tmp_path, dependency_collections):
    """uninstall.yml's nodes play with an inventory shaped like inventories/lab/hosts.yml: a
    kwok-like node (manage_service false, files under its root) and a real-like one (absolute
    paths, root /, service commands); no `lab` host, so the play that talks to the cluster has
    nothing to run on."""
    fake = Node(tmp_path / "fake", kubeadm_kubelet_config())
    real = Node(tmp_path / "real", kubeadm_kubelet_config())
    for node in (fake, real):
        node.run("present", manage_service=False)
        node.write_checkpoint()
    real_vars = {
        "kubelet_cpu_manager_root": "/",
        "kubelet_cpu_manager_config_path": str(real.path(KUBELET_CONFIG)),
        "kubelet_cpu_manager_state_file": str(real.path(CHECKPOINT)),
        "kubelet_cpu_manager_manage_service": True,
        "kubelet_cpu_manager_wait_ready": False,
        "kubelet_cpu_manager_service_commands": real.role_vars(True)["kubelet_cpu_manager_service_commands"],
        "containerd_nri_root": "/",
        "containerd_nri_config_path": str(real.path(CONTAINERD_CONFIG)),
        "containerd_nri_manage_service": True,
        "containerd_nri_service_commands": real.role_vars(True)["containerd_nri_service_commands"],
    }
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"nodes": {
        "hosts": {"fake-node": {"kubelet_cpu_manager_root": str(fake.root), "containerd_nri_root": str(fake.root),
                                "kubelet_cpu_manager_manage_service": False,
                                "containerd_nri_manage_service": False},
                  "real-node": real_vars},
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"},
    }}))

    def uninstall():
        real.calls_file.write_text("")
        proc = run([tool("ansible-playbook"), "-i", str(inventory), "playbooks/uninstall.yml"], ROOT, timeout=300,
                   FAKE_SERVICE_ROOT=str(real.root), FAKE_SERVICE_CALLS=str(real.calls_file))
        finish(proc, real.calls_file, "real-node")
        fake_recap = re.search(r"^fake-node\s+:\s+(.*)$", proc.stdout, re.MULTILINE)
        proc.fake_changed = int(re.search(r"changed=(\d+)", fake_recap.group(1)).group(1))
        return proc

    first = uninstall()
    assert [call["argv"] for call in first.calls] == [["kubelet", "stop"], ["kubelet", "restart"],
                                                      ["containerd", "restart"]]
    for node in (fake, real):
        for relative, data in node.originals.items():
            assert node.path(relative).read_bytes() == data
            assert not node.original_copy(relative).exists()
        assert not node.path(CHECKPOINT).exists()
    second = uninstall()
    assert second.recap["changed"] == 0 and second.fake_changed == 0, second.output[-4000:]
    assert second.calls == []


def test_uninstall_play_runs_every_node_role_with_state_absent_on_the_nodes():
    plays = yaml.safe_load((ROOT / "playbooks" / "uninstall.yml").read_text())
    (nodes_play,) = [play for play in plays if play["hosts"] == "nodes"]
    assert plays.index(nodes_play) == len(plays) - 1
    roles = {entry["role"]: entry.get("vars", {}) for entry in nodes_play["roles"]}
    assert roles == {"tidal.colocation.kubelet_cpu_manager": {"kubelet_cpu_manager_state": "absent"},
                     "tidal.colocation.containerd_nri": {"containerd_nri_state": "absent"},
                     "tidal.colocation.disk_queue": {"disk_queue_state": "absent"}}


def test_role_text_documents_the_state_option():
    for role in ROLES:
        spec = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
        option = spec["argument_specs"]["main"]["options"][f"{role}_state"]
        assert option["choices"] == ["present", "absent"] and option["default"] == "present"
        assert ".tidal-original" in textwrap.dedent(option["description"])
