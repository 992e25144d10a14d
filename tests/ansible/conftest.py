"""Fixtures for the collection's tests: the built and installed collection (what users get).

`installed_collection` is `ansible-galaxy collection build` of this checkout installed with
`ansible-galaxy collection install` into a temporary ``ansible_collections/tidal/colocation``,
beside the collections of requirements.yml (from .venv/collections, which `make test` fills).
ansible-test runs from that copy. Helpers live in collection_tools.py (importable: this
directory is put on sys.path here, as pytest's importlib mode does not).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _importable_collection() -> None:
    """Make ``ansible_collections.tidal.colocation`` importable for the unit tests: a link to
    this checkout in a temporary ``ansible_collections`` tree on sys.path."""
    import atexit
    import tempfile
    base = Path(tempfile.mkdtemp(prefix="tidal-collection-"))
    link = base / "ansible_collections" / "tidal" / "colocation"
    link.parent.mkdir(parents=True)
    link.symlink_to(Path(__file__).resolve().parents[2], target_is_directory=True)
    atexit.register(shutil.rmtree, base, True)
    sys.path.insert(0, str(base))


_importable_collection()

from collection_tools import DEPENDENCIES, ROOT, VENV_COLLECTIONS, run, tool  # noqa: E402


@pytest.fixture(scope="session")
def dependency_collections() -> Path:
    """.venv/collections with kubernetes.core and community.crypto (installed by `make test`)."""
    missing = [d for d in DEPENDENCIES if not (VENV_COLLECTIONS / "ansible_collections" / d / "MANIFEST.json").exists()]
    if missing:
        subprocess.run([sys.executable, str(ROOT / "tests" / "ansible" / "install_collections.py")],
                       check=True)
    return VENV_COLLECTIONS


@pytest.fixture(scope="session")
def collection_tarball(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("galaxy-build")
    proc = run([tool("ansible-galaxy"), "collection", "build", "--output-path", str(out), str(ROOT)], ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (tarball,) = out.glob("tidal-colocation-*.tar.gz")
    return tarball


@pytest.fixture(scope="session")
def installed_collection(tmp_path_factory, collection_tarball, dependency_collections) -> Path:
    """``<tmp>/ansible_collections/tidal/colocation`` installed from the built tarball, with the
    dependency collections beside it (copied, so ansible-test sees a self-contained tree)."""
    root = tmp_path_factory.mktemp("collections")
    proc = run([tool("ansible-galaxy"), "collection", "install", "--force", "--no-deps", "-p", str(root),
                str(collection_tarball)], ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for dependency in DEPENDENCIES:
        shutil.copytree(dependency_collections / "ansible_collections" / dependency,
                        root / "ansible_collections" / dependency, symlinks=True)
    return root / "ansible_collections" / "tidal" / "colocation"
