"""The webhook's context caches: what they keep of namespaces and the policy, the defaults before
they are synced, and a decision that follows a namespace's annotation through the server path."""

from __future__ import annotations

import asyncio
import time

import pytest
from tidal.api.policy import ColocationPolicy
from tidal.manager.admission.context import DEFAULT_CONTEXT
from tidal.manager.admission.context_cache import (
    NAMESPACES,
    POLICIES,
    AdmissionContexts,
    namespace_entry,
    policy_of,
)
from tidal.manager.admission.server import _context

OVERSELL = "colocation.tidal.io/oversell"


def namespace(name: str, annotations: dict | None = None, uid: str | None = None) -> dict:
    metadata = {"name": name, "uid": uid or f"uid-{name}", "resourceVersion": "1"}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"metadata": metadata}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(namespace("a", {OVERSELL: "false", "other": "x"}), ("a", {OVERSELL: "false"}),
                     id="only-the-annotations-a-review-reads"),
        pytest.param(namespace("b", {"other": "x"}), None, id="none-of-them-not-kept"),
        pytest.param(namespace("c"), None, id="no-annotations"),
        pytest.param(namespace("d", {OVERSELL: 7}), None, id="not-a-string-not-kept"),
    ],
)
def test_namespace_entry_keeps_only_what_a_review_reads(obj: dict, expected) -> None:
    entry = namespace_entry(obj)
    assert (entry if entry is None else (entry[0], dict(entry[1]))) == expected


@pytest.mark.parametrize(
    ("obj", "be_uses_batch_resources", "be_fallback_to_native"),
    [
        pytest.param(None, True, False, id="no-policy-defaults"),
        pytest.param({"spec": {}}, True, False, id="empty-spec-defaults"),
        pytest.param({"spec": {"overselling": {"beUsesBatchResources": False, "beFallbackToNative": True}}},
                     False, True, id="fields-read"),
        pytest.param({"spec": {"overselling": {"beUsesBatchResources": "no"}}}, True, False,
                     id="invalid-policy-defaults"),
    ],
)
def test_policy_of(obj, be_uses_batch_resources: bool, be_fallback_to_native: bool) -> None:
    overselling = policy_of(obj).overselling
    assert (overselling.be_uses_batch_resources, overselling.be_fallback_to_native) == \
        (be_uses_batch_resources, be_fallback_to_native)


class FakeAPI:
    """Lists of namespaces and policies by path, then watches that stay open (or scripted
    events per path)."""

    def __init__(self, namespaces: list[dict], policies: list[dict], events: dict | None = None) -> None:
        self.items = {NAMESPACES: namespaces, POLICIES: policies}
        self.events = events or {}

    async def get(self, path, params=None):
        return {"metadata": {"resourceVersion": "10"}, "items": self.items[path]}

    async def list_pages(self, path, params, limit=None):
        yield await self.get(path, params)

    async def watch(self, path, params, on_open=None):
        for event in self.events.pop(path, []):
            yield event
        await asyncio.sleep(3600)


async def run_until(contexts: AdmissionContexts, condition) -> None:
    task = asyncio.create_task(contexts.run())
    try:
        deadline = time.monotonic() + 5
        while not condition():
            assert time.monotonic() < deadline, "condition not met in time"
            await asyncio.sleep(0.01)
    finally:
        task.cancel()


def test_before_the_caches_have_listed_the_context_is_the_defaults() -> None:
    contexts = AdmissionContexts(FakeAPI([namespace("a", {OVERSELL: "false"})], []))
    assert not contexts.synced
    ctx = contexts.context("a")
    assert (dict(ctx.namespace_annotations), ctx.policy, ctx.namespace) == ({}, ColocationPolicy(), "a")


def test_synced_caches_give_the_namespaces_annotation_and_the_policy() -> None:
    policy = {"metadata": {"name": "default", "uid": "p", "resourceVersion": "3"},
              "spec": {"overselling": {"beFallbackToNative": True}}}
    added = namespace("late", {OVERSELL: "true"})
    api = FakeAPI([namespace("a", {OVERSELL: "false"}), namespace("b")], [policy],
                  events={NAMESPACES: [{"type": "ADDED", "object": added}]})
    contexts = AdmissionContexts(api)

    asyncio.run(run_until(contexts, lambda: contexts.synced and contexts.context("late").namespace_annotations))
    a = contexts.context("a")
    assert dict(a.namespace_annotations) == {OVERSELL: "false"}
    assert a.overselling.be_fallback_to_native is True
    assert dict(contexts.context("b").namespace_annotations) == {}
    assert dict(contexts.context("late").namespace_annotations) == {OVERSELL: "true"}


def test_the_server_decides_in_the_context_of_the_requests_namespace() -> None:
    class Contexts:
        def __init__(self):
            self.asked = []

        def context(self, namespace):
            self.asked.append(namespace)
            return DEFAULT_CONTEXT

    contexts = Contexts()
    assert _context(contexts, {"request": {"namespace": "team-a"}}) is DEFAULT_CONTEXT
    assert contexts.asked == ["team-a"]
    assert _context(None, {"request": {"namespace": "team-a"}}) is DEFAULT_CONTEXT

    class Broken:
        def context(self, namespace):
            raise RuntimeError("boom")

    assert _context(Broken(), None) is DEFAULT_CONTEXT
