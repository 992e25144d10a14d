# SPDX-License-Identifier: Apache-2.0
"""udev's own rules engine for tests, without a udev daemon on this machine.

``udevadm test`` runs one device's event through the rules as ``systemd-udevd`` would (systemd
252: it applies ``ATTR{}`` assignments, not ``RUN``). The Debian package ``udev`` is not
installed: its maintainer scripts would start a udev daemon on this shared machine. :func:`install`
extracts ``udevadm`` and the ``libsystemd-shared`` it needs, of the same version, from Debian's
packages into ``udev/<version>`` of the lab's cache (``~/.cache/tidal/lab``; ``make test`` runs it:
``python -m tidal_dev.testing.udev``). :func:`apply_rule` runs one rules file against one device in a mount
namespace of its own, where that file is the only rule and udev's database, ``/run`` and
``/dev/block`` are private: what it changes on the machine is what the rule writes to sysfs.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tidal.cache import cache_root

__all__ = ["Udevadm", "apply_rule", "find", "install"]

CACHE = cache_root() / "udev"
PACKAGES = ("udev", "libsystemd-shared")
#: where udevadm reads rules: each is hidden by an empty tmpfs in :func:`apply_rule`'s namespace
RULES_DIRS = ("/etc/udev/rules.d", "/usr/lib/udev/rules.d", "/lib/udev/rules.d", "/usr/local/lib/udev/rules.d")


@dataclass(frozen=True)
class Udevadm:
    root: Path  # the packages' files, extracted

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "udevadm"

    @property
    def env(self) -> dict[str, str]:
        # libsystemd-shared-<major>.so, in the package's multiarch directory (usr/lib/<triplet>/systemd)
        libraries = sorted({str(lib.parent) for lib in self.root.glob("usr/lib/*/systemd/libsystemd-shared-*.so")})
        return dict(os.environ, LD_LIBRARY_PATH=":".join(libraries), SYSTEMD_LOG_LEVEL="debug")


def candidate_version(package: str = "udev") -> str | None:
    """The version apt would install of ``package`` (None: apt knows none)."""
    proc = subprocess.run(["apt-cache", "policy", package], capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        key, _, value = line.strip().partition(":")
        if key == "Candidate" and value.strip() not in ("", "(none)"):
            return value.strip()
    return None


def find() -> Udevadm | None:
    """The installed udevadm that runs here (the newest installed version), or None."""
    for root in sorted(CACHE.glob("*/root"), reverse=True):
        tool = Udevadm(root)
        if tool.binary.exists() and subprocess.run([str(tool.binary), "--version"], env=tool.env,
                                                   capture_output=True).returncode == 0:
            return tool
    return None


def install() -> Udevadm:
    """udevadm of Debian's candidate ``udev``, extracted once into the cache (idempotent)."""
    version = candidate_version()
    if version is None:  # a machine whose package lists were never fetched
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        version = candidate_version()
    if version is None:
        raise RuntimeError("apt knows no candidate of the Debian package udev")
    root = CACHE / version.replace("~", "_") / "root"
    if (root / "bin" / "udevadm").exists():
        return Udevadm(root)
    with tempfile.TemporaryDirectory() as scratch:
        # apt's sandbox user cannot write a root-owned scratch directory: let it
        os.chmod(scratch, 0o777)
        subprocess.run(["apt-get", "download", "-q", *(f"{p}={version}" for p in PACKAGES)], cwd=scratch,
                       check=True, capture_output=True)
        staging = Path(scratch) / "root"
        for deb in sorted(Path(scratch).glob("*.deb")):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(staging)], check=True)
        root.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staging), root)
    return Udevadm(root)


# Inside the namespace: hide every rules directory, /run and /dev/block behind empty tmpfs, put the
# one rules file in place, run the event. $1 udevadm, $2 the rules file, $3 the device's sysfs
# path, $4 the action.
NAMESPACE_SCRIPT = """\
set -e
for d in {rules_dirs}; do [ -d "$d" ] && mount -t tmpfs tidal-udev-test "$d"; done
mount -t tmpfs tidal-udev-test /run
[ -d /dev/block ] && mount -t tmpfs tidal-udev-test /dev/block
mkdir -p /run/udev/rules.d
cp "$2" /run/udev/rules.d/
exec "$1" test --action="$4" "$3"
"""


def apply_rule(tool: Udevadm, rules_file: Path, device: str, action: str = "add") -> str:
    """Runs the ``add`` (or ``action``) event of ``/sys/class/block/<device>`` through
    ``rules_file`` alone; returns udevadm's debug output (raises when it fails)."""
    script = NAMESPACE_SCRIPT.format(rules_dirs=" ".join(RULES_DIRS))
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh",
                           str(tool.binary), str(rules_file), f"/sys/class/block/{device}", action],
                          env=tool.env, capture_output=True, text=True, timeout=60)
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"udevadm test of {device} with {rules_file} failed ({proc.returncode}):\n{output}")
    return output


if __name__ == "__main__":
    print(f"udevadm: {install().binary}", file=sys.stderr)
