# SPDX-License-Identifier: Apache-2.0
"""The admission webhook's HTTPS server (aiohttp), a thin edge around `review`.

Endpoints on the TLS port: ``POST /mutate`` (the answer with its JSON patch) and
``POST /validate`` (the same decision without a patch: validating webhooks run after
every mutation, so the rules are checked on the final object too). Health and
metrics live on a separate plain-HTTP port: ``/healthz``, ``/readyz``, ``/metrics``.

Whatever arrives, the API server gets a well-formed AdmissionReview back: a body
that is not JSON is answered like any malformed review (`allowed: false`), never
with a bare 500.

Each review is decided in the `AdmissionContext` of its namespace, from
``AdmissionContexts`` (watch caches of the namespaces and the ColocationPolicy) when the
manager has cluster access; without it, or before the caches have listed once, in
`DEFAULT_CONTEXT` (no namespace annotation, the policy's defaults).
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client import CONTENT_TYPE_LATEST

from tidal.manager.admission.context import DEFAULT_CONTEXT, AdmissionContext
from tidal.manager.admission.review import answer, namespace_of
from tidal.manager.tls import ReloadingTLS
from tidal.tasks import sleep_or_stop

log = logging.getLogger(__name__)

# The API server sends objects of up to ~3 MiB (etcd's request limit) inside a review.
MAX_BODY_BYTES = 4 * 1024 * 1024
LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class AdmissionMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.requests = Counter("tidal_admission_requests_total", "Admission reviews answered",
                                ["webhook", "operation", "kind", "allowed"], registry=self.registry)
        self.denials = Counter("tidal_admission_denials_total", "Admission reviews denied, by reason",
                               ["webhook", "reason"], registry=self.registry)
        self.mutations = Counter("tidal_admission_mutations_total",
                                 "Admission reviews allowed with changes (the answer carries a JSON patch)",
                                 ["webhook", "kind"], registry=self.registry)
        self.latency = Histogram("tidal_admission_review_duration_seconds",
                                 "Time to answer one review, body read to response",
                                 ["webhook"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.tls_reloads = Counter("tidal_admission_tls_reloads_total",
                                   "Serving certificate reloads after its files changed",
                                   registry=self.registry)


@dataclass
class ServerConfig:
    cert_file: str
    key_file: str
    address: str = "0.0.0.0"
    port: int = 8443
    health_address: str = "0.0.0.0"
    health_port: int = 8080
    tls_check_seconds: float = 2.0


def _context(contexts, body) -> AdmissionContext:
    if contexts is None:
        return DEFAULT_CONTEXT
    try:
        return contexts.context(namespace_of(body))
    except Exception as err:  # noqa: BLE001 - a review is answered anyway, with the defaults
        log.warning("admission context not available, using the defaults: %s", err)
        return DEFAULT_CONTEXT


def _admission_handler(webhook: str, metrics: AdmissionMetrics, with_patch: bool, contexts=None):
    async def handle(request: web.Request) -> web.Response:
        started = time.perf_counter()
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None  # answered as a malformed review, with the reason recorded
        response, decision = answer(body, with_patch=with_patch, context=_context(contexts, body))
        inner = response["response"]
        req = body.get("request") if isinstance(body, dict) else None
        req = req if isinstance(req, dict) else {}
        kind = req.get("kind", {}).get("kind", "") if isinstance(req.get("kind"), dict) else ""
        metrics.requests.labels(webhook, str(req.get("operation", "")), str(kind),
                                str(inner["allowed"]).lower()).inc()
        if inner["allowed"] and inner.get("patch"):
            metrics.mutations.labels(webhook, str(kind)).inc()
        if not inner["allowed"]:
            metrics.denials.labels(webhook, decision.reason or "unknown").inc()
            log.info("denied %s %s/%s uid=%s: %s", kind, req.get("namespace", ""), req.get("name", ""),
                     inner.get("uid"), inner.get("status", {}).get("message"))
        metrics.latency.labels(webhook).observe(time.perf_counter() - started)
        return web.Response(body=json.dumps(response, separators=(",", ":")),
                            content_type="application/json")
    return handle


def build_apps(metrics: AdmissionMetrics, ready: asyncio.Event,
               contexts=None) -> tuple[web.Application, web.Application]:
    """``contexts``: an object with ``context(namespace) -> AdmissionContext`` (the manager's
    ``AdmissionContexts``), None for `DEFAULT_CONTEXT` always."""
    admission = web.Application(client_max_size=MAX_BODY_BYTES)
    admission.router.add_post("/mutate", _admission_handler("mutate", metrics, True, contexts))
    admission.router.add_post("/validate", _admission_handler("validate", metrics, False, contexts))

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        return web.Response(text="ok") if ready.is_set() else web.Response(status=503, text="not ready")

    async def metrics_handler(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    health = web.Application()
    health.router.add_get("/healthz", healthz)
    health.router.add_get("/readyz", readyz)
    health.router.add_get("/metrics", metrics_handler)
    return admission, health


async def serve(config: ServerConfig, stop: asyncio.Event | None = None,
                metrics: AdmissionMetrics | None = None, contexts=None) -> None:
    """Run until `stop` is set (or forever); ``contexts`` as in `build_apps`."""
    metrics = metrics or AdmissionMetrics()
    tls = ReloadingTLS(config.cert_file, config.key_file)
    ready = asyncio.Event()
    admission, health = build_apps(metrics, ready, contexts)
    runners = []
    for app, address, port, ssl_context in ((admission, config.address, config.port, tls.context),
                                            (health, config.health_address, config.health_port, None)):
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, address, port, ssl_context=ssl_context, backlog=1024).start()
        runners.append(runner)
    ready.set()
    log.info("admission webhook serving on https://%s:%d (health on %s:%d)",
             config.address, config.port, config.health_address, config.health_port)
    stop = stop or asyncio.Event()
    try:
        while not stop.is_set():
            if not await sleep_or_stop(stop, config.tls_check_seconds) and tls.check():
                metrics.tls_reloads.inc()
    finally:
        ready.clear()
        for runner in reversed(runners):
            await runner.cleanup()
