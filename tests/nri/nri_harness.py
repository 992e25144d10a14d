"""Drives tests/nri/harness (NRI's runtime side, github.com/containerd/nri/pkg/adaptation) and
runs Tidal's NRI plugin next to it; shared by the tests here and bench/nri.py.

The harness is built from its pinned go.mod/go.sum with the local Go toolchain
(GOTOOLCHAIN=local, CGO_ENABLED=0) and cached under ~/.cache/tidal/nri/<nri-version>/<hash>/.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import queue
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

HARNESS_DIR = Path(__file__).resolve().parent / "harness"
CACHE_ROOT = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tidal" / "nri"


def nri_version() -> str:
    match = re.search(r"^\s*github\.com/containerd/nri (v\S+)", (HARNESS_DIR / "go.mod").read_text(), re.M)
    if not match:
        raise RuntimeError(f"{HARNESS_DIR / 'go.mod'}: no github.com/containerd/nri requirement")
    return match.group(1)


def build_harness() -> Path:
    """The harness binary, built once per source version."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((HARNESS_DIR / name).read_bytes())
    out = CACHE_ROOT / nri_version() / digest.hexdigest()[:16] / "nri-harness"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GOTOOLCHAIN="local", CGO_ENABLED="0", GOFLAGS="-mod=readonly")
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    subprocess.run(["go", "build", "-trimpath", "-o", str(tmp), "."], cwd=HARNESS_DIR, env=env, check=True,
                   timeout=900)
    tmp.rename(out)
    return out


class HarnessError(RuntimeError):
    pass


class Harness:
    """The runtime side: one harness process on ``socket``; ``cmd`` sends a command, returns its answer.

    Lines that are events (plugin-requested updates, synchronizations) are kept in ``events``.
    """

    def __init__(self, binary: Path, socket: Path, *, request_timeout: str = "2s",
                 registration_timeout: str = "5s") -> None:
        self.socket = socket
        self.proc = subprocess.Popen(
            [str(binary), "-socket", str(socket), "-request-timeout", request_timeout,
             "-registration-timeout", registration_timeout],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.events: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self._answers: queue.Queue = queue.Queue()
        self._events_changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        ready = self._answers.get(timeout=30)
        if ready.get("event") != "ready":
            raise HarnessError(f"harness did not start: {ready}")

    def _read(self) -> None:
        for line in self.proc.stdout:
            msg = json.loads(line)
            if "op" in msg or msg.get("event") == "ready":
                self._answers.put(msg)
            else:
                with self._events_changed:
                    self.events.append(msg)
                    self._events_changed.notify_all()
        self._answers.put({"op": None, "ok": False, "error": "harness exited"})

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip("\n"))

    def cmd(self, op: str, timeout: float = 30, check: bool = True, **fields: Any) -> dict[str, Any]:
        self.proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.proc.stdin.flush()
        answer = self._answers.get(timeout=timeout)
        if check and not answer.get("ok"):
            raise HarnessError(f"{op}: {answer.get('error')}\n" + "\n".join(self.stderr[-20:]))
        return answer

    def wait_event(self, kind: str, predicate=lambda e: True, timeout: float = 10) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._events_changed:
            while True:
                for event in self.events:
                    if event.get("event") == kind and predicate(event):
                        return event
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no {kind} event in {timeout}s; events: {self.events}")
                self._events_changed.wait(left)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.cmd("exit", timeout=10, check=False)
            except (queue.Empty, BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Runtime:
    """A harness that can be restarted like a runtime: a new process on the same socket, with
    the pods and containers of the old one (a runtime's persisted state)."""

    def __init__(self, binary: Path, socket: Path, **options: str) -> None:
        self.binary, self.socket, self.options = binary, socket, options
        self.harness = Harness(binary, socket, **options)

    def __getattr__(self, name: str):
        return getattr(self.harness, name)

    def restart(self, down_seconds: float = 0.0) -> None:
        state = self.harness.cmd("dump")
        self.harness.close()
        time.sleep(down_seconds)
        self.harness = Harness(self.binary, self.socket, **self.options)
        self.harness.cmd("restore", pods=state["pods"], containers=state["containers"])
        self.harness.cmd("start")


class PluginThread:
    """Tidal's NRI plugin running in its own event loop thread (the harness calls block)."""

    def __init__(self, socket: Path, **kwargs: Any) -> None:
        from tidal.agent.nri.plugin import TidalNRIPlugin
        self.loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        kwargs.setdefault("backoff", (0.05, 0.5))
        self.plugin: TidalNRIPlugin | None = None
        made = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)

            async def main() -> None:
                self._stop = asyncio.Event()
                self.plugin = TidalNRIPlugin(socket, **kwargs)
                made.set()
                await self.plugin.run(self._stop)

            self.loop.run_until_complete(main())

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        made.wait(10)

    def call(self, coro, timeout: float = 10):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(10)
