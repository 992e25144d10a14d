"""tidal.kube: typed errors, the one Status reader, the verbs' wire format, paged lists, and the
Watcher's 410 handling (at the watch's start and during it), against a small API server on
loopback (aiohttp, real HTTP)."""
from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from tidal.kube import (ApiError, Conflict, Forbidden, Gone, KubeAPI, NotFound, ObjectWatch, TooManyRequests,
                        Watcher, api_error, error_summary, status_message, status_object)
from tidal_dev.lab.pytest_plugin import wait_for_async

STATUS_404 = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound",
              "message": 'nodes "n1" not found', "details": {"name": "n1", "kind": "nodes"}}
STATUS_422 = {"kind": "Status", "code": 422, "reason": "Invalid", "message": "ColocationPolicy is invalid",
              "details": {"causes": [{"field": "spec.overselling.ratioPercent", "message": "must be <= 100"}]}}


# -- errors and the Status reader -------------------------------------------------------------------

@pytest.mark.parametrize("code, kind", [(404, NotFound), (409, Conflict), (410, Gone), (403, Forbidden),
                                        (429, TooManyRequests), (422, ApiError), (500, ApiError)])
def test_each_code_has_its_error_type_all_of_them_api_errors(code, kind):
    err = api_error(code, "Reason", "")
    assert type(err) is kind and isinstance(err, ApiError) and err.status == code


def test_an_error_carries_the_status_objects_reason_message_and_causes():
    err = api_error(422, "", json.dumps(STATUS_422))
    assert (err.status, err.reason, err.message) == (422, "Invalid", "ColocationPolicy is invalid")
    assert err.causes == [{"field": "spec.overselling.ratioPercent", "message": "must be <= 100"}]
    assert str(err) == "422 Invalid: ColocationPolicy is invalid"
    # the HTTP reason phrase wins when there is one; a decoded Status (a watch's ERROR event) works too
    assert str(api_error(404, "Not Found", STATUS_404)) == '404 Not Found: nodes "n1" not found'
    assert str(api_error(503, "Service Unavailable", "<html>busy</html>")) == "503 Service Unavailable"
    assert api_error(503, "", b"").causes == []


@pytest.mark.parametrize("body, message", [
    (json.dumps(STATUS_404), 'nodes "n1" not found'),
    (json.dumps(STATUS_404).encode(), 'nodes "n1" not found'),
    (STATUS_404, 'nodes "n1" not found'),
    ("<html>proxy error</html>", ""), ("", ""), (None, ""), ("[1, 2]", ""), ('{"message": 7}', ""),
])
def test_the_status_reader_takes_any_body_and_never_raises(body, message):
    assert status_message(body) == message
    assert isinstance(status_object(body), dict)


def test_error_summaries_are_one_line():
    assert error_summary(api_error(409, "Conflict", '{"message": "the object has\\nbeen modified"}')) == \
        "409 Conflict: the object has been modified"
    assert error_summary(api_error(502, "Bad Gateway", "<html>\n</html>")) == "502 Bad Gateway <html> </html>"
    assert error_summary(TimeoutError()) == "TimeoutError"
    assert error_summary(OSError("connection refused")) == "connection refused"


# -- a small API server ---------------------------------------------------------------------------

class FakeServer:
    """Pods at /api/v1/pods (list, paged list, watch) and a catch-all that records requests."""

    def __init__(self) -> None:
        self.pods = {f"p{i}": {"metadata": {"name": f"p{i}", "uid": f"u{i}", "resourceVersion": "10"}}
                     for i in range(5)}
        self.list_version = "10"
        self.lists: list[dict] = []
        self.watches: list[dict] = []
        #: what each watch answers, in order: ("status", code, Status) or ("events", [event, ...])
        self.watch_script: list[tuple] = []
        self.requests: list[tuple[str, str, dict, str, str]] = []

    async def pods_handler(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        if query.get("watch") == "true":
            self.watches.append(query)
            step = self.watch_script.pop(0) if self.watch_script else ("events", [])
            if step[0] == "status":
                return web.json_response(step[2], status=step[1])
            response = web.StreamResponse()
            response.content_type = "application/json"
            await response.prepare(request)
            for event in step[1]:
                await response.write(json.dumps(event).encode() + b"\n")
            if not step[1]:  # an idle watch: the server ends it after a moment
                await asyncio.sleep(0.05)
            await response.write_eof()
            return response
        self.lists.append(query)
        names = sorted(self.pods)
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or len(names) or 1)
        page = names[start:start + limit]
        meta = {"resourceVersion": self.list_version}
        if start + limit < len(names):
            meta["continue"] = str(start + limit)
        return web.json_response({"kind": "PodList", "metadata": meta, "items": [self.pods[n] for n in page]})

    async def other(self, request: web.Request) -> web.Response:
        body = await request.text()
        self.requests.append((request.method, request.path, dict(request.query),
                              request.headers.get("Content-Type", ""), body))
        if request.path.endswith("/missing"):
            return web.json_response(STATUS_404, status=404)
        return web.json_response({"echo": json.loads(body) if body else None})


