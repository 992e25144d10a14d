"""tidal-manager's leader election: what it logs when the Lease cannot be written."""


def test_lease_errors_are_logged_as_one_line_with_the_servers_message():
    from kubernetes_asyncio.client.exceptions import ApiException
    from tidal.manager.leader import api_error_summary
    err = ApiException(status=404, reason="Not Found")
    err.body = '{"kind":"Status","message":"namespaces \\"tidal-system\\" not found","code":404}'
    assert api_error_summary(err) == '404 Not Found: namespaces "tidal-system" not found'
    assert api_error_summary(TimeoutError()) == "TimeoutError"
    assert api_error_summary(OSError("connection refused")) == "connection refused"
