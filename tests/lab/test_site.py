"""`make site` = ansible-playbook playbooks/site.yml against the default inventory (the lab)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]


def test_site_playbook_brings_up_the_lab_and_prints_its_status(lab):
    env = dict(os.environ, TIDAL_LAB_DIR=str(lab.dir), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "playbooks/site.yml"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"The lab in {lab.dir} is healthy." in proc.stdout
    for component in ("kube-apiserver", "volcano-scheduler", "kwok", "prometheus"):
        assert component in proc.stdout
    assert "node lab-node-0" in proc.stdout
    # The lab was already up: the play reuses it and changes nothing.
    assert "changed=0" in proc.stdout and "failed=0" in proc.stdout
