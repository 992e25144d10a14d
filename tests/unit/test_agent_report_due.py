"""When the node agent writes its NodeProfile (tidal.agent.run.report_due): every report
interval, at once when the policy generation it reported is behind, and — issue 15 — a couple
of seconds after a failed write, so the node is reported again within seconds of the API
server's return instead of up to a whole interval later."""
import asyncio

import pytest

from tidal.agent.run import REPORT_RETRY_SECONDS, _report, report_due


@pytest.mark.parametrize("now, last, failed, behind, interval, due", [
    (0.0, None, False, False, 10.0, True),          # the first report
    (5.0, 0.0, False, False, 10.0, False),          # within the interval
    (10.0, 0.0, False, False, 10.0, True),          # the interval is over
    (5.0, 0.0, False, True, 10.0, True),            # a new policy generation: at once
    (1.0, 0.0, True, False, 10.0, False),           # failed: retried ...
    (REPORT_RETRY_SECONDS, 0.0, True, False, 10.0, True),   # ... after the retry delay
    (1.0, 0.0, True, False, 1.0, True),             # never later than the interval
])
def test_report_due(now, last, failed, behind, interval, due):
    assert report_due(now, last, failed, behind, interval) is due


class _API:
    def __init__(self, error=None):
        self.error = error

    async def request(self, **_):
        if self.error:
            raise self.error
        return {}


def test_a_failed_write_is_marked_failed_and_a_good_one_clears_it(caplog):
    reported, failed = [None], [False]
    asyncio.run(_report(_API(ConnectionRefusedError("connect call failed")), "n1", {}, 3, reported, failed))
    assert failed == [True] and reported == [None]
    assert "NodeProfile n1 not written: connect call failed" in caplog.text
    asyncio.run(_report(_API(), "n1", {}, 3, reported, failed))
    assert failed == [False] and reported == [3]
