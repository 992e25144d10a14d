# SPDX-License-Identifier: Apache-2.0
"""tidal-console's HTTP edge (aiohttp): the REST API under ``/api/v1``, its OpenAPI document,
the web console's static files, ``/healthz`` and ``/metrics``.

Every API call but the OpenAPI document needs a bearer token; `Authorizer` asks the API server
who it is (TokenReview) and whether that user may do what the endpoint does
(SubjectAccessReview). Only then does the console act, with its own identity. Errors are JSON
``{"error": {"code", "message", "fields"?}}``; a validation error names each field and rule.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from tidal.api import qos
from tidal.console import overview as overview_view
from tidal.console import views
from tidal.console.auth import (PERMISSIONS, READ_CLUSTER, READ_NODES, READ_POLICY, WRITE_NODES, WRITE_POLICY,
                                Authorizer, Permission, User, bearer_token)
from tidal.console.monitoring import (MonitoringError, PrometheusClient, PrometheusError, TimeRange,
                                      nodes_parameter, panels, series_of, valid_node_name)
from tidal.console.openapi import openapi_document
from tidal.console.policy_update import desired_policy
from tidal.console.workflow import workflow
from tidal.kube import ApiError as KubeApiError
from tidal.kube import KubeAPI, custom_path
from tidal.metrics import ConsoleMetrics, console_metrics
from tidal.api.policy import DEFAULT_POLICY_NAME, POLICY_KIND, ColocationPolicy, PolicyValidationError, \
    cross_field_rules, field_specs

log = logging.getLogger(__name__)

NODES = "/api/v1/nodes"
PODS = "/api/v1/pods"
EVENTS = "/api/v1/events"
#: Events read per Tidal reason for the overview (the newest `overview.MAX_EVENTS` are shown).
EVENTS_PER_REASON = 500
NODE_PROFILES = custom_path("nodeprofiles")
POLICY = custom_path("colocationpolicies", DEFAULT_POLICY_NAME)
MAX_BODY_BYTES = 1024 * 1024
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


@dataclass
class ConsoleConfig:
    prometheus_url: str
    web_dir: Path | None = None
    address: str = "127.0.0.1"
    port: int = 8090
    auth_cache_seconds: float = 10.0


class ApiError(Exception):
    def __init__(self, code: int, message: str, fields: list[dict] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.fields, self.headers = code, message, fields, headers


def _error_body(code: int, message: str, fields: list[dict] | None = None) -> dict:
    error: dict[str, Any] = {"code": code, "message": message}
    if fields is not None:
        error["fields"] = fields
    return {"error": error}


def _kube_error(err: KubeApiError) -> ApiError:
    """An API server error answered to the console's own call, for the caller."""
    message = err.message or err.reason or "API server error"
    if err.status in (404, 409, 422):
        fields = [{"field": c.get("field", ""), "message": c.get("message", "")} for c in err.causes] or None
        return ApiError(err.status, message, fields)
    if err.status == 403:
        return ApiError(502, f"the console's own identity is not allowed to do this: {message}")
    return ApiError(502, f"the API server answered {err.status}: {message}")


