"""The controllers' image, built for real by ``tidal_dev.lab.image`` (mmdebstrap + wheels + web console),
then unpacked with GNU tar and run with chroot; and imported into a real containerd and run with
runc when the NRI tests' containerd can be built here.

Lives outside tests/integration, which is ansible-test's (it ships in the collection tarball).
The first run builds the image (a minute or two); later runs reuse the cached archive.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from tidal_dev.lab import image

pytestmark = pytest.mark.timeout(1800)

NRI_TESTS = Path(__file__).resolve().parents[1] / "nri"
ENTRY_POINTS = ("tidal-manager", "tidal-agent", "tidal-console")
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"


@pytest.fixture(scope="module")
def archive() -> Path:
    """The cached archive of the current sources (built on first use)."""
    if os.geteuid() != 0:
        pytest.skip("building the image needs root (mmdebstrap's root mode, chroot)")
    if shutil.which("mmdebstrap") is None:
        pytest.skip("mmdebstrap is not installed (`make debian-packages` installs the Debian package)")
    probe = subprocess.run(["mmdebstrap", "--version"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"mmdebstrap cannot run here: {probe.stderr.strip()}")
    return image.build_image(log=lambda m: print(f"tidal image: {m}", file=sys.stderr))


@pytest.fixture(scope="module")
def layout(archive, tmp_path_factory) -> dict:
    """index, manifest, config and the path of the (one) layer blob, all digests checked."""
    root = tmp_path_factory.mktemp("layout")
    with tarfile.open(archive) as tar:
        tar.extractall(root, filter="data")
    blobs = root / "blobs" / "sha256"
    for blob in blobs.iterdir():
        digest = hashlib.sha256()
        with open(blob, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        assert digest.hexdigest() == blob.name, f"blob {blob.name} does not match its digest"
    index = json.loads((root / "index.json").read_text())
    (entry,) = index["manifests"]
    manifest = json.loads((blobs / entry["digest"].split(":")[1]).read_text())
    config = json.loads((blobs / manifest["config"]["digest"].split(":")[1]).read_text())
    (layer,) = manifest["layers"]
    return {"index": index, "manifest": manifest, "config": config, "layer": blobs / layer["digest"].split(":")[1]}


@pytest.fixture(scope="module")
def rootfs(layout, tmp_path_factory) -> Path:
    """The layer unpacked by GNU tar as root (owners and modes as stored)."""
    root = tmp_path_factory.mktemp("rootfs")
    root.chmod(0o755)  # a runtime's rootfs directory; mktemp's 0700 would lock out user 65532
    subprocess.run(["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-xpzf", str(layout["layer"]),
                    "-C", str(root)], check=True)
    return root


def test_the_archive_names_the_image_and_configures_it(layout):
    (entry,) = layout["index"]["manifests"]
    reference = image.image_reference()
    assert entry["annotations"] == {"io.containerd.image.name": reference,
                                    "org.opencontainers.image.ref.name": reference.rsplit(":", 1)[1]}
    config = layout["config"]["config"]
    assert config["User"] == "65532:65532" and config["WorkingDir"] == "/"
    assert config["Cmd"] == ["tidal-manager"]
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["PATH"].startswith("/opt/tidal/bin:")
    assert env["TIDAL_CONSOLE_WEB_DIR"] == "/opt/tidal/web"
    assert config["Labels"]["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert config["Labels"]["org.opencontainers.image.version"] == reference.rsplit(":", 1)[1]


def test_the_layer_has_no_device_nodes_and_no_host_apt_sources(layout):
    with tarfile.open(layout["layer"]) as tar:
        members = {m.name: m for m in tar}
    assert not [n for n, m in members.items() if m.ischr() or m.isblk() or m.isfifo()]
    assert not [n for n in members if n.startswith(("/", "./"))]
    for gone in ("etc/apt/sources.list", "etc/apt/apt.conf.d/99mmdebstrap", "etc/resolv.conf", "etc/hostname"):
        assert gone not in members
    assert not [n for n in members if n.startswith("etc/apt/sources.list.d/")]
    assert not [n for n, m in members.items()
                if n.startswith("var/lib/apt/lists/") and m.isfile() and n != "var/lib/apt/lists/lock"]
    assert not [n for n in members if n.startswith("tmp/")]


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_each_entry_point_runs_as_the_non_root_user(rootfs, entry_point):
    proc = subprocess.run([CHROOT, "--userspec=65532:65532", str(rootfs), f"/opt/tidal/bin/{entry_point}", "--help"],
                          capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    assert proc.returncode == 0, proc.stderr
    assert f"usage: {entry_point}" in proc.stdout


def test_the_agent_finds_tc_ip_and_nsenter(rootfs):
    for tool in ("tc -V", "ip -V", "nsenter --version"):
        proc = subprocess.run([CHROOT, str(rootfs), *tool.split()], capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        assert proc.returncode == 0, f"{tool}: {proc.stderr}"


def test_the_web_console_is_where_the_console_looks(rootfs):
    from tidal.console.webbuild import build_web
    index = rootfs / "opt" / "tidal" / "web" / "index.html"
    assert index.is_file()
    assert index.read_bytes() == (build_web() / "index.html").read_bytes()
    assert (rootfs / "opt" / "tidal" / "web" / "assets" / "app.js").is_file()
    passwd = (rootfs / "etc" / "passwd").read_text()
    assert "nonroot:x:65532:65532:" in passwd


def test_the_image_holds_the_product_and_not_the_development_distribution(rootfs):
    """The lab, the test helpers and their synchronous Kubernetes client stay out of the image."""
    (site,) = (rootfs / "opt" / "tidal" / "lib").glob("python3*/site-packages")
    assert (site / "tidal" / "agent").is_dir() and (site / "tidal" / "api").is_dir()
    present = [p.name for pattern in ("tidal_dev*", "tidal/lab", "tidal/testing", "kubernetes-*.dist-info",
                                      "jsonpatch*") for p in site.glob(pattern)]
    assert not present, present


def test_a_second_build_reuses_the_archive(archive):
    started = time.monotonic()
    again = image.build_image(log=lambda m: None)
    assert again == archive
    assert time.monotonic() - started < 30


@pytest.fixture(scope="module")
def containerd():
    if shutil.which("go") is None:
        pytest.skip("importing into containerd needs the NRI tests' containerd, built with Go (not installed)")
    runc = shutil.which("runc") or "/usr/sbin/runc"
    if not os.path.exists(runc):
        pytest.skip("runc is missing (`make debian-packages` installs it)")
    sys.path.insert(0, str(NRI_TESTS))
    try:
        from containerd_env import Containerd, build_binaries
    finally:
        sys.path.remove(str(NRI_TESTS))
    binaries = build_binaries()
    workdir = Path(tempfile.mkdtemp(prefix="img-ctrd-", dir="/tmp"))  # short socket paths
    c = Containerd(binaries, workdir, runc)
    try:
        yield c
    finally:
        c.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def test_containerd_imports_the_archive_and_runs_it_with_runc(archive, containerd):
    ctr = containerd.bin / "ctr"
    for _ in range(2):  # idempotent
        assert image.import_image(archive, ctr, containerd.socket, snapshotter="native") == image.image_reference()
    assert image.image_reference() in containerd.ctr("images", "ls", "-q")
    env = {"PATH": f"{containerd.bin}:/usr/sbin:/usr/bin:/sbin:/bin"}
    for i, (cmd, expected) in enumerate([(["id", "-u"], "65532"),
                                          (["tidal-console", "--help"], "usage: tidal-console")]):
        proc = subprocess.run([str(ctr), "--address", str(containerd.socket), "-n", "k8s.io", "run", "--rm",
                               "--snapshotter", "native", image.image_reference(), f"image-test-{os.getpid()}-{i}",
                               *cmd], capture_output=True, text=True, env=env, timeout=180)
        assert proc.returncode == 0, proc.stderr
        assert expected in proc.stdout
