"""Pinned upstream versions of everything the lab runs, and where they are cached.

The Go wrapper modules under ``gomod/`` pin the same versions in their go.mod and
go.sum; a test keeps the two in step.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

KUBERNETES_VERSION = "v1.34.4"
ETCD_VERSION = "v3.6.16"
VOLCANO_VERSION = "v1.14.1"
KWOK_VERSION = "v0.8.0"

# etcd v3.6.16 declares `go 1.26.0`; the others need less.
MINIMUM_GO = (1, 26)

GOMOD_DIR = Path(__file__).resolve().parent / "gomod"


@dataclass(frozen=True)
class Binary:
    """One lab executable: built from `package` inside the wrapper module `module_dir`."""

    name: str
    module_dir: str
    package: str


BINARIES = (
    Binary("etcd", "etcd", "go.etcd.io/etcd/server/v3"),
    Binary("kube-apiserver", "kubernetes", "k8s.io/kubernetes/cmd/kube-apiserver"),
    Binary("kube-controller-manager", "kubernetes", "k8s.io/kubernetes/cmd/kube-controller-manager"),
    Binary("vc-scheduler", "volcano", "volcano.sh/volcano/cmd/scheduler"),
    Binary("vc-controller-manager", "volcano", "volcano.sh/volcano/cmd/controller-manager"),
    Binary("kwok", "kwok", "sigs.k8s.io/kwok/cmd/kwok"),
)


def versions_key() -> str:
    """The cache directory name: changes whenever any pinned version changes."""
    return (
        f"k8s-{KUBERNETES_VERSION}_etcd-{ETCD_VERSION}"
        f"_volcano-{VOLCANO_VERSION}_kwok-{KWOK_VERSION}"
    )


def cache_root() -> Path:
    """``$TIDAL_LAB_CACHE`` or ``$XDG_CACHE_HOME/tidal/lab`` (``~/.cache/tidal/lab``)."""
    if os.environ.get("TIDAL_LAB_CACHE"):
        return Path(os.environ["TIDAL_LAB_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "tidal" / "lab"


def versions_dir() -> Path:
    return cache_root() / versions_key()


def bin_dir() -> Path:
    return versions_dir() / "bin"


def assets_dir() -> Path:
    """Upstream files the lab needs at run time (Volcano CRDs, kwok stages), copied
    from the pinned modules at build time so the lab never reads the Go module cache."""
    return versions_dir() / "assets"


def default_run_dir() -> Path:
    return cache_root() / "run"