class Console:
    def __init__(self, api: KubeAPI, config: ConsoleConfig, session: aiohttp.ClientSession,
                 registry: CollectorRegistry | None = None) -> None:
        self.api, self.config = api, config
        self.auth = Authorizer(api, ttl=config.auth_cache_seconds)
        self.prometheus = PrometheusClient(config.prometheus_url, session)
        self.registry = registry or CollectorRegistry()
        self.metrics: ConsoleMetrics = console_metrics(self.registry)

    # -- access ---------------------------------------------------------------
    async def user(self, request: web.Request) -> User:
        token = bearer_token(request.headers.get("Authorization"))
        if token is None:
            self.metrics.denials.labels("unauthenticated").inc()
            raise ApiError(401, "authentication required: send a Kubernetes bearer token "
                                "(Authorization: Bearer <token>)", headers={"WWW-Authenticate": "Bearer"})
        user = await self.auth.authenticate(token)
        if user is None:
            self.metrics.denials.labels("unauthenticated").inc()
            raise ApiError(401, "the bearer token was not accepted by the API server (invalid or expired)",
                           headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
        request["user"] = user
        return user

    async def require(self, request: web.Request, permission: Permission) -> User:
        user = await self.user(request)
        if not await self.auth.allowed(user, permission):
            self.metrics.denials.labels("forbidden").inc()
            raise ApiError(403, f"user {user.username!r} may not {permission.describe()}")
        return user

    # -- reads ------------------------------------------------------------------
    async def _nodes(self) -> list[dict]:
        return (await self.api.get(NODES)).get("items", [])

    async def _node(self, name: str) -> dict | None:
        return await self.api.get_optional(f"{NODES}/{name}")

    async def _profiles(self) -> dict[str, dict]:
        # None: the CRD is not installed, so no agent has reported anywhere
        listing = await self.api.get_optional(NODE_PROFILES) or {}
        return {item["metadata"]["name"]: item for item in listing.get("items", [])}

    async def _pods(self, node: str | None = None) -> list[dict]:
        selector = "status.phase!=Succeeded,status.phase!=Failed"
        if node:
            selector += f",spec.nodeName={node}"
        return (await self.api.get(PODS, {"fieldSelector": selector})).get("items", [])

    async def _tidal_events(self) -> list[dict]:
        # One field-selected list per reason: the API server filters, and each list is bounded.
        listings = await asyncio.gather(*(
            self.api.get(EVENTS, {"fieldSelector": f"reason={reason}", "limit": EVENTS_PER_REASON})
            for reason in overview_view.TIDAL_EVENT_REASONS))
        return [item for listing in listings for item in listing.get("items", [])]

    async def _policy_object(self) -> dict | None:
        return await self.api.get_optional(POLICY)

    # -- handlers ---------------------------------------------------------------
    async def whoami(self, request: web.Request) -> web.Response:
        user = await self.user(request)
        allowed = await asyncio.gather(*(self.auth.allowed(user, p) for p in PERMISSIONS.values()))
        return _json({"username": user.username, "groups": list(user.groups),
                      "permissions": dict(zip(PERMISSIONS, allowed))})

    async def list_nodes(self, request: web.Request) -> web.Response:
        await self.require(request, READ_NODES)
        nodes, profiles, pods = await asyncio.gather(self._nodes(), self._profiles(), self._pods())
        by_node = views.pods_by_node(pods)
        items = [views.node_view(n, profiles.get(n["metadata"]["name"]), by_node.get(n["metadata"]["name"], ()))
                 for n in nodes]
        items.sort(key=lambda v: v["name"])
        return _json({"items": items, "modes": views.modes()})

    async def overview(self, request: web.Request) -> web.Response:
        """The cluster's state (`tidal.console.overview`): needs list on NodeProfiles, nodes, pods
        and Events."""
        user = await self.require(request, READ_NODES)
        for permission in READ_CLUSTER:
            if not await self.auth.allowed(user, permission):
                self.metrics.denials.labels("forbidden").inc()
                raise ApiError(403, f"user {user.username!r} may not {permission.describe()}")
        nodes, profiles, pods, events = await asyncio.gather(self._nodes(), self._profiles(), self._pods(),
                                                             self._tidal_events())
        return _json(overview_view.overview(nodes, profiles, pods, events))

    async def workflow_steps(self, request: web.Request) -> web.Response:
        """The overview's four steps with the configuration the roles write (`tidal.console.workflow`)."""
        await self.require(request, READ_NODES)
        return _json(workflow())

    def _node_name(self, request: web.Request) -> str:
        name = request.match_info["name"]
        if not valid_node_name(name):
            raise ApiError(400, f"node name {name!r} is not a valid node name (lowercase RFC 1123 subdomain)",
                           [{"field": "name", "message": "must be a lowercase RFC 1123 subdomain"}])
        return name

    async def get_node(self, request: web.Request) -> web.Response:
        await self.require(request, READ_NODES)
        name = self._node_name(request)
        node = await self._node(name)
        if node is None:
            raise ApiError(404, f"node {name} does not exist")
        profiles, pods = await asyncio.gather(self._profiles(), self._pods(name))
        return _json(views.node_view(node, profiles.get(name), pods))

    async def set_colocation(self, request: web.Request) -> web.Response:
        """The node switch: sets the node's mode (`views.switch_request`, `views.mode_switch`)."""
        name = self._node_name(request)
        await self.require(request, Permission(WRITE_NODES.verb, WRITE_NODES.resource, WRITE_NODES.group, name))
        body = await _json_body(request)
        try:
            requested = views.switch_request(body)
        except views.SwitchRequestError as err:
            raise ApiError(400, str(err), [{"field": err.field, "message": err.message}]) from None
        dry_run = _dry_run(request)
        node = await self._node(name)
        decision = views.mode_switch(name, node, requested)
        message = decision.message
        if decision.patch is not None:
            await self.api.merge_patch(f"{NODES}/{name}", decision.patch, {"dryRun": dry_run})
            if decision.switched_off:
                be = sum(1 for p in await self._pods(name) if views.pod_level(p) == "BE")
                message = views.be_pods_left_message(decision, be)
            log.info("%s (by %s)", message, request["user"].username)
        for warning in decision.warnings:
            log.info("node %s: %s", name, warning)
        self.metrics.writes.labels("node", "changed" if decision.changed else
                                   ("unchanged" if decision.status == 200 else "refused")).inc()
        if dry_run and decision.changed:
            message = f"dry run: {message} (nothing written)"
        answer = views.switch_answer(name, decision, message)
        if decision.status != 200:
            return _json({**_error_body(decision.status, message), **answer}, status=decision.status)
        return _json(answer)

    async def get_policy(self, request: web.Request) -> web.Response:
        await self.require(request, READ_POLICY)
        return _json(_policy_view(await self._policy_object()))

    async def policy_schema(self, request: web.Request) -> web.Response:
        await self.require(request, READ_POLICY)
        return _json(policy_schema())

    async def put_policy(self, request: web.Request) -> web.Response:
        await self.require(request, Permission(WRITE_POLICY.verb, WRITE_POLICY.resource, WRITE_POLICY.group,
                                               DEFAULT_POLICY_NAME))
        dry_run = _dry_run(request)
        body = await _json_body(request)
        unknown = sorted(set(body) - {"spec", "resourceVersion"})
        if unknown:
            raise ApiError(422, f"unknown field(s): {', '.join(unknown)}",
                           [{"field": k, "message": "unknown field (allowed: spec, resourceVersion)"} for k in unknown])
        version = body.get("resourceVersion")
        if version is not None and not isinstance(version, str):
            raise ApiError(422, "resourceVersion: must be a string",
                           [{"field": "resourceVersion", "message": "must be a string"}])
        if not isinstance(body.get("spec"), dict):
            raise ApiError(422, "spec: required, must be an object",
                           [{"field": "spec", "message": "required, must be an object"}])
        replace = _replace(request)
        current = await self._policy_object()
        try:  # a merge patch of the stored spec: fields the client does not send keep their value
            policy = desired_policy((current or {}).get("spec"), body["spec"], replace=replace)
        except PolicyValidationError as err:
            self.metrics.writes.labels("policy", "invalid").inc()
            raise ApiError(422, str(err), [{"field": e.path, "message": e.message} for e in err.errors]) from None
        manifest = {"apiVersion": qos.API_GROUP_VERSION, "kind": POLICY_KIND,
                    "metadata": {"name": DEFAULT_POLICY_NAME}, "spec": policy.to_spec()}
        params = {"dryRun": dry_run}
        if current is None:
            written = await self.api.create(custom_path("colocationpolicies"), manifest, params)
        else:
            manifest["metadata"]["resourceVersion"] = version or current["metadata"]["resourceVersion"]
            written = await self.api.replace(POLICY, manifest, params)
        changed = current is None or current.get("metadata", {}).get("generation") != \
            written.get("metadata", {}).get("generation")
        self.metrics.writes.labels("policy", "changed" if changed else "unchanged").inc()
        view = _policy_view(written)
        if dry_run:
            view["message"] = "dry run: the policy is valid and the API server accepted it (nothing written)"
        else:
            view["message"] = (f"policy updated: generation {view['generation']}" if changed
                               else "policy unchanged: the spec is the same")
        return _json(view)

    async def policy_rollout(self, request: web.Request) -> web.Response:
        await self.require(request, READ_POLICY)
        policy, nodes, profiles = await asyncio.gather(self._policy_object(), self._nodes(), self._profiles())
        return _json(views.rollout(policy, nodes, profiles))

    async def monitoring(self, request: web.Request) -> web.Response:
        await self.require(request, READ_NODES)
        node = request.match_info.get("name")
        try:
            window = TimeRange.parse(request.query)
            nodes = [] if node else nodes_parameter(request.query.get("nodes"))
            charts = panels(node, nodes)
        except MonitoringError as err:
            raise ApiError(400, str(err), [{"field": err.field, "message": err.message}]) from None
        try:
            results = await asyncio.gather(*(self.prometheus.query_range(p.query, window) for p in charts))
        except PrometheusError as err:
            self.metrics.prometheus_errors.inc()
            raise ApiError(502, str(err)) from None
        return _json({"scope": "node" if node else "cluster", "node": node, "nodes": [node] if node else nodes,
                      "start": window.start,
                      "end": window.end, "step": window.step,
                      "panels": [{"name": p.name, "title": p.title, "unit": p.unit, "query": p.query,
                                  "series": series_of(p, r)} for p, r in zip(charts, results)]})

    async def openapi(self, request: web.Request) -> web.Response:
        return _json(openapi_document())

    async def metrics_handler(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def index(self, request: web.Request) -> web.StreamResponse:
        web_dir = self.config.web_dir
        if web_dir is None or not (web_dir / "index.html").is_file():
            return web.Response(status=503, text="the web console is not built: run `make console-web` "
                                                 "(or `tidal-console build-web`)\n")
        return web.FileResponse(web_dir / "index.html", headers={"Cache-Control": "no-cache"})

    # -- app --------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=MAX_BODY_BYTES)
        r = app.router
        r.add_get("/api/v1/openapi.json", self.openapi)
        r.add_get("/api/v1/whoami", self.whoami)
        r.add_get("/api/v1/overview", self.overview)
        r.add_get("/api/v1/workflow", self.workflow_steps)
        r.add_get("/api/v1/nodes", self.list_nodes)
        r.add_get("/api/v1/nodes/{name}", self.get_node)
        r.add_put("/api/v1/nodes/{name}/colocation", self.set_colocation)
        r.add_get("/api/v1/policy", self.get_policy)
        r.add_put("/api/v1/policy", self.put_policy)
        r.add_get("/api/v1/policy/schema", self.policy_schema)
        r.add_get("/api/v1/policy/rollout", self.policy_rollout)
        r.add_get("/api/v1/monitoring/cluster", self.monitoring)
        r.add_get("/api/v1/monitoring/nodes/{name}", self.monitoring)
        r.add_get("/healthz", self.healthz)
        r.add_get("/metrics", self.metrics_handler)
        r.add_get("/", self.index)
        if self.config.web_dir is not None and (self.config.web_dir / "assets").is_dir():
            r.add_static("/assets/", self.config.web_dir / "assets")
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler) -> web.StreamResponse:
        started = time.perf_counter()
        route = request.match_info.route.resource.canonical if request.match_info.route.resource else "unmatched"
        try:
            response = await handler(request)
        except ApiError as err:
            response = _json(_error_body(err.code, err.message, err.fields), status=err.code, headers=err.headers)
        except KubeApiError as err:
            mapped = _kube_error(err)
            response = _json(_error_body(mapped.code, mapped.message, mapped.fields), status=mapped.code)
        except web.HTTPException as err:
            if not request.path.startswith("/api/"):
                raise
            response = _json(_error_body(err.status, err.reason), status=err.status,
                             headers={k: v for k, v in err.headers.items() if k.lower() == "allow"})
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception:
            log.exception("%s %s failed", request.method, request.path)
            response = _json(_error_body(500, "internal error (logged by tidal-console)"), status=500)
        response.headers.update(SECURITY_HEADERS)
        if request.path.startswith("/api/"):
            response.headers["Cache-Control"] = "no-store"
        self.metrics.requests.labels(route, request.method, str(response.status)).inc()
        self.metrics.latency.labels(route).observe(time.perf_counter() - started)
        return response


def _json(data: Any, status: int = 200, headers: dict | None = None) -> web.Response:
    return web.Response(text=json.dumps(data, separators=(",", ":")), status=status,
                        content_type="application/json", headers=headers)


def _replace(request: web.Request) -> bool:
    """``?replace=true``: the request's spec replaces the stored one (absent fields: defaults);
    without it, the spec is merged into the stored one (`tidal.console.policy_update`)."""
    value = request.query.get("replace", "false")
    if value not in ("true", "false"):
        raise ApiError(400, f"replace: must be true or false (got {value!r})",
                       [{"field": "replace", "message": "must be true or false"}])
    return value == "true"


def _dry_run(request: web.Request) -> str | None:
    """``?dryRun=All``: validate and let the API server run the write without persisting it."""
    value = request.query.get("dryRun")
    if value is None:
        return None
    if value != "All":
        raise ApiError(400, f"dryRun: must be All (got {value!r})", [{"field": "dryRun", "message": "must be All"}])
    return value


async def _json_body(request: web.Request) -> dict:
    try:
        body = await request.json(loads=json.loads)
    except web.HTTPRequestEntityTooLarge:
        raise ApiError(413, f"body: larger than {MAX_BODY_BYTES} bytes",
                       [{"field": "body", "message": f"at most {MAX_BODY_BYTES} bytes"}]) from None
    except RecursionError:
        raise ApiError(400, "body: nested too deeply", [{"field": "body", "message": "must be a JSON object"}]) \
            from None
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "body: not valid JSON", [{"field": "body", "message": "must be a JSON object"}]) from None
    if not isinstance(body, dict):
        raise ApiError(400, "body: must be a JSON object", [{"field": "body", "message": "must be a JSON object"}])
    return body