@pytest.fixture
def server():
    return FakeServer()


def run_with(server: FakeServer, scenario):
    async def main():
        app = web.Application()
        app.router.add_get("/api/v1/pods", server.pods_handler)
        app.router.add_route("*", "/{tail:.*}", server.other)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            async with KubeAPI(f"http://127.0.0.1:{port}", None, lambda: "t0k3n", user_agent="tidal-test") as api:
                return await asyncio.wait_for(scenario(api), timeout=20)
        finally:
            await runner.cleanup()
    return asyncio.run(main())


def test_error_answers_raise_their_type_with_the_servers_message(server):
    async def scenario(api):
        with pytest.raises(NotFound) as err:
            await api.get("/api/v1/nodes/missing")
        assert err.value.message == 'nodes "n1" not found' and err.value.reason == "Not Found"
        assert await api.get_optional("/api/v1/nodes/missing") is None
    run_with(server, scenario)


def test_the_verbs_send_their_methods_content_types_and_parameters(server):
    async def scenario(api):
        await api.create("/api/v1/namespaces/d/events", {"kind": "Event"})
        await api.replace("/apis/x/v1/things/a", {"metadata": {"resourceVersion": "3"}}, {"dryRun": "All"})
        await api.merge_patch("/api/v1/nodes/n", {"metadata": {"labels": {"a": None}}})
        await api.strategic_patch("/api/v1/nodes/n", {"metadata": {"annotations": {"b": "1"}}})
        await api.json_patch("/api/v1/nodes/n/status", [{"op": "add", "path": "/status/x", "value": 1}])
        await api.apply("/apis/x/v1/things/a", {"kind": "Thing"}, "tidal-test", force=True)
        await api.delete("/apis/x/v1/things/a", {"dryRun": None})
    run_with(server, scenario)
    methods = [(m, p, q, c.split(";")[0]) for m, p, q, c, _ in server.requests]
    assert methods == [
        ("POST", "/api/v1/namespaces/d/events", {}, "application/json"),
        ("PUT", "/apis/x/v1/things/a", {"dryRun": "All"}, "application/json"),
        ("PATCH", "/api/v1/nodes/n", {}, "application/merge-patch+json"),
        ("PATCH", "/api/v1/nodes/n", {}, "application/strategic-merge-patch+json"),
        ("PATCH", "/api/v1/nodes/n/status", {}, "application/json-patch+json"),
        ("PATCH", "/apis/x/v1/things/a", {"fieldManager": "tidal-test", "force": "true"}, "application/apply-patch+yaml"),
        ("DELETE", "/apis/x/v1/things/a", {}, ""),
    ]
    assert json.loads(server.requests[4][4]) == [{"op": "add", "path": "/status/x", "value": 1}]


def test_paged_lists_follow_the_continue_token(server):
    async def scenario(api):
        return [[i["metadata"]["name"] for i in page["items"]] async for page in api.list_pages("/api/v1/pods", limit=2)]
    assert run_with(server, scenario) == [["p0", "p1"], ["p2", "p3"], ["p4"]]
    assert [q.get("continue") for q in server.lists] == [None, "2", "4"]


# -- the Watcher ----------------------------------------------------------------------------------

def _event(kind, name, version, uid=None):
    return {"type": kind, "object": {"metadata": {"name": name, "uid": uid or f"u-{name}", "resourceVersion": version}}}


async def _until(predicate, what):
    await wait_for_async(predicate, 30, what, interval=0.02)


