"""Helpers for the collection's tests: the built and installed collection, and a way to run
Ansible's tools (ansible-playbook, ansible-test, ansible-lint, molecule) from this venv.

`installed_collection` is what users get: `ansible-galaxy collection build` of this checkout,
installed with `ansible-galaxy collection install` into a temporary
``ansible_collections/tidal/colocation`` beside the collections of requirements.yml (taken from
.venv/collections, which `make test` fills). ansible-test runs from that copy.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
VENV_COLLECTIONS = ROOT / ".venv" / "collections"
DEPENDENCIES = ("kubernetes/core", "community/crypto")


def tool(name: str) -> str:
    return str(BIN / name)


def ansible_env(**extra: str) -> dict[str, str]:
    """The environment for an Ansible tool: this venv first on PATH, no colour, no cowsay."""
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOWS="1",
               PY_COLORS="0", NO_COLOR="1", PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.update(extra)
    return env


def run(argv: list[str], cwd: Path, timeout: float = 900, **env: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, cwd=cwd, env=ansible_env(**env), capture_output=True, text=True,
                          timeout=timeout)
    return proc


def play_locally(workdir: Path, play: dict, *options: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    """ansible-playbook of one ``play`` on localhost (local connection, this venv's Python and
    collections, no ansible.cfg), written to ``workdir/play.yml`` and run there."""
    import yaml

    playbook = workdir / "play.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, **play}], sort_keys=False))
    return run([tool("ansible-playbook"), "-i", "localhost,", "-c", "local",
                "-e", "ansible_python_interpreter={{ ansible_playbook_python }}", *options, str(playbook)],
               workdir, timeout=timeout, ANSIBLE_COLLECTIONS_PATH=str(VENV_COLLECTIONS),
               ANSIBLE_CONFIG=str(workdir / "none.cfg"), **env)


# ansible-test creates one virtual environment per sanity test and bootstraps pip into it with a
# get-pip script it downloads from its own CI file server, which this machine cannot reach. This
# stand-in does the same job with the interpreter's bundled ensurepip, then pip from the package
# index; ansible-test finds it in its cache and uses it instead of downloading.
GET_PIP_STANDIN = '''\
"""Stand-in for get-pip.py written by tests/ansible/conftest.py: ensurepip, then pip install."""
import subprocess
import sys

subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"], stdout=subprocess.DEVNULL)
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install", *args]))
'''


def ensure_pip_bootstrap() -> None:
    cache = Path.home() / ".ansible" / "test" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    script = cache / f"get_pip_{_ansible_test_pip_version().replace('.', '_')}.py"
    if not script.exists():
        script.write_text(GET_PIP_STANDIN)


def _ansible_test_pip_version() -> str:
    """The pip version ansible-test bootstraps into its virtual environments."""
    import re

    from ansible_test._internal import python_requirements
    match = re.search(r"pip='([0-9.]+)'", Path(python_requirements.__file__).read_text())
    assert match, "cannot find ansible-test's pip version; update tests/ansible/conftest.py"
    return match.group(1)


def fake_sysfs(root: Path, disks: dict[str, tuple[int, int]], others: dict[str, tuple[int, int]] | None = None) -> Path:
    """A sysfs tree under ``root``: each of ``disks`` a whole disk with a driver (a ``device``
    entry), each of ``others`` a block device without one (loop, device-mapper); both map a name
    to its ``queue/max_sectors_kb`` and ``max_hw_sectors_kb``. Returns the tree's root."""
    for names, with_driver in ((disks, True), (others or {}, False)):
        for name, (now, hardware) in names.items():
            queue = root / "block" / name / "queue"
            queue.mkdir(parents=True)
            (queue / "max_sectors_kb").write_text(f"{now}\n")
            (queue / "max_hw_sectors_kb").write_text(f"{hardware}\n")
            if with_driver:
                (root / "block" / name / "device").mkdir()
    return root