def _policy_view(obj: dict | None) -> dict:
    """The policy as the console shows it: the full spec with defaults applied."""
    if obj is None:
        return {"name": DEFAULT_POLICY_NAME, "exists": False, "generation": None, "resourceVersion": None,
                "spec": ColocationPolicy().to_spec(), "errors": []}
    meta = obj.get("metadata") or {}
    errors: list[dict] = []
    try:
        spec = ColocationPolicy.from_spec(obj.get("spec") or {}).to_spec()
    except PolicyValidationError as err:  # the CRD's schema should make this impossible
        spec = obj.get("spec") or {}
        errors = [{"field": e.path, "message": e.message} for e in err.errors]
    return {"name": DEFAULT_POLICY_NAME, "exists": True, "generation": meta.get("generation"),
            "resourceVersion": meta.get("resourceVersion"), "spec": spec, "errors": errors}


def policy_schema() -> dict:
    """Every field of the policy spec (path, type, range, enum, default, description) and every
    cross-field rule: the console's policy dialog is generated from this."""
    fields = []
    for path, spec, value in field_specs():
        item: dict[str, Any] = {"path": path, "type": spec.kind, "description": spec.description,
                                "default": value}
        if spec.minimum is not None:
            item["minimum"] = spec.minimum
        if spec.maximum is not None:
            item["maximum"] = spec.maximum
        if spec.enum is not None:
            item["enum"] = list(spec.enum)
        fields.append(item)
    rules = [{"path": path + (f".{rule.field}" if rule.field else ""), "message": rule.message}
             for path, rule in cross_field_rules()]
    return {"fields": fields, "rules": rules}


async def serve(api: KubeAPI, config: ConsoleConfig, stop: asyncio.Event) -> None:
    async with aiohttp.ClientSession() as session:
        console = Console(api, config, session)
        runner = web.AppRunner(console.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, config.address, config.port)
        await site.start()
        log.info("tidal-console on http://%s:%d (Prometheus %s, web %s)", config.address, config.port,
                 config.prometheus_url, config.web_dir)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()
