# SPDX-License-Identifier: Apache-2.0
"""Build the controllers' container image here, without Docker or a registry.

Why: the lab and the test machines have no container engine and reach no container registry,
only the package registries (Debian's apt, PyPI). The image that ``Containerfile`` describes for
everybody else is therefore assembled from those packages directly:

1. the web console is built as ``tidal-console build-web`` does (cached by its sources);
2. ``pip wheel`` on this host (CPython 3.11, the ABI of Debian bookworm's python3) builds the
   project's wheel and downloads the wheels of its pinned dependencies;
3. ``mmdebstrap --variant=minbase`` makes a Debian bookworm root filesystem from Debian's
   packages (python3, python3-venv, ca-certificates, iproute2) with this host's apt sources and
   apt configuration; its customize hooks create the virtualenv ``/opt/tidal``, install the
   wheels there offline, put the web console in ``/opt/tidal/web`` (``TIDAL_CONSOLE_WEB_DIR``)
   and create the non-root user 65532; the host's apt sources, apt options, resolv.conf and
   hostname are removed again, so the image names no package mirror;
4. that tree becomes one gzip layer of an OCI image layout archive (:mod:`tidal_dev.lab.oci`), which
   ``ctr images import`` loads into containerd as ``localhost/tidal:<version>``.

The archive is cached under ``<cache>/image/<key>/tidal-image.oci.tar``; the key hashes
pyproject.toml, every file under ``controllers/``, this recipe (``image.py``, ``oci.py``) and the apt sources
and options used, so it is rebuilt only when one of them changes. Needs root (mmdebstrap's
root mode; its unshare mode, for users with subordinate IDs, may work but is not tested).

    python -m tidal_dev.lab.image [--force] [--import-to CONTAINERD_SOCKET --ctr PATH]
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Callable, Iterator, Sequence
from urllib.parse import urlsplit

from tidal_dev.lab import oci
from tidal_dev.lab.versions import cache_root

__all__ = ["IMAGE_NAME", "ImageBuildError", "archive_path", "build_image", "image_reference", "import_image",
           "input_key", "main"]

DISTRIBUTION = "tidal-colocation"
IMAGE_NAME = "localhost/tidal"
ARCHIVE_NAME = "tidal-image.oci.tar"
SUITE = "bookworm"
# What the controllers need at run time besides Python: tc and ip (iproute2) for the agent's egress
# shaping; nsenter comes with util-linux, which is essential (always installed).
DEBIAN_PACKAGES = ("python3", "python3-venv", "ca-certificates", "iproute2")
DPKG_OPTIONS = (
    "path-exclude=/usr/share/doc/*", "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*", "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*", "path-include=/usr/share/locale/locale.alias",
    "path-exclude=/usr/share/lintian/*",
)
PREFIX = "/opt/tidal"
WEB_DIR = f"{PREFIX}/web"
USER_ID = 65532
USER_NAME = "nonroot"
ENV = (
    f"PATH={PREFIX}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG=C.UTF-8",
    "PYTHONUNBUFFERED=1",
    f"TIDAL_CONSOLE_WEB_DIR={WEB_DIR}",
)
CMD = ("tidal-manager",)
SOURCE_URL = "https://example.invalid/tidal"  # galaxy.yml's repository
# This host's apt configuration, used as it is (the first existing sources file; every existing option file).
HOST_SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))
HOST_APT_OPTIONS = (Path("/etc/apt/apt.conf.d/99artifact-registry"),)
GZIP_LEVEL = 1  # 6 saves ~13 % of the size for twice the time

REPO_ROOT = Path(__file__).resolve().parents[3]
_SKIP_DIRS = {"__pycache__", "node_modules", ".pytest_cache"}


class ImageBuildError(RuntimeError):
    """The image cannot be built or imported; the message says what is missing."""


def version() -> str:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as err:  # pragma: no cover - always installed here
        raise ImageBuildError(f"{DISTRIBUTION} is not installed: run `make venv`") from err


def image_reference() -> str:
    """``localhost/tidal:<version>``: what the archive is imported as (the role's default image)."""
    return f"{IMAGE_NAME}:{version()}"


def labels() -> dict[str, str]:
    return {
        "org.opencontainers.image.title": "tidal",
        "org.opencontainers.image.description": "Tidal controllers: tidal-manager, tidal-agent, tidal-console",
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.source": SOURCE_URL,
        "org.opencontainers.image.version": version(),
    }


# ----------------------------------------------------------------------------------------------
# inputs and cache

def _source_files(root: Path = REPO_ROOT) -> list[Path]:
    files = [root / "pyproject.toml", root / "README.md", root / "LICENSE"]
    # the recipe itself: a change to how the image is made is a new image
    files += [root / "devtools" / "tidal_dev" / "lab" / name for name in ("image.py", "oci.py")]
    for dirpath, dirnames, filenames in os.walk(root / "controllers"):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
        files.extend(Path(dirpath) / f for f in sorted(filenames) if not f.endswith((".pyc", ".pyo")))
    return files


def _apt_inputs(sources: Path | None = None, apt_options: Sequence[Path] | None = None) -> tuple[Path, list[Path]]:
    if sources is None:
        sources = next((p for p in HOST_SOURCES if p.is_file()), None)
        if sources is None:
            raise ImageBuildError(f"no apt sources file on this host ({' or '.join(map(str, HOST_SOURCES))}): "
                                  "pass --sources")
    elif not sources.is_file():
        raise ImageBuildError(f"the apt sources file {sources} does not exist")
    if apt_options is None:
        apt_options = [p for p in HOST_APT_OPTIONS if p.is_file()]
    for path in apt_options:
        if not Path(path).is_file():
            raise ImageBuildError(f"the apt option file {path} does not exist")
    return Path(sources), [Path(p) for p in apt_options]


def input_key(sources: Path | None = None, apt_options: Sequence[Path] | None = None,
              root: Path = REPO_ROOT) -> str:
    """Hash of what goes into the image: pyproject.toml, README/LICENSE, ``controllers/**``,
    this recipe (image.py, oci.py) and the apt sources and options (they decide the Debian package versions)."""
    if not (root / "pyproject.toml").is_file():
        raise ImageBuildError(f"{root} is not a source checkout of Tidal (no pyproject.toml): "
                              "the image is built from the sources")
    sources, apt_options = _apt_inputs(sources, apt_options)
    digest = hashlib.sha256()
    for path in _source_files(root):
        if path.is_file():
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    for path in [sources, *apt_options]:
        digest.update(b"apt\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def image_cache_dir() -> Path:
    return cache_root() / "image"


def archive_path(key: str | None = None) -> Path:
    """Where the archive of the current inputs is (or will be)."""
    return image_cache_dir() / (key or input_key()) / ARCHIVE_NAME


# ----------------------------------------------------------------------------------------------
# steps

def _default_log(message: str) -> None:
    print(f"tidal image: {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _step(log: Callable[[str], None], what: str, timings: dict[str, float]) -> Iterator[None]:
    log(f"{what} ...")
    started = time.monotonic()
    yield
    elapsed = time.monotonic() - started
    timings[what] = elapsed
    log(f"{what}: done in {elapsed:.1f}s")


def _run(cmd: list[str], what: str, *, cwd: Path | None = None, env: dict | None = None,
         timeout: float = 3600) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as err:
        raise ImageBuildError(f"{what}: {cmd[0]} is not installed") from err
    except subprocess.TimeoutExpired as err:
        raise ImageBuildError(f"{what} did not finish within {timeout:.0f}s") from err
    if proc.returncode != 0:
        raise ImageBuildError(f"{what} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-5000:]}")
    return proc


def _copy_sources(dst: Path, root: Path = REPO_ROOT) -> None:
    """A clean copy of what the wheel is built from (no build/ or egg-info left in the checkout)."""
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (root / name).is_file():
            shutil.copy2(root / name, dst / name)
    shutil.copytree(root / "controllers", dst / "controllers",
                    ignore=shutil.ignore_patterns(*_SKIP_DIRS, "*.egg-info", "*.pyc", "build"))


def build_wheels(src: Path, out: Path) -> list[Path]:
    """``pip wheel`` of the project in ``src``: its wheel and those of every dependency, in ``out``."""
    if sys.version_info[:2] != (3, 11):
        raise ImageBuildError("the wheels must be built by CPython 3.11 (the ABI of Debian bookworm's python3); "
                              f"this is {sys.version.split()[0]}: run with .venv/bin/python")
    out.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--wheel-dir", str(out),
          str(src)], "pip wheel (the project and its dependencies)")
    wheels = sorted(out.glob("*.whl"))
    own = [w for w in wheels if w.name.startswith(DISTRIBUTION.replace("-", "_") + "-")]
    if not own:
        raise ImageBuildError(f"pip wheel produced no {DISTRIBUTION} wheel in {out}")
    built_version = own[0].name.split("-")[1]
    if built_version != version():
        raise ImageBuildError(f"pyproject.toml says version {built_version} but the installed {DISTRIBUTION} is "
                              f"{version()}: run `make venv` so that the image reference matches")
    return wheels


def _dpkg_architecture() -> str:
    try:
        return subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as err:
        raise ImageBuildError("dpkg is missing: the image is built on Debian (or a derivative) "
                              "with mmdebstrap") from err


def _customize_script() -> str:
    """Run inside the new root filesystem (chroot): the venv, the wheels, the web console, the user."""
    pip = (f"{PREFIX}/bin/pip install --no-index --find-links /tmp/tidal-stage/wheels --no-cache-dir "
           f"--disable-pip-version-check --root-user-action=ignore --quiet {DISTRIBUTION}=={version()}")
    return "\n".join([
        "set -e",
        f"python3 -m venv {PREFIX}",
        pip,
        f"mv /tmp/tidal-stage/web {WEB_DIR}",
        f"groupadd --gid {USER_ID} {USER_NAME}",
        f"useradd --uid {USER_ID} --gid {USER_ID} --home-dir /home/{USER_NAME} --create-home "
        f"--shell /usr/sbin/nologin {USER_NAME}",
    ])


def mmdebstrap_command(out: Path, stage: Path, sources: Path, apt_options: Sequence[Path]) -> list[str]:
    """The mmdebstrap call that makes the root filesystem tarball ``out`` (``stage`` holds
    ``wheels/`` and ``web/``, copied into the chroot's /tmp, which mmdebstrap empties at the end)."""
    if any(c.isspace() for c in str(stage)):
        raise ImageBuildError(f"the staging directory {stage} contains whitespace, which mmdebstrap's "
                              "copy-in hook cannot take: set TIDAL_LAB_CACHE to a path without spaces")
    cleanup = " ".join(f'"$1"{p}' for p in ("/etc/resolv.conf", "/etc/hostname", "/etc/apt/sources.list",
                                            "/etc/apt/apt.conf.d/99mmdebstrap"))
    cmd = ["mmdebstrap", "--variant=minbase", "--format=tar", "--include=" + ",".join(DEBIAN_PACKAGES)]
    cmd += [f"--aptopt={p}" for p in apt_options]
    cmd += [f"--dpkgopt={o}" for o in DPKG_OPTIONS]
    cmd += [
        f"--customize-hook=copy-in {stage} /tmp",
        f"--customize-hook=chroot \"$1\" /bin/sh -c {shlex.quote(_customize_script())}",
        # the host's apt sources and options, resolv.conf and hostname stay out of the image
        f'--customize-hook=rm -rf {cleanup} "$1"/etc/apt/sources.list.d/*',
        SUITE, str(out), str(sources),
    ]
    return cmd


def _mirror_hosts(sources: Path) -> set[str]:
    """Host names of the apt mirrors and the package index in use (to check that none ends up in
    the image); read at run time, never written anywhere."""
    text = sources.read_text(errors="replace")  # comments too: they may name the mirror behind the URIs
    try:
        text += subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                               timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        pass
    urls = re.findall(r"[a-z][a-z0-9+.-]*://[^\s'\"]+", text)
    return {host for host in (urlsplit(url).hostname for url in urls) if host}


def _check_no_mirror_names(rootfs_tar: Path, hosts: set[str]) -> None:
    """Every file outside /usr (where files of Debian's packages legitimately name Debian's own mirror)."""
    if not hosts:
        return
    needles = [h.encode() for h in hosts]
    with tarfile.open(rootfs_tar, "r:") as tar:
        for info in tar:
            name = info.name.lstrip("./")
            if not info.isreg() or name.startswith("usr/") or info.size > (16 << 20):
                continue
            data = tar.extractfile(info).read()
            if any(n in data for n in needles):
                raise ImageBuildError(f"/{name} in the root filesystem names a package mirror of this host; "
                                      "the image must not carry it")


def build_image(force: bool = False, log: Callable[[str], None] | None = None, *,
                sources: Path | None = None, apt_options: Sequence[Path] | None = None,
                timings: dict[str, float] | None = None) -> Path:
    """Build the image archive unless the current inputs are built already; return its path.

    ``timings`` (when given) receives the seconds each step took.
    """
    log = log or _default_log
    timings = {} if timings is None else timings
    sources, apt_options = _apt_inputs(sources, apt_options)
    key = input_key(sources, apt_options)
    out = archive_path(key)
    if out.is_file() and not force:
        log(f"{image_reference()} is built: {out}")
        return out
    if shutil.which("mmdebstrap") is None:
        raise ImageBuildError("mmdebstrap is not installed: install the Debian package mmdebstrap "
                              "(`make image` does)")
    image_cache_dir().mkdir(parents=True, exist_ok=True)
    with open(image_cache_dir() / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.is_file() and not force:  # built by a concurrent build meanwhile
            return out
        work = image_cache_dir() / f"{key}.work{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        try:
            _build(work, out, sources, apt_options, log, timings)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        _prune(keep=out.parent)
    log(f"{image_reference()}: {out} ({out.stat().st_size / 1e6:.0f} MB)")
    return out


def _build(work: Path, out: Path, sources: Path, apt_options: list[Path], log, timings) -> None:
    from tidal.console.webbuild import WebBuildError, build_web

    stage = work / "tidal-stage"
    (stage / "wheels").mkdir(parents=True)
    with _step(log, "web console", timings):
        try:
            web = build_web(log=log)
        except WebBuildError as err:
            raise ImageBuildError(f"the web console cannot be built: {err}") from err
        shutil.copytree(web, stage / "web")
    with _step(log, "wheels (pip wheel)", timings):
        (work / "src").mkdir()
        _copy_sources(work / "src")
        build_wheels(work / "src", stage / "wheels")
    rootfs = work / "rootfs.tar"
    with _step(log, "root filesystem (mmdebstrap)", timings):
        _run(mmdebstrap_command(rootfs, stage, sources, apt_options), "mmdebstrap", cwd=work)
        _check_no_mirror_names(rootfs, _mirror_hosts(sources))
    with _step(log, "layer", timings):
        layer = oci.layer_from_tar(rootfs, work / "layer.tar.gz", compresslevel=GZIP_LEVEL)
        rootfs.unlink()
    with _step(log, "archive", timings):
        config = oci.image_config([layer], cmd=CMD, env=ENV, user=f"{USER_ID}:{USER_ID}", working_dir="/",
                                  labels=labels(), architecture=_dpkg_architecture())
        out.parent.mkdir(parents=True, exist_ok=True)
        oci.write_oci_archive(out, [layer], config, image_reference(),
                              annotations={k: v for k, v in labels().items()
                                           if k.endswith((".version", ".source", ".licenses"))})


def _prune(keep: Path) -> None:
    """Drop archives of older inputs, except the newest other one (a concurrent user may hold it)."""
    others = sorted((p for p in image_cache_dir().iterdir() if p.is_dir() and p != keep and ".work" not in p.name),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for old in others[1:]:
        shutil.rmtree(old, ignore_errors=True)


# ----------------------------------------------------------------------------------------------
# containerd

def archive_image(archive: Path) -> tuple[str, str, str]:
    """(image name, manifest digest, platform) recorded in an archive's index.json."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise ImageBuildError(f"{archive} is not an OCI image layout archive (no index.json)")
        entry = json.load(member)["manifests"][0]
    platform = entry.get("platform", {})
    return (entry["annotations"]["io.containerd.image.name"], entry["digest"],
            f"{platform.get('os', 'linux')}/{platform.get('architecture', 'amd64')}")


def import_image(archive: Path, ctr: str | Path, socket: str | Path, snapshotter: str | None = None) -> str:
    """Import ``archive`` into containerd's ``k8s.io`` namespace (what the kubelet sees) and
    return the image reference. Idempotent: importing the same archive again changes nothing."""
    name, digest, platform = archive_image(Path(archive))
    base = [str(ctr), "--address", str(socket), "-n", "k8s.io"]
    cmd = [*base, "images", "import", "--local", "--platform", platform]
    if snapshotter:
        cmd += ["--snapshotter", snapshotter]
    cmd.append(str(archive))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0 and "flag provided but not defined: -local" in proc.stderr:
            cmd.remove("--local")  # containerd < 1.7: import is always local
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except FileNotFoundError as err:
        raise ImageBuildError(f"ctr is not at {ctr}") from err
    if proc.returncode != 0:
        raise ImageBuildError(f"ctr images import of {archive} into {socket} failed: "
                              f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
    listed = subprocess.run([*base, "images", "ls", f"name=={name}"], capture_output=True, text=True, timeout=120)
    if digest not in listed.stdout:
        raise ImageBuildError(f"{name} is not in containerd ({socket}) with digest {digest} after the import: "
                              f"{(listed.stderr or listed.stdout).strip()[-1000:]}")
    return name


# ----------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tidal_dev.lab.image", description=__doc__.split("\n\n")[0])
    p.add_argument("--force", action="store_true", help="rebuild even when the current inputs are built")
    p.add_argument("--sources", type=Path, help="apt sources file (default: this host's)")
    p.add_argument("--aptopt", type=Path, action="append", help="apt option file (default: this host's)")
    p.add_argument("--import-to", metavar="CONTAINERD_SOCKET", help="import the archive into this containerd")
    p.add_argument("--ctr", default="ctr", help="ctr binary for --import-to (default: ctr on PATH)")
    p.add_argument("--snapshotter", help="snapshotter to unpack into with --import-to")
    args = p.parse_args(argv)
    try:
        archive = build_image(force=args.force, sources=args.sources, apt_options=args.aptopt)
        if args.import_to:
            _default_log(f"imported {import_image(archive, args.ctr, args.import_to, args.snapshotter)} "
                         f"into {args.import_to}")
    except ImageBuildError as err:
        print(f"tidal image: {err}", file=sys.stderr)
        return 1
    print(archive)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
