"""Fixtures for the NRI plugin tests: the runtime harness (NRI's own runtime side) and the plugin."""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nri_harness import PluginThread, Runtime, build_harness  # noqa: E402


@pytest.fixture(scope="session")
def harness_binary() -> Path:
    if shutil.which("go") is None:
        pytest.fail("the NRI tests need the Go toolchain (go) to build the runtime harness")
    return build_harness()


@pytest.fixture
def socket_dir():
    # unix socket paths are limited to 107 bytes: keep them short, outside pytest's tmp_path
    path = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def runtime(harness_binary, socket_dir):
    """A started runtime (harness) with no plugin yet; ``runtime.socket`` is its NRI socket."""
    h = Runtime(harness_binary, socket_dir / "nri.sock", request_timeout="1s")
    h.cmd("start")
    yield h
    h.close()


@pytest.fixture
def start_plugin(runtime):
    started: list[PluginThread] = []

    def start(**kwargs) -> PluginThread:
        plugin = PluginThread(runtime.socket, **kwargs)
        started.append(plugin)
        return plugin

    yield start
    for plugin in started:
        plugin.stop()
