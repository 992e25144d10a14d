# SPDX-License-Identifier: Apache-2.0
"""Who is calling and what they may do, answered by Kubernetes itself.

The caller's bearer token goes to the API server in a TokenReview; the user it names (with
groups, uid and extra) goes into a SubjectAccessReview for the permission the endpoint needs.
The console never trusts anything the caller says about itself. Answers are cached for a few
seconds (keyed by a hash of the token, never the token) so a page that makes ten calls does
not make twenty reviews; a revoked token or removed role binding takes effect within that TTL.
"""
from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from tidal.api import qos
from tidal.kube.client import KubeAPI

__all__ = ["Authorizer", "Permission", "READ_CLUSTER", "READ_NODES", "READ_POLICY", "User", "WRITE_NODES",
           "WRITE_POLICY", "PERMISSIONS", "bearer_token"]

CACHE_SECONDS = 10.0
CACHE_ENTRIES = 4096
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


@dataclass(frozen=True)
class Permission:
    """A Kubernetes resource attribute: verb on resource in group (optionally one name)."""

    verb: str
    resource: str
    group: str = ""
    name: str = ""

    def describe(self) -> str:
        res = f"{self.resource}.{self.group}" if self.group else self.resource
        return f"{self.verb} {res}" + (f" {self.name}" if self.name else "")


# Read: the node list and monitoring need list on NodeProfiles; the policy needs get.
READ_NODES = Permission("list", "nodeprofiles", qos.API_GROUP)
READ_POLICY = Permission("get", "colocationpolicies", qos.API_GROUP)
# The overview shows the cluster's nodes, pods and Events: list on each, besides READ_NODES.
READ_CLUSTER = (Permission("list", "nodes"), Permission("list", "pods"), Permission("list", "events"))
# Write: node switches need patch on nodes; policy updates need update on the policy.
WRITE_NODES = Permission("patch", "nodes")
WRITE_POLICY = Permission("update", "colocationpolicies", qos.API_GROUP)
PERMISSIONS = {"readNodes": READ_NODES, "readPolicy": READ_POLICY,
               "writeNodes": WRITE_NODES, "writePolicy": WRITE_POLICY}


@dataclass(frozen=True)
class User:
    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict, hash=False, compare=False)


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class _TTLCache:
    def __init__(self, ttl: float, size: int, clock=time.monotonic) -> None:
        self.ttl, self.size, self.clock = ttl, size, clock
        self._items: OrderedDict[Any, tuple[float, Any]] = OrderedDict()

    def get(self, key):
        item = self._items.get(key)
        if item is None or item[0] < self.clock():
            self._items.pop(key, None)
            return None
        return item[1]

    def put(self, key, value) -> None:
        self._items[key] = (self.clock() + self.ttl, value)
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)


class Authorizer:
    """TokenReview and SubjectAccessReview through `api` (acting as the console's own identity,
    which needs create on both)."""

    def __init__(self, api: KubeAPI, ttl: float = CACHE_SECONDS, audiences: list[str] | None = None) -> None:
        self.api = api
        self.audiences = audiences
        self._users = _TTLCache(ttl, CACHE_ENTRIES)
        self._decisions = _TTLCache(ttl, CACHE_ENTRIES)

    async def authenticate(self, token: str) -> User | None:
        """The user the API server says the token belongs to, or None (invalid, expired)."""
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self._users.get(key)
        if cached is not None:
            return cached or None
        spec: dict[str, Any] = {"token": token}
        if self.audiences:
            spec["audiences"] = self.audiences
        review = await self.api.create(TOKEN_REVIEWS, {"apiVersion": "authentication.k8s.io/v1",
                                                       "kind": "TokenReview", "spec": spec})
        status = (review or {}).get("status") or {}
        found = status.get("user") or {}
        user = None
        if status.get("authenticated") and found.get("username"):
            user = User(found["username"], found.get("uid") or "", tuple(found.get("groups") or ()),
                        {k: list(v) for k, v in (found.get("extra") or {}).items()})
        self._users.put(key, user or False)
        return user

    async def allowed(self, user: User, permission: Permission) -> bool:
        key = (user.username, user.uid, user.groups, permission)
        cached = self._decisions.get(key)
        if cached is not None:
            return cached
        attributes = {"verb": permission.verb, "resource": permission.resource, "group": permission.group}
        if permission.name:
            attributes["name"] = permission.name
        spec: dict[str, Any] = {"user": user.username, "groups": list(user.groups), "resourceAttributes": attributes}
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = user.extra
        review = await self.api.create(SUBJECT_ACCESS_REVIEWS, {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
        decision = bool(((review or {}).get("status") or {}).get("allowed"))
        self._decisions.put(key, decision)
        return decision
