"""tidal-manager's leader election: what it logs when the Lease cannot be written, expiry on
this replica's own clock (not the holder's renewTime), the release on the way out."""
import asyncio
import copy
import datetime

import pytest

from tidal.kube import api_error, error_summary
from tidal.manager.leader import LeaderElector, _micro_time, lease_free, observed_expired


def _parse_time(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_lease_errors_are_logged_as_one_line_with_the_servers_message():
    err = api_error(404, "Not Found", '{"kind":"Status","message":"namespaces \\"tidal-system\\" not found","code":404}')
    assert error_summary(err) == '404 Not Found: namespaces "tidal-system" not found'
    assert error_summary(TimeoutError()) == "TimeoutError"
    assert error_summary(OSError("connection refused")) == "connection refused"


def test_lease_times_are_micro_time():
    now = datetime.datetime(2026, 11, 25, 14, 0, 0, 123456, tzinfo=datetime.timezone.utc)
    assert _micro_time(now) == "2026-11-25T14:00:00.123456Z"
    assert _parse_time(_micro_time(now)) == now


@pytest.mark.parametrize("spec, free", [
    pytest.param({"holderIdentity": "a", "renewTime": "t", "leaseDurationSeconds": 15}, False, id="held"),
    pytest.param({"holderIdentity": "", "renewTime": "t", "leaseDurationSeconds": 1}, True, id="released"),
    pytest.param({"holderIdentity": "a", "leaseDurationSeconds": 15}, True, id="never-renewed"),
    pytest.param({"holderIdentity": "a", "renewTime": "t"}, True, id="no-duration"),
])
def test_lease_free(spec, free):
    assert lease_free(spec) is free


@pytest.mark.parametrize("observed_at, now, expired", [
    pytest.param(100.0, 115.0, False, id="at-its-duration-still-held"),
    pytest.param(100.0, 115.1, True, id="past-its-duration"),
])
def test_observed_expired(observed_at, now, expired):
    assert observed_expired(observed_at, 15, now) is expired


class LeaseAPI:
    """One Lease in memory, with the API server's optimistic concurrency left out."""

    def __init__(self, spec=None):
        self.lease = None if spec is None else {"metadata": {"name": "l"}, "spec": spec}

    async def get(self, path):
        if self.lease is None:
            raise api_error(404, "NotFound", {})
        return copy.deepcopy(self.lease)

    async def create(self, path, body):
        self.lease = body

    async def replace(self, path, body):
        self.lease = body


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_a_lease_renewed_is_not_taken_whatever_its_renew_time_says():
    """The holder's clock runs a minute behind this replica's: its renewTime always looks expired
    by the wall clock (the rule before: this replica took a lease being renewed, and both
    worked). Judged on this replica's clock from when it saw each renewal: never expired while
    the record changes; taken once it has stood unchanged for the lease's duration."""
    clock = Clock()
    behind = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=60)
    api = LeaseAPI({"holderIdentity": "holder", "renewTime": _micro_time(behind), "leaseDurationSeconds": 15})
    follower = LeaderElector(api, "l", "ns", "follower", clock=clock)

    async def scenario():
        for i in range(20):  # the holder renews every 2 s (its clock still a minute behind)
            clock.now += 2
            api.lease["spec"]["renewTime"] = _micro_time(behind + datetime.timedelta(seconds=2 * i))
            assert not await follower.try_acquire_or_renew()
        clock.now += 15  # the holder stopped renewing: unchanged for exactly the duration
        assert not await follower.try_acquire_or_renew()
        clock.now += 0.5
        assert await follower.try_acquire_or_renew()
    asyncio.run(scenario())
    assert api.lease["spec"]["holderIdentity"] == "follower" and api.lease["spec"]["leaseTransitions"] == 1


def test_a_replica_new_to_a_dead_lease_waits_its_duration_and_a_released_one_is_taken_at_once():
    clock = Clock()
    old = _micro_time(datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc))
    api = LeaseAPI({"holderIdentity": "gone", "renewTime": old, "leaseDurationSeconds": 15})
    replica = LeaderElector(api, "l", "ns", "new", clock=clock)

    async def scenario():
        assert not await replica.try_acquire_or_renew()  # seen now for the first time
        clock.now += 15.5
        assert await replica.try_acquire_or_renew()
        api.lease["spec"].update(holderIdentity="", leaseDurationSeconds=1)  # released by "new"'s successor
        other = LeaderElector(api, "l", "ns", "other", clock=clock)
        assert await other.try_acquire_or_renew()
    asyncio.run(scenario())
    assert api.lease["spec"]["holderIdentity"] == "other"


def test_a_leader_stopping_releases_the_lease_after_its_work_has_ended():
    api = LeaseAPI()
    order = []

    async def scenario():
        elector = LeaderElector(api, "l", "ns", "a", retry_seconds=0.05)
        stop = asyncio.Event()

        async def work():
            try:
                await asyncio.Event().wait()
            finally:
                order.append(("work ended", api.lease["spec"]["holderIdentity"]))

        runner = asyncio.create_task(elector.run(work, stop))
        while not elector.is_leader:
            await asyncio.sleep(0.01)
        stop.set()
        await asyncio.wait_for(runner, 10)
        follower = LeaderElector(api, "l", "ns", "b")
        return await follower.try_acquire_or_renew()

    assert asyncio.run(scenario()) is True  # at once: no lease duration to wait
    assert order == [("work ended", "a")]  # the lease was still held while the work ran
    assert api.lease["spec"]["holderIdentity"] == "b"


def test_the_leader_stops_its_work_before_its_lease_expires_for_others():
    """Slow renewals that still succeed, then an API server that stops answering: the work
    stopped 15.9 s after the last renewTime on a 15 s lease (the deadline counted from when a
    renewal returned, and checked only after another attempt). Scaled down: a 7 s lease, a 4 s
    deadline, attempts every 0.8 s taking up to 1.6 s: the work must stop by 5.6 s (the old
    rule let it run to about 8)."""
    class SlowLeaseAPI(LeaseAPI):
        def __init__(self):
            super().__init__()
            self.slow, self.hang = False, False

        async def get(self, path):
            if self.hang:
                await asyncio.sleep(3600)
            if self.slow:  # the renewal still succeeds, just late
                await asyncio.sleep(1.56)
            return await super().get(path)

    async def main():
        api = SlowLeaseAPI()
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
