"""Install the collections of requirements.yml, and this checkout as tidal.colocation, into
``.venv/collections/ansible_collections`` (ansible.cfg's first collections path).

The collections come from the pinned ``ansible`` release (``ANSIBLE_BUNDLE``), which bundles them
and is fetched with pip (cached in ``~/.cache/tidal/pip``); the version each collection has there
must be the one requirements.yml pins. tidal.colocation is a symlink to the checkout, so edits
take effect without a rebuild (the galaxy build + install test checks the built tarball).
Idempotent; prints what it did.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_BUNDLE = "12.1.0"  # bundles kubernetes.core 6.1.0 and community.crypto 3.0.4; needs ansible-core 2.19
PIP_CACHE = Path(os.environ.get("TIDAL_PIP_CACHE", Path.home() / ".cache" / "tidal" / "pip"))


def requirements() -> dict[str, str]:
    data = yaml.safe_load((ROOT / "requirements.yml").read_text())
    return {c["name"]: str(c["version"]) for c in data["collections"]}


def bundle_wheel() -> Path:
    wheel = PIP_CACHE / f"ansible-{ANSIBLE_BUNDLE}-py3-none-any.whl"
    if not wheel.exists():
        PIP_CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--dest", str(PIP_CACHE), f"ansible=={ANSIBLE_BUNDLE}"], check=True)
    return wheel


def installed_version(directory: Path) -> str | None:
    try:
        return json.loads((directory / "MANIFEST.json").read_text())["collection_info"]["version"]
    except (OSError, KeyError, ValueError):
        return None


def install(destination: Path) -> None:
    root = destination / "ansible_collections"
    wanted = requirements()
    missing = {name: version for name, version in wanted.items()
               if installed_version(root.joinpath(*name.split("."))) != version}
    if missing:
        with zipfile.ZipFile(bundle_wheel()) as wheel:
            for name, version in missing.items():
                prefix = "ansible_collections/" + name.replace(".", "/") + "/"
                target = root.joinpath(*name.split("."))
                shutil.rmtree(target, ignore_errors=True)
                for member in wheel.namelist():
                    if member.startswith(prefix):
                        wheel.extract(member, destination)
                found = installed_version(target)
                if found != version:
                    raise SystemExit(f"ansible {ANSIBLE_BUNDLE} bundles {name} {found}, requirements.yml "
                                     f"pins {version}: update one of them")
                print(f"installed {name} {version}")
    link = root / "tidal" / "colocation"
    if not (link.is_symlink() and link.resolve() == ROOT):
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(ROOT, target_is_directory=True)
        print(f"linked tidal.colocation -> {ROOT}")


if __name__ == "__main__":
    install(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / ".venv" / "collections")
