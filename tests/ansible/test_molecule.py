"""Every molecule scenario (extensions/molecule/<role>): converge, idempotence (zero changes),
verify. Node roles converge into temporary roots on localhost; cluster roles against the lab."""
import re

import pytest

from collection_tools import ROOT, run, tool

SCENARIOS = ROOT / "extensions" / "molecule"
# Scenarios whose roles act on the cluster: they need the lab (its kubeconfig in $KUBECONFIG).
CLUSTER_SCENARIOS = {"volcano", "tidal_controllers"}


def scenarios():
    for path in sorted(p for p in SCENARIOS.iterdir() if (p / "molecule.yml").exists()):
        marks = [pytest.mark.lab] if path.name in CLUSTER_SCENARIOS else []
        yield pytest.param(path.name, marks=marks, id=path.name)


def test_every_role_has_a_scenario():
    roles = {p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir()} - {"lab"}
    assert roles <= {p.name for p in SCENARIOS.iterdir() if (p / "molecule.yml").exists()}


@pytest.mark.parametrize("scenario", list(scenarios()))
def test_molecule_scenario(scenario, request):
    env = {}
    if scenario in CLUSTER_SCENARIOS:
        lab = request.getfixturevalue("lab")
        env = {"KUBECONFIG": str(lab.kubeconfig_path), "TIDAL_LAB_DIR": str(lab.dir)}
    proc = run([tool("molecule"), "test", "-s", scenario], ROOT, timeout=1200, **env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-15000:]
    # The summary line counts each action; destroy is "missing" (unmanaged hosts need no playbook).
    summary = re.search(rf"^{scenario}\s+: actions=\d+\s+successful=\d+.*failed=(\d+)", output, re.MULTILINE)
    assert summary and summary.group(1) == "0", output[-5000:]
    assert re.search(r"idempotence\W+Executed: Successful", output), output[-5000:]
