"""Test 2's environment: containerd (built from its Go module, pinned in tests/nri/cri/go.mod),
runc (Debian package), a minimal CRI client (tests/nri/cri: crictl's module is not on the Go
module proxy), and a local image imported from an OCI layout tarball (no registry reachable)."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from nri_harness import CACHE_ROOT
from oci_image import build_oci_layout

CRI_DIR = Path(__file__).resolve().parent / "cri"
IMAGE = "tidal.local/sleeper:1"
BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr", "nricri", "sleeper")


def containerd_version() -> str:
    match = re.search(r"^\s*github\.com/containerd/containerd/v2 (v\S+)", (CRI_DIR / "go.mod").read_text(), re.M)
    if not match:
        raise RuntimeError(f"{CRI_DIR / 'go.mod'}: no containerd requirement")
    return match.group(1)


def build_binaries() -> Path:
    """containerd, its runc shim, ctr, the CRI client and the sleeper; cached by source hash."""
    digest = hashlib.sha256()
    for path in sorted(CRI_DIR.rglob("*")):
        if path.is_file() and path.suffix in (".go", ".mod", ".sum"):
            digest.update(path.relative_to(CRI_DIR).as_posix().encode() + path.read_bytes())
    out = CACHE_ROOT / f"containerd-{containerd_version()}" / digest.hexdigest()[:16]
    if all((out / b).exists() for b in BINARIES):
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GOTOOLCHAIN="local", CGO_ENABLED="0", GOFLAGS="-mod=readonly")
    subprocess.run(["go", "build", "-trimpath", "-o", f"{tmp}/",
                    "github.com/containerd/containerd/v2/cmd/containerd",
                    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
                    "github.com/containerd/containerd/v2/cmd/ctr", ".", "./sleeper"],
                   cwd=CRI_DIR, env=env, check=True, timeout=1800)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


CONFIG = """version = 3
root = "{d}/root"
state = "{d}/state"

[grpc]
  address = "{d}/containerd.sock"

[ttrpc]
  address = "{d}/containerd.sock.ttrpc"

[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = "{d}/nri.sock"
  plugin_path = "{d}/nri-plugins"
  plugin_config_path = "{d}/nri-conf"
  plugin_registration_timeout = "5s"
  plugin_request_timeout = "2s"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "native"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{image}"

[plugins.'io.containerd.cri.v1.runtime']
  # the test session lacks CAP_SYS_RESOURCE: never ask runc for a lower oom_score_adj than ours
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{d}/cni-bin"]
    conf_dir = "{d}/cni-conf"
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      snapshotter = "native"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
"""


class Containerd:
    """A containerd of its own (own root, state, sockets under ``workdir``) with NRI enabled."""

    def __init__(self, binaries: Path, workdir: Path, runc: str) -> None:
        self.bin, self.dir = binaries, workdir
        for sub in ("nri-plugins", "nri-conf", "cni-bin", "cni-conf"):
            (workdir / sub).mkdir(parents=True, exist_ok=True)
        (workdir / "config.toml").write_text(CONFIG.format(d=workdir, image=IMAGE, runc=runc))
        self.socket = workdir / "containerd.sock"
        self.nri_socket = workdir / "nri.sock"
        self.log = open(workdir / "containerd.log", "w")
        env = dict(os.environ, PATH=f"{binaries}:{os.environ.get('PATH', '')}")
        self.proc = subprocess.Popen([str(binaries / "containerd"), "--config", str(workdir / "config.toml")],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 60
        while not (self.socket.exists() and self.nri_socket.exists()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"containerd did not start: {self.tail()}")
            time.sleep(0.2)

    def tail(self, lines: int = 30) -> str:
        self.log.flush()
        return "\n".join((self.dir / "containerd.log").read_text(errors="replace").splitlines()[-lines:])

    def ctr(self, *args: str) -> str:
        out = subprocess.run([str(self.bin / "ctr"), "--address", str(self.socket), "-n", "k8s.io", *args],
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)}: {out.stderr.strip()}")
        return out.stdout

    def import_image(self) -> None:
        tarball = build_oci_layout(self.bin / "sleeper", self.dir / "image.tar", IMAGE)
        self.ctr("images", "import", "--local", "--snapshotter", "native", "--platform", "linux/amd64", str(tarball))

    def cri(self, *args: str) -> dict:
        out = subprocess.run([str(self.bin / "nricri"), "-endpoint", str(self.socket), *args],
                             capture_output=True, text=True, timeout=180)
        result = json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {"error": out.stderr}
        return result

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
