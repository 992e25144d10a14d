"""The Ansible collection skeleton: metadata, playbooks, and the `lab` role's contract.

Playbooks run with this checkout's ansible.cfg and the venv's ansible-playbook. Nothing here
starts the real lab: role runs use a stand-in `tidal` command that records its arguments and
prints what the real one prints.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet

from tidal_dev.testing.playbook import run as playbook_run

import ansible.release

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
PLAYBOOKS = sorted(p.name for p in (ROOT / "playbooks").glob("*.yml"))
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if p.is_dir())
# A path that cannot run, so a role that got past its checks by mistake cannot start a lab.
NO_TIDAL_COMMAND = "/nonexistent/tidal"


def load_yaml(relative_path: str):
    return yaml.safe_load((ROOT / relative_path).read_text())


def run_playbook(playbook: str, *extra_vars: str, env: dict | None = None,
                 options: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    args = [str(ANSIBLE_PLAYBOOK), *options, f"playbooks/{playbook}"]
    for extra_var in extra_vars:
        args += ["-e", extra_var]
    run_env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    run_env.update({"ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"})
    run_env.update(env or {})
    # From the checkout root, so ansible.cfg (inventory, roles_path) applies as in `make site`.
    return playbook_run(args, ROOT, run_env, timeout=300)  # past ansible-core's results-thread race


def recap(result: subprocess.CompletedProcess) -> dict[str, int]:
    match = re.search(r"^localhost\s+:\s+(.*)$", result.stdout, re.MULTILINE)
    assert match, result.stdout + result.stderr
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", match.group(1))}


# -- metadata -----------------------------------------------------------------------------------

def test_galaxy_yml_has_the_keys_ansible_galaxy_build_needs():
    galaxy = load_yaml("galaxy.yml")
    for key in ("namespace", "name", "version", "readme", "authors", "description", "tags",
                "dependencies", "build_ignore"):
        assert key in galaxy, key
    assert ("license" in galaxy) != ("license_file" in galaxy), "exactly one of license, license_file"
    assert re.fullmatch(r"\d+\.\d+\.\d+", galaxy["version"])
    assert (ROOT / "LICENSE").is_file()


def test_galaxy_yml_names_the_collection_from_the_design():
    # DESIGN.md: Ansible collection `tidal.colocation` (namespace `tidal`, name `colocation`).
    galaxy = load_yaml("galaxy.yml")
    assert (galaxy["namespace"], galaxy["name"]) == ("tidal", "colocation")


def test_galaxy_tags_include_the_category_galaxy_files_it_under():
    tags = load_yaml("galaxy.yml")["tags"]
    assert "infrastructure" in tags
    assert all(re.fullmatch(r"[a-z0-9_]+", tag) for tag in tags), tags


def test_collection_build_leaves_out_local_environments_and_caches():
    ignored = load_yaml("galaxy.yml")["build_ignore"]
    for pattern in (".venv", ".pytest_cache", "node_modules", "*.egg-info"):
        assert pattern in ignored, pattern


def test_runtime_metadata_accepts_the_installed_ansible_core():
    runtime = load_yaml("meta/runtime.yml")
    assert ansible.release.__version__ in SpecifierSet(runtime["requires_ansible"])


def test_runtime_metadata_has_the_tidal_action_group_for_module_defaults():
    runtime = load_yaml("meta/runtime.yml")
    assert isinstance(runtime["action_groups"]["tidal"], list)


def test_changelog_fragments_use_configured_sections():
    config = load_yaml("changelogs/config.yaml")
    sections = {name for name, _title in config["sections"]} | {
        config["prelude_section_name"], config["trivial_section_name"]}
    fragments = sorted((ROOT / "changelogs" / "fragments").glob("*.yml"))
    assert fragments
    for fragment in fragments:
        content = yaml.safe_load(fragment.read_text())
        assert set(content) <= sections, fragment.name


# -- playbooks ----------------------------------------------------------------------------------

@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_playbook_passes_syntax_check(playbook):
    result = run_playbook(playbook, options=("--syntax-check",))
    assert result.returncode == 0, result.stdout + result.stderr


def test_site_and_lab_down_playbooks_exist():
    assert {"site.yml", "lab_down.yml"} <= set(PLAYBOOKS)


# -- roles --------------------------------------------------------------------------------------

@pytest.mark.parametrize("role", ROLES)
def test_role_documents_every_option_in_its_argument_spec(role):
    specs = load_yaml(f"roles/{role}/meta/argument_specs.yml")["argument_specs"]
    assert "main" in specs
    for option, spec in specs["main"]["options"].items():
        assert option.startswith(f"{role}_"), f"{option} is not prefixed with the role name"
        assert "type" in spec and "description" in spec, option


@pytest.mark.parametrize("role", ROLES)
def test_role_defaults_match_its_argument_spec(role):
    options = load_yaml(f"roles/{role}/meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    defaults = load_yaml(f"roles/{role}/defaults/main.yml") or {}
    documented = {name: spec["default"] for name, spec in options.items() if "default" in spec}
    assert defaults == documented


@pytest.mark.parametrize(("extra_var", "named_option"), [
    ("lab_nodes=abc", "lab_nodes"),
    ("lab_state=running", "lab_state"),
    ("lab_wipe=maybe", "lab_wipe"),
])
def test_bad_role_argument_fails_at_role_entry_naming_the_option(extra_var, named_option):
    result = run_playbook("site.yml", extra_var, f"lab_tidal_command={NO_TIDAL_COMMAND}")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Validation of arguments failed" in output, output
    assert named_option in output
    assert recap(result)["ok"] == 0, "a task ran before argument validation failed"


def test_lab_without_nodes_is_rejected_before_anything_starts():
    result = run_playbook("site.yml", "lab_nodes=0", f"lab_tidal_command={NO_TIDAL_COMMAND}")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "lab_nodes is 0, but the lab needs at least 1 node" in output


# -- the lab role against a stand-in `tidal` ----------------------------------------------------

FAKE_TIDAL = """\
#!{python}
# Stand-in for `tidal lab`: records its arguments, answers like the real command.
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_TIDAL_CALLS"], "a") as calls:
    calls.write(json.dumps(args) + "\\n")
