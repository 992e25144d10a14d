"""`ansible-test integration` of every module's target, from the built and installed collection,
against the lab's real API server (check mode -> apply -> check-mode idempotence -> idempotence)."""
from pathlib import Path

import pytest
import yaml

from collection_tools import ROOT, run, tool

pytestmark = pytest.mark.lab

TARGETS = sorted(p.name for p in (ROOT / "tests" / "integration" / "targets").iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def lab_with_crds(lab, lab_api):
    from tidal.crds import crd_manifests
    from tidal_dev.lab.apply import create_or_replace_all
    create_or_replace_all(lab_api, crd_manifests(), wait_established=True)
    return lab


# A target named like a role of the collection would run that role instead (ansible-test finds
# targets as roles): those targets carry a `_module` suffix.
ROLES = {p.name for p in (ROOT / "roles").iterdir()}


def test_every_module_has_an_integration_target():
    modules = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py"))
    assert sorted(t.removesuffix("_module") for t in TARGETS) == modules
    assert not set(TARGETS) & ROLES


def test_integration_targets_pass_against_the_lab(installed_collection: Path, lab_with_crds):
    config = installed_collection / "tests" / "integration" / "integration_config.yml"
    config.write_text(yaml.safe_dump({"lab_kubeconfig": str(lab_with_crds.kubeconfig_path)}))
    proc = run([tool("ansible-test"), "integration", "--python", "3.11", "--color", "no", *TARGETS],
               installed_collection, timeout=1200)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-20000:]
    for target in TARGETS:
        assert f"Running {target} integration test role" in output
    assert "failed=0" in output and "failed=1" not in output
