"""`ansible-test sanity` on the built and installed collection, with empty ignore files."""
from pathlib import Path

from collection_tools import ROOT, ensure_pip_bootstrap, run, tool


def test_sanity_ignore_files_are_empty():
    ignores = sorted((ROOT / "tests" / "sanity").glob("ignore-*.txt"))
    assert ignores, "tests/sanity/ignore-<ansible version>.txt is expected (empty)"
    for path in ignores:
        assert path.read_text().strip() == "", f"{path.name} must stay empty: fix the code instead"


def test_ansible_test_sanity_passes(installed_collection: Path):
    ensure_pip_bootstrap()
    proc = run([tool("ansible-test"), "sanity", "--python", "3.11", "--color", "no"],
               installed_collection, timeout=1500)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-20000:]
    assert "Running sanity test \"validate-modules\"" in output
    assert "Running sanity test \"pylint\"" in output
