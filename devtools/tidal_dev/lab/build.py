# SPDX-License-Identifier: Apache-2.0
"""Build the lab's upstream binaries once, from pinned Go modules, into the cache.

Cold, this compiles kube-apiserver, kube-controller-manager, etcd, Volcano and kwok
(tens of minutes on two cores); afterwards the binaries are reused as long as the
pinned versions do not change. Go's own module and build caches are left in place
so a rebuild after a version bump only compiles what changed.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterable

from tidal_dev.lab import versions
from tidal_dev.lab.versions import BINARIES, Binary


class LabBuildError(RuntimeError):
    """The lab binaries cannot be built; the message says what to do."""


# Upstream files copied into the assets directory: (module, path in module, asset name).
# Volcano's controller-manager waits for informers of every kind it knows, the
# flow.volcano.sh ones included: without their CRDs it never starts its controllers.
VOLCANO_CRD_GLOBS = ("config/crd/volcano/bases/*.yaml", "config/crd/jobflow/bases/*.yaml")
KWOK_STAGES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)


def parse_go_version(text: str) -> tuple[int, int] | None:
    """`go version go1.26.8 linux/amd64` -> (1, 26); None when unrecognisable."""
    match = re.search(r"go(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def check_go(go: str = "go") -> str:
    """Return the `go version` line, or raise one clear sentence saying what to install."""
    need = "%d.%d" % versions.MINIMUM_GO
    path = shutil.which(go)
    if path is None:
        raise LabBuildError(
            f"Go {need} or newer is needed to build the lab, and `go` is not on PATH: install Go {need}+."
        )
    out = subprocess.run([path, "version"], capture_output=True, text=True, env=go_env()).stdout.strip()
    found = parse_go_version(out)
    if found is None or found < versions.MINIMUM_GO:
        raise LabBuildError(
            f"Go {need} or newer is needed to build the lab, but `{path}` is {out or 'unknown'}: install Go {need}+."
        )
    return out


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        GOTOOLCHAIN="local",  # never download a toolchain: build with the Go that is installed
        CGO_ENABLED="0",
        GOFLAGS="-mod=mod -buildvcs=false",
    )
    return env


def missing_binaries(bin_dir: Path | None = None) -> list[Binary]:
    bin_dir = bin_dir or versions.bin_dir()
    return [b for b in BINARIES if not os.access(bin_dir / b.name, os.X_OK)]


def _asset_sources() -> dict:
    return {"volcano": list(VOLCANO_CRD_GLOBS), "kwok": list(KWOK_STAGES)}


def assets_current() -> bool:
    """True when the cached assets were copied from the sources this code names."""
    try:
        info = json.loads((versions.assets_dir() / "BUILD-INFO.json").read_text())
    except (OSError, ValueError):
        return False
    return info.get("asset_sources") == _asset_sources()


def _module_workdir(module_dir: str) -> Path:
    """A private copy of the wrapper module, so building never writes into the package."""
    src = versions.GOMOD_DIR / module_dir
    dst = versions.versions_dir() / "src" / module_dir
    dst.mkdir(parents=True, exist_ok=True)
    for path in src.rglob("*"):
        if path.is_file() and (path.suffix == ".go" or path.name in ("go.mod", "go.sum")):
            target = dst / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    return dst


def _run(cmd: list[str], cwd: Path, log: Callable[[str], None]) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=go_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise LabBuildError(f"`{' '.join(cmd)}` failed in {cwd}:\n{proc.stderr[-4000:]}")
    return proc.stdout


def _build_one(binary: Binary, out: Path, log: Callable[[str], None]) -> None:
    workdir = _module_workdir(binary.module_dir)
    deps = _run(["go", "list", "-deps", "-f", "{{.ImportPath}}", binary.package], workdir, log).split()
    total = len(deps)
    tmp = out.with_name(f".{out.name}.tmp")
    cmd = ["go", "build", "-v", "-trimpath", "-o", str(tmp), binary.package]
    if binary.stamp:
        cmd[3:3] = ["-ldflags", " ".join(f"-X {s}" for s in binary.stamp)]
    started = time.monotonic()
    log(f"building {binary.name} from {binary.package} ({total} packages)")
    proc = subprocess.Popen(cmd, cwd=workdir, env=go_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    compiled, last_report, tail = 0, started, []
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        tail = (tail + [line])[-40:]
        if line and not line.startswith(("#", " ", "\t")):
            compiled += 1
        now = time.monotonic()
        if now - last_report >= 15:
            log(f"  {binary.name}: {compiled}/{total} packages compiled, {now - started:.0f}s")
            last_report = now
    if proc.wait() != 0:
        tmp.unlink(missing_ok=True)
        raise LabBuildError(f"building {binary.name} failed:\n" + "\n".join(tail))
    os.replace(tmp, out)
    log(f"  {binary.name}: done in {time.monotonic() - started:.0f}s")


def _module_dir_of(module_dir: str, module: str, log: Callable[[str], None]) -> Path:
    workdir = _module_workdir(module_dir)
    return Path(_run(["go", "list", "-m", "-f", "{{.Dir}}", module], workdir, log).strip())


def _copy_assets(log: Callable[[str], None]) -> None:
    assets = versions.assets_dir()
    crd_dir = assets / "volcano-crds"
    stage_dir = assets / "kwok-stages"
    for d in (crd_dir, stage_dir):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    volcano_src = _module_dir_of("volcano", "volcano.sh/volcano", log)
    crds = []
    for pattern in VOLCANO_CRD_GLOBS:
        found = sorted(volcano_src.glob(pattern))
        if not found:
            raise LabBuildError(f"no Volcano CRDs under {volcano_src}/{pattern}")
        crds.extend(found)
    for crd in crds:
        shutil.copyfile(crd, crd_dir / crd.name)
    kwok_src = _module_dir_of("kwok", "sigs.k8s.io/kwok", log)
    for stage in KWOK_STAGES:
        shutil.copyfile(kwok_src / stage, stage_dir / Path(stage).name)
    info = {
        "kubernetes": versions.KUBERNETES_VERSION,
        "etcd": versions.ETCD_VERSION,
        "volcano": versions.VOLCANO_VERSION,
        "kwok": versions.KWOK_VERSION,
        "containerd": versions.CONTAINERD_VERSION,
        "go": check_go(),
        "asset_sources": _asset_sources(),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (assets / "BUILD-INFO.json").write_text(json.dumps(info, indent=2) + "\n")
    log(f"assets: {len(crds)} Volcano CRDs, {len(KWOK_STAGES)} kwok stages")


def build(force: bool = False, only: Iterable[str] = (), log: Callable[[str], None] | None = None) -> Path:
    """Build every missing binary (all of them with `force`) and copy the run-time assets.

    Returns the bin directory. Raises LabBuildError with the compiler's tail on failure.
    """
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    check_go()
    bin_dir = versions.bin_dir()
    bin_dir.mkdir(parents=True, exist_ok=True)
    wanted = [b for b in BINARIES if not only or b.name in set(only)]
    todo = wanted if force else [b for b in wanted if b in missing_binaries(bin_dir)]
    if todo:
        log(f"building {len(todo)} lab binaries into {bin_dir} (cold builds take tens of minutes)")
    started = time.monotonic()
    for binary in todo:
        _build_one(binary, bin_dir / binary.name, log)
    if todo or force or not assets_current():
        _copy_assets(log)
    if todo:
        log(f"lab binaries built in {time.monotonic() - started:.0f}s")
    return bin_dir
