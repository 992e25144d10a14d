"""ansible-lint passes on the production profile (roles, playbooks, molecule, integration targets)."""
from collection_tools import ROOT, run, tool


def test_ansible_lint_production_profile_passes():
    proc = run([tool("ansible-lint"), "--nocolor", "--profile", "production", "-f", "pep8"], ROOT, timeout=900)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-15000:]
    assert "Profile 'production' was required, and it passed" in output
