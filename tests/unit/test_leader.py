"""tidal-manager's leader election: what it logs when the Lease cannot be written."""
import datetime

from tidal.kube import api_error, error_summary
from tidal.manager.leader import _micro_time, _parse_time, lease_expired


def test_lease_errors_are_logged_as_one_line_with_the_servers_message():
    err = api_error(404, "Not Found", '{"kind":"Status","message":"namespaces \\"tidal-system\\" not found","code":404}')
    assert error_summary(err) == '404 Not Found: namespaces "tidal-system" not found'
    assert error_summary(TimeoutError()) == "TimeoutError"
    assert error_summary(OSError("connection refused")) == "connection refused"


def test_lease_times_round_trip_as_micro_time_and_expire_after_their_duration():
    now = datetime.datetime(2026, 11, 25, 14, 0, 0, 123456, tzinfo=datetime.timezone.utc)
    assert _micro_time(now) == "2026-11-25T14:00:00.123456Z"
    assert _parse_time(_micro_time(now)) == now
    assert _parse_time(None) is None and _parse_time("yesterday") is None
    assert not lease_expired(now, 15, now + datetime.timedelta(seconds=15))
    assert lease_expired(now, 15, now + datetime.timedelta(seconds=16))
    assert lease_expired(None, 15, now)


def test_the_leader_stops_its_work_before_its_lease_expires_for_others():
    """Slow renewals that still succeed, then an API server that stops answering: the work
    stopped 15.9 s after the last renewTime on a 15 s lease (the deadline counted from when a
    renewal returned, and checked only after another attempt). Scaled down: a 7 s lease, a 4 s
    deadline, attempts every 0.8 s taking up to 1.6 s: the work must stop by 5.6 s (the old
    rule let it run to about 8)."""
    import asyncio
    import copy

    from tidal.kube.errors import api_error
    from tidal.manager.leader import LeaderElector

    class LeaseAPI:
        def __init__(self):
            self.lease, self.slow, self.hang = None, False, False

        async def get(self, path):
            if self.hang:
                await asyncio.sleep(3600)
            if self.slow:  # the renewal still succeeds, just late
                await asyncio.sleep(1.56)
            if self.lease is None:
                raise api_error(404, "NotFound", {})
            return copy.deepcopy(self.lease)

        async def create(self, path, body):
            self.lease = body

        async def replace(self, path, body):
            self.lease = body

    async def main():
        api = LeaseAPI()
        elector = LeaderElector(api, "l", "ns", "a", lease_seconds=7, renew_deadline=4.0, retry_seconds=0.8)
        stopped = {}

        async def work():
            try:
                await asyncio.Event().wait()
            finally:
                stopped["at"] = datetime.datetime.now(datetime.timezone.utc)

        stop = asyncio.Event()
        runner = asyncio.create_task(elector.run(work, stop))
        await asyncio.sleep(1.2)
        api.slow = True
        await asyncio.sleep(3.6)
        api.slow, api.hang = False, True
        while "at" not in stopped:
            await asyncio.sleep(0.05)
        stop.set()
        runner.cancel()
        return (stopped["at"] - _parse_time(api.lease["spec"]["renewTime"])).total_seconds()

    after = asyncio.run(main())
    print(f"\nwork stopped {after:.2f} s after the last renewTime (lease 7 s)")
    assert after < 7.0
