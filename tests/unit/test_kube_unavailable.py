"""Issue 15: a call that failed because the API server was away is told from a bug
(tidal.kube.errors.unavailable), and the oversell loop logs it as one line, no traceback."""
import asyncio
import logging
import socket

import aiohttp
import pytest

from tidal.kube.errors import TooManyRequests, api_error, unavailable
from tidal.manager.oversell import loop
from tidal_dev.lab.pytest_plugin import wait_for_async


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]   # closed again: nothing listens there


async def _connect_refused():
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{_refused_port()}/"):
            pass


def _error_of(coro) -> BaseException:
    try:
        asyncio.run(coro)
    except BaseException as err:  # noqa: BLE001
        return err
    raise AssertionError("no error")


@pytest.mark.parametrize("err, expected", [
    (api_error(503, "Service Unavailable"), True),
    (TooManyRequests(429, "storage is (re)initializing"), True),
    (ConnectionResetError("reset"), True),
    (asyncio.TimeoutError(), True),
    (KeyError("status"), False),
    (TypeError("a bug"), False),
])
def test_unavailable(err, expected):
    assert unavailable(err) is expected


def test_a_real_connection_refused_is_unavailable():
    assert unavailable(_error_of(_connect_refused()))


class _AwayAPI:
    """Every call meets a real refused connection, as the leader does while the API server is away."""

    async def get_optional(self, path, params=None):
        await _connect_refused()


def test_the_oversell_loop_logs_an_unreachable_api_server_as_one_line(caplog):
    def failures():
        return [r for r in caplog.records if r.getMessage().startswith("oversell cycle failed")]

    async def run():
        task = asyncio.create_task(loop.run_master(_AwayAPI(), 0.01))
        await wait_for_async(lambda: len(failures()) >= 2 or task.done(), 30, "two failed cycles")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    with caplog.at_level(logging.WARNING, logger=loop.__name__):
        asyncio.run(run())
    failed = failures()
    assert failed and all(r.exc_info is None for r in failed), [r.getMessage() for r in failed]
    assert "Connect call failed" in failed[0].getMessage() or "Cannot connect" in failed[0].getMessage()
