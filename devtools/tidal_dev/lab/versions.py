# SPDX-License-Identifier: Apache-2.0
"""Pinned upstream versions of everything the lab runs, and where they are cached.

The Go wrapper modules under ``gomod/`` pin the same versions in their go.mod and
go.sum; a test keeps the two in step.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tidal.cache import cache_root  # the lab's builds and the console's share it

KUBERNETES_VERSION = "v1.34.4"
ETCD_VERSION = "v3.6.16"
VOLCANO_VERSION = "v1.14.1"
KWOK_VERSION = "v0.8.0"
# The real nodes' container runtime (its CRI and NRI plugins), as the NRI tests run it.
CONTAINERD_VERSION = "v2.2.9"
# Bumped when the way binaries are built changes (v2: version stamps, the real nodes' binaries),
# so a cache built the old way is not reused.
BUILD_REVISION = 2

# etcd v3.6.16 declares `go 1.26.0`; the others need less.
MINIMUM_GO = (1, 26)

GOMOD_DIR = Path(__file__).resolve().parent / "gomod"


def _kubernetes_stamp() -> tuple[str, ...]:
    """What `make` in kubernetes/kubernetes stamps (hack/lib/version.sh): without it every
    component reports v0.0.0-master and `kubectl get nodes` shows no kubelet version."""
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    stamp = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        stamp += [f"{pkg}.gitVersion={KUBERNETES_VERSION}", f"{pkg}.gitMajor={major}",
                  f"{pkg}.gitMinor={minor}", f"{pkg}.gitTreeState=clean"]
    return tuple(stamp)


CONTAINERD_STAMP = (f"github.com/containerd/containerd/v2/version.Version={CONTAINERD_VERSION}",)


@dataclass(frozen=True)
class Binary:
    """One lab executable: built from `package` inside the wrapper module `module_dir`,
    with `-X` link-time assignments `stamp` (each `importpath.name=value`)."""

    name: str
    module_dir: str
    package: str
    stamp: tuple[str, ...] = ()


_K8S = _kubernetes_stamp()

BINARIES = (
    Binary("etcd", "etcd", "go.etcd.io/etcd/server/v3"),
    Binary("kube-apiserver", "kubernetes", "k8s.io/kubernetes/cmd/kube-apiserver", _K8S),
    Binary("kube-controller-manager", "kubernetes", "k8s.io/kubernetes/cmd/kube-controller-manager", _K8S),
    # The default scheduler: the lab's real nodes run ordinary pods (Tidal's own among them).
    Binary("kube-scheduler", "kubernetes", "k8s.io/kubernetes/cmd/kube-scheduler", _K8S),
    Binary("vc-scheduler", "volcano", "volcano.sh/volcano/cmd/scheduler"),
    Binary("vc-controller-manager", "volcano", "volcano.sh/volcano/cmd/controller-manager"),
    Binary("kwok", "kwok", "sigs.k8s.io/kwok/cmd/kwok"),
    # A real node: kubelet and kube-proxy from the same release as the API server, containerd
    # with its runc shim and ctr, and the sandbox ("pause") program of its local image.
    Binary("kubelet", "kubernetes", "k8s.io/kubernetes/cmd/kubelet", _K8S),
    Binary("kube-proxy", "kubernetes", "k8s.io/kubernetes/cmd/kube-proxy", _K8S),
    Binary("containerd", "containerd", "github.com/containerd/containerd/v2/cmd/containerd", CONTAINERD_STAMP),
    Binary("containerd-shim-runc-v2", "containerd", "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
           CONTAINERD_STAMP),
    Binary("ctr", "containerd", "github.com/containerd/containerd/v2/cmd/ctr", CONTAINERD_STAMP),
    Binary("pause", "containerd", "tidal.local/lab/containerd/pause"),
)


def versions_key() -> str:
    """The cache directory name: changes whenever any pinned version changes."""
    return (
        f"k8s-{KUBERNETES_VERSION}_etcd-{ETCD_VERSION}"
        f"_volcano-{VOLCANO_VERSION}_kwok-{KWOK_VERSION}"
        f"_containerd-{CONTAINERD_VERSION}_r{BUILD_REVISION}"
    )


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
