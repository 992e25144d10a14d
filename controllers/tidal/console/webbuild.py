# SPDX-License-Identifier: Apache-2.0
"""Builds the web console (``web/``: an npm project with a committed lockfile) into the cache,
``~/.cache/tidal/lab/console-web/<key>/`` (:func:`tidal.cache.cache_root`), where the key hashes the lockfile and every source file.

``npm ci`` installs exactly the locked versions into a copy of the project under the cache
(the source tree gets no ``node_modules``); esbuild bundles ECharts and the pages into one
script. Same sources, same key: a second build is a no-op. Nothing is fetched at run time.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from tidal.cache import cache_root

__all__ = ["SOURCE_DIR", "WebBuildError", "build_web", "built_dir"]

SOURCE_DIR = Path(__file__).resolve().parent / "web"
_INPUTS = ("package.json", "package-lock.json", "build.mjs")


class WebBuildError(RuntimeError):
    """npm or the bundler failed; the message carries their output."""


def _files() -> list[Path]:
    return [SOURCE_DIR / name for name in _INPUTS] + sorted((SOURCE_DIR / "src").rglob("*"))


def source_key() -> str:
    digest = hashlib.sha256()
    for path in _files():
        if path.is_file():
            digest.update(str(path.relative_to(SOURCE_DIR)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def built_dir() -> Path:
    """Where the build of the current sources is (or will be)."""
    return cache_root() / "console-web" / source_key()


def _run(cmd: list[str], cwd: Path) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "npm_config_update_notifier": "false", "npm_config_fund": "false",
                               "npm_config_audit": "false"})
    if proc.returncode != 0:
        raise WebBuildError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}")


def build_web(force: bool = False, log=print) -> Path:
    """Build unless the current sources are built already; return the directory to serve."""
    out = built_dir()
    if (out / "index.html").is_file() and not force:
        return out
    if shutil.which("npm") is None:
        raise WebBuildError("npm is not installed: install the Debian package `npm` (make test does this)")
    work = cache_root() / "console-web" / "work"
    work.mkdir(parents=True, exist_ok=True)
    for name in _INPUTS:
        shutil.copy2(SOURCE_DIR / name, work / name)
    shutil.rmtree(work / "src", ignore_errors=True)
    shutil.copytree(SOURCE_DIR / "src", work / "src")
    log(f"building the web console into {out}")
    _run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], work)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    _run(["node", "build.mjs", str(tmp)], work)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out