lab_dir, command = args[2], args[3]
healthy = os.environ.get("FAKE_TIDAL_HEALTHY", "true") == "true"
if command == "up":
    print(os.environ["FAKE_TIDAL_UP_OUTPUT"])
elif command == "status":
    print(json.dumps({{
        "healthy": healthy, "lab_dir": lab_dir, "kubeconfig": lab_dir + "/kubeconfig",
        "components": [
            {{"name": "etcd", "healthy": True, "pid": 11, "endpoint": "https://127.0.0.1:2379",
              "detail": "ok"}},
            {{"name": "volcano-scheduler", "healthy": healthy, "pid": 12 if healthy else None,
              "endpoint": "http://127.0.0.1:8080", "detail": "ok" if healthy else "not running"}},
        ],
        "nodes": [{{"name": "lab-node-0", "ready": True, "cpu": "16", "memory": "64Gi"}}],
    }}))
    sys.exit(0 if healthy else 1)
elif command == "down":
    print("stopped: etcd, volcano-scheduler" + ("; state wiped" if "--wipe" in args else ""))
"""


@pytest.fixture
def fake_tidal(tmp_path):
    command = tmp_path / "tidal"
    command.write_text(FAKE_TIDAL.format(python=sys.executable))
    command.chmod(0o755)
    calls = tmp_path / "calls.jsonl"

    def run(playbook: str, *extra_vars: str, up_output: str = "reused: etcd", healthy: bool = True,
            options: tuple[str, ...] = ()):
        calls.write_text("")
        # site.yml goes on to the nodes and the cluster after the lab play; these tests are about
        # the lab role, so they run its play only.
        tags = ("--tags", "lab") if playbook == "site.yml" else ()
        result = run_playbook(
            playbook, f"lab_tidal_command={command}", f"lab_dir={tmp_path / 'lab'}", *extra_vars,
            options=options + tags, env={"FAKE_TIDAL_CALLS": str(calls), "FAKE_TIDAL_UP_OUTPUT": up_output,
                 "FAKE_TIDAL_HEALTHY": "true" if healthy else "false"})
        result.calls = [json.loads(line) for line in calls.read_text().splitlines()]
        return result

    run.lab_dir = str(tmp_path / "lab")
    return run


def test_lab_up_passes_node_count_and_lab_dir(fake_tidal):
    result = fake_tidal("site.yml", "lab_nodes=2", "lab_real_nodes=0")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.calls[0] == ["lab", "--dir", fake_tidal.lab_dir, "up", "--nodes", "2", "--real-nodes", "0"]
    assert result.calls[1] == ["lab", "--dir", fake_tidal.lab_dir, "status", "--json"]


def test_lab_up_reports_changed_when_it_started_something(fake_tidal):
    result = fake_tidal("site.yml", up_output="started: etcd, node lab-node-0\nreused: kwok")
    assert result.returncode == 0, result.stdout + result.stderr
    assert recap(result)["changed"] == 1


def test_lab_up_reports_no_change_when_it_reused_everything(fake_tidal):
    result = fake_tidal("site.yml", up_output="reused: etcd, volcano-scheduler, node lab-node-0")
    assert result.returncode == 0, result.stdout + result.stderr
    assert recap(result)["changed"] == 0


def test_healthy_lab_prints_kubeconfig_and_components(fake_tidal):
    result = fake_tidal("site.yml")
    assert f"export KUBECONFIG={fake_tidal.lab_dir}/kubeconfig" in result.stdout
    assert re.search(r"volcano-scheduler\s+pid 12\s+http://127\.0\.0\.1:8080", result.stdout)
    assert "node lab-node-0" in result.stdout


def test_unhealthy_lab_fails_naming_the_unhealthy_components(fake_tidal):
    result = fake_tidal("site.yml", healthy=False)
    assert result.returncode != 0
    assert "unhealthy components: volcano-scheduler (not running)." in result.stdout + result.stderr


def test_check_mode_neither_starts_nor_judges_the_lab(fake_tidal):
    result = fake_tidal("site.yml", healthy=False, options=("--check",))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.calls == []


def test_lab_down_wipes_only_when_asked(fake_tidal):
    kept = fake_tidal("lab_down.yml")
    wiped = fake_tidal("lab_down.yml", "lab_wipe=true")
    assert kept.returncode == 0 and wiped.returncode == 0, wiped.stdout + wiped.stderr
    assert kept.calls == [["lab", "--dir", fake_tidal.lab_dir, "down"]]
    assert wiped.calls == [["lab", "--dir", fake_tidal.lab_dir, "down", "--wipe"]]
