"""The agent's start while the API server does not answer (tidal.agent.run.wait_synced and the
health endpoints): it waits for its watches' first lists with a warning naming what is missing,
never a traceback or an exit; it stops cleanly when told to; /healthz stays 200 while it waits
(a restart would not bring the API server back) and /readyz is 200 only once it acts."""
import asyncio
import logging
import urllib.error
import urllib.request

from prometheus_client import CollectorRegistry

from tidal.agent.run import serve_health, wait_synced
from tidal_dev.lab.pytest_plugin import wait_for_async


class _Watch:
    def __init__(self, what, error=None):
        self.what, self.last_error, self.synced = what, error, asyncio.Event()


def test_waits_past_the_warning_and_returns_once_every_watch_synced(caplog):
    async def scenario():
        pods, node = _Watch("pods on n1", ConnectionRefusedError("connection refused")), _Watch("node n1")
        node.synced.set()
        waiting = asyncio.create_task(wait_synced((pods, node), asyncio.Event(), warn_every=0.05))
        await wait_for_async(lambda: caplog.records, 30, "its first warning")
        assert not waiting.done()
        pods.synced.set()
        return await asyncio.wait_for(waiting, 5)
    with caplog.at_level(logging.WARNING, logger="tidal.agent.run"):
        assert asyncio.run(scenario()) is True
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings and all("pods on n1 (connection refused)" in w and "node n1" not in w for w in warnings)


def test_stop_while_waiting_returns_false_at_once():
    async def scenario():
        stop = asyncio.Event()
        waiting = asyncio.create_task(wait_synced((_Watch("policy"),), stop, warn_every=60))
        await asyncio.sleep(0)
        stop.set()
        return await asyncio.wait_for(waiting, 5)
    assert asyncio.run(scenario()) is False


def test_already_synced_returns_true_without_waiting():
    async def scenario():
        watch = _Watch("node")
        watch.synced.set()
        return await asyncio.wait_for(wait_synced((watch,), asyncio.Event()), 1)
    assert asyncio.run(scenario()) is True


def _status(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def test_healthz_and_readyz_answer_from_their_own_predicates():
    state = {"alive": True, "ready": False}

    async def scenario():
        runner = await serve_health("127.0.0.1", 0, CollectorRegistry(), lambda: state["alive"],
                                    lambda: state["ready"])
        port = runner.addresses[0][1]
        base = f"http://127.0.0.1:{port}"
        try:
            seen = []
            for alive, ready in ((True, False), (True, True), (False, False)):
                state.update(alive=alive, ready=ready)
                seen.append(await asyncio.to_thread(lambda: (_status(base + "/healthz"), _status(base + "/readyz"))))
            return seen
        finally:
            await runner.cleanup()
    assert asyncio.run(scenario()) == [(200, 503), (200, 200), (503, 503)]
