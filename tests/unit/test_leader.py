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
