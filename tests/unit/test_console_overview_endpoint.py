"""GET /api/v1/overview and /api/v1/workflow through tidal-console's aiohttp app, against a fake
API server (the lab's tests/console/test_api.py does the same against the real one): the
overview needs list on NodeProfiles, nodes, pods and Events, each checked by a
SubjectAccessReview; Tidal's Events are read with one field-selected list per reason, bounded."""
from __future__ import annotations

import asyncio

import aiohttp
from aiohttp.test_utils import TestClient, TestServer

from tidal.api import qos
from tidal.console.overview import TIDAL_EVENT_REASONS
from tidal.console.server import EVENTS_PER_REASON, Console, ConsoleConfig

NODE = {"metadata": {"name": "n1", "labels": {qos.OVERSUBSCRIPTION_NODE_LABEL: "true"}}, "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
                   "allocatable": {qos.BATCH_CPU_RESOURCE: "0", qos.BATCH_MEMORY_RESOURCE: "0"}}}
PENDING = {"metadata": {"name": "job-0", "namespace": "batch", "annotations": {qos.QOS_ANNOTATION: "BE"}},
           "spec": {"containers": [{"name": "c", "resources": {"requests": {qos.BATCH_CPU_RESOURCE: "500"}}}]},
           "status": {"phase": "Pending"}}
EVICTED = {"metadata": {"name": "e1", "namespace": "batch"}, "reason": "TidalEvicted", "type": "Warning",
           "message": "m", "lastTimestamp": "2025-01-01T00:00:00Z", "count": 1,
           "involvedObject": {"kind": "Pod", "name": "job-1", "namespace": "batch"},
           "source": {"component": "tidal-agent", "host": "n1"}}


class FakeAPI:
    """The API server: a TokenReview accepts "token-<user>"; SubjectAccessReviews allow what
    `allowed` lists per user, as (verb, resource)."""

    def __init__(self, allowed: dict[str, set[tuple[str, str]]]) -> None:
        self.allowed = allowed
        self.gets: list[tuple[str, dict | None]] = []

    async def create(self, path, body, params=None):
        if body["kind"] == "TokenReview":
            user = body["spec"]["token"].removeprefix("token-")
            return {"status": {"authenticated": user in self.allowed, "user": {"username": user}}}
        attributes = body["spec"]["resourceAttributes"]
        allowed = (attributes["verb"], attributes["resource"]) in self.allowed.get(body["spec"]["user"], set())
        return {"status": {"allowed": allowed}}

    async def get(self, path, params=None):
        self.gets.append((path, params))
        if path == "/api/v1/nodes":
            return {"items": [NODE]}
        if path == "/api/v1/pods":
            return {"items": [PENDING]}
        if path == "/api/v1/events":
            reason = params["fieldSelector"].removeprefix("reason=")
            return {"items": [EVICTED] if reason == "TidalEvicted" else []}
        raise AssertionError(path)

    async def get_optional(self, path, params=None):
        return {"items": []}


READ = {("list", "nodeprofiles"), ("list", "nodes"), ("list", "pods"), ("list", "events")}


def _call(api: FakeAPI, user: str, path: str):
    async def run():
        async with aiohttp.ClientSession() as session:
            console = Console(api, ConsoleConfig(prometheus_url="http://127.0.0.1:9"), session)
            async with TestClient(TestServer(console.app())) as client:
                response = await client.get(path, headers={"Authorization": f"Bearer token-{user}"})
                return response.status, await response.json()
    return asyncio.run(run())


def test_the_overview_answers_with_the_pending_reason_and_the_events():
    api = FakeAPI({"viewer": READ})
    status, body = _call(api, "viewer", "/api/v1/overview")
    assert status == 200, body
    assert body["bePods"]["pendingPods"][0]["reason"] == "NoBatchCapacity"
    assert [e["object"]["name"] for e in body["events"]["items"]] == ["job-1"]
    event_lists = [params for path, params in api.gets if path == "/api/v1/events"]
    assert event_lists == [{"fieldSelector": f"reason={reason}", "limit": EVENTS_PER_REASON}
                           for reason in TIDAL_EVENT_REASONS]


def test_the_overview_needs_list_on_events_too():
    api = FakeAPI({"viewer": READ - {("list", "events")}})
    status, body = _call(api, "viewer", "/api/v1/overview")
    assert status == 403 and body["error"]["message"] == "user 'viewer' may not list events"
    assert api.gets == []  # nothing read for a caller who may not see it


def test_the_workflow_needs_only_the_node_list_permission():
    status, body = _call(FakeAPI({"viewer": {("list", "nodeprofiles")}}), "viewer", "/api/v1/workflow")
    assert status == 200 and len(body["steps"]) == 4
    assert _call(FakeAPI({"nobody": set()}), "nobody", "/api/v1/workflow")[0] == 403


def test_an_empty_nodes_filter_is_a_400_naming_the_parameter():
    status, body = _call(FakeAPI({"viewer": READ}), "viewer", "/api/v1/monitoring/cluster?nodes=")
    assert status == 400 and body["error"]["fields"] == [
        {"field": "nodes", "message": "empty: name at least one node, or leave the parameter out for the whole "
                                      "cluster"}]