def test_watch_resumes_from_the_last_version_without_relisting(server):
    server.watch_script = [("events", [_event("ADDED", "new", "11"), _event("BOOKMARK", "", "12")]),
                           ("events", [_event("DELETED", "p0", "13", uid="u0")])]

    async def scenario(api):
        watcher = Watcher(api, "/api/v1/pods", "pods", label_selector="a=b")
        task = asyncio.create_task(watcher.run())
        await _until(lambda: len(server.watches) >= 3, "three watches")
        task.cancel()
        return watcher
    watcher = run_with(server, scenario)
    assert len(server.lists) == 1 and watcher.relists == 1
    assert [w["resourceVersion"] for w in server.watches[:3]] == ["10", "12", "13"]
    assert all(w["labelSelector"] == "a=b" and w["allowWatchBookmarks"] == "true" for w in server.watches)
    assert sorted(o["metadata"]["name"] for o in watcher.objects.values()) == ["new", "p1", "p2", "p3", "p4"]
    assert not watcher.failing


def test_410_at_the_watchs_start_relists_instead_of_retrying_the_stale_version(server):
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version: 10 (50)"}
    server.watch_script = [("status", 410, gone)]

    async def scenario(api):
        watcher = Watcher(api, "/api/v1/pods", "pods")
        await watcher.relist()
        server.list_version = "50"
        server.pods["p9"] = {"metadata": {"name": "p9", "uid": "u9", "resourceVersion": "50"}}
        task = asyncio.create_task(watcher.run())
        await _until(lambda: len(server.watches) >= 2, "a second watch")
        task.cancel()
        return watcher
    watcher = run_with(server, scenario)
    assert [w["resourceVersion"] for w in server.watches[:2]] == ["10", "50"]
    assert len(server.lists) == 2 and "u9" in watcher.objects
    assert watcher.failures == 0  # a 410 is not trouble: no backoff


def test_410_during_the_watch_relists(server):
    expired = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired",
                                           "message": "too old resource version"}}
    server.watch_script = [("events", [_event("ADDED", "new", "11"), expired])]

    async def scenario(api):
        watcher = Watcher(api, "/api/v1/pods", "pods")
        task = asyncio.create_task(watcher.run())
        await _until(lambda: len(server.lists) >= 2 and len(server.watches) >= 2, "a relist and a new watch")
        task.cancel()
        return watcher
    watcher = run_with(server, scenario)
    # the relisted state is the truth: the object seen only on the expired watch is gone
    assert sorted(o["metadata"]["name"] for o in watcher.objects.values()) == ["p0", "p1", "p2", "p3", "p4"]
    assert server.watches[1]["resourceVersion"] == "10"


def test_other_errors_back_off_and_keep_the_last_objects(server):
    forbidden = {"kind": "Status", "code": 403, "reason": "Forbidden", "message": "pods is forbidden"}
    server.watch_script = [("status", 403, forbidden)]

    async def scenario(api):
        watcher = Watcher(api, "/api/v1/pods", "pods")
        task = asyncio.create_task(watcher.run())
        await _until(lambda: watcher.failing, "the failure")
        state = (len(watcher.objects), isinstance(watcher.last_error, Forbidden), str(watcher.last_error))
        await _until(lambda: len(server.watches) >= 2 and not watcher.failing, "the retried watch")
        task.cancel()
        return state
    assert run_with(server, scenario) == (5, True, "403 Forbidden: pods is forbidden")
    assert len(server.lists) == 1  # the retry resumed: no relist


def test_resync_relists_and_paging_keeps_one_consistent_list(server):
    async def scenario(api):
        watcher = Watcher(api, "/api/v1/pods", "pods", page_size=2, resync_seconds=0.3,
                          transform=lambda o: o["metadata"]["name"] if o["metadata"]["name"] != "p3" else None)
        task = asyncio.create_task(watcher.run())
        await _until(lambda: watcher.relists >= 2, "a resync")
        task.cancel()
        return watcher
    watcher = run_with(server, scenario)
    assert sorted(watcher.objects.values()) == ["p0", "p1", "p2", "p4"]
    assert all(q["limit"] == "2" for q in server.lists) and len(server.lists) >= 6
    assert all(int(w["timeoutSeconds"]) <= 1 for w in server.watches)


def test_a_missing_collection_counts_as_empty(server):
    async def scenario(api):
        watcher = ObjectWatch(api, "/apis/x/v1/missing", "default")
        task = asyncio.create_task(watcher.run())
        await watcher.synced.wait()
        await _until(lambda: watcher.failing, "the failure")
        task.cancel()
        return watcher
    watcher = run_with(server, scenario)
    assert watcher.object is None and isinstance(watcher.last_error, NotFound)
