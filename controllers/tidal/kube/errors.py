# SPDX-License-Identifier: Apache-2.0
"""The API server's error answers as typed exceptions, and the one reader of its Status bodies.

Every non-2xx answer (and every ``ERROR`` event of a watch) becomes an :class:`ApiError`, of the
subclass its HTTP code names (:class:`NotFound` 404, :class:`Conflict` 409, :class:`Gone` 410,
:class:`Forbidden` 403, :class:`TooManyRequests` 429), so callers write ``except NotFound``
rather than comparing codes. Its ``status``, ``reason`` and ``message`` come from the answer's
``Status`` object (``{"kind": "Status", "code", "reason", "message", "details": {"causes"}}``),
read by :func:`status_object` / :func:`status_message` and nowhere else.
"""
from __future__ import annotations

import json
from typing import Any

__all__ = ["ApiError", "Conflict", "Forbidden", "Gone", "NotFound", "TooManyRequests", "api_error",
           "error_summary", "status_message", "status_object"]


def status_object(body: Any) -> dict[str, Any]:
    """The Status object of an error answer's body (str, bytes or already decoded); {} when the
    body is empty, not JSON or not an object (a proxy's HTML page, say)."""
    if isinstance(body, (bytes, bytearray)):
        body = body.decode(errors="replace")
    if isinstance(body, str):
        try:
            body = json.loads(body) if body.strip() else {}
        except ValueError:
            return {}
    return body if isinstance(body, dict) else {}


def status_message(body: Any) -> str:
    """The ``message`` of an error answer's Status object (what was wrong: 'namespaces
    "tidal-system" not found'), "" when there is none."""
    message = status_object(body).get("message")
    return message if isinstance(message, str) else ""


class ApiError(Exception):
    """A non-2xx answer of the API server. ``status`` is its HTTP code, ``reason`` the Status's
    reason (``NotFound``, ``AlreadyExists``, ``Expired``...) else the HTTP reason phrase,
    ``message`` the Status's message, ``causes`` its ``details.causes`` (which fields were wrong),
    ``body`` the answer as received."""

    def __init__(self, status: int, reason: str = "", body: Any = "") -> None:
        self.status = int(status)
        self.body = body if isinstance(body, str) else json.dumps(body) if isinstance(body, dict) else \
            body.decode(errors="replace") if isinstance(body, (bytes, bytearray)) else str(body or "")
        self.status_object = status_object(body)
        self.message = status_message(self.status_object)
        self.reason = reason or str(self.status_object.get("reason") or "")
        super().__init__(f"{self.status} {self.reason}".rstrip() + (f": {self.message}" if self.message else ""))

    @property
    def causes(self) -> list[dict[str, Any]]:
        causes = (self.status_object.get("details") or {}).get("causes")
        return [c for c in causes if isinstance(c, dict)] if isinstance(causes, list) else []


class NotFound(ApiError):
    """404: the object, or its collection (a CRD not installed, a missing namespace)."""


class Conflict(ApiError):
    """409: the object exists already (create), or was changed since it was read (update)."""


class Gone(ApiError):
    """410: the resourceVersion (of a watch, or a list's continue token) is too old: relist."""


class Forbidden(ApiError):
    """403: this identity may not do this (RBAC), or a namespace is terminating."""


class TooManyRequests(ApiError):
    """429: throttled by priority and fairness, or an eviction a PodDisruptionBudget refuses."""


_BY_STATUS: dict[int, type[ApiError]] = {404: NotFound, 409: Conflict, 410: Gone, 403: Forbidden,
                                         429: TooManyRequests}


def api_error(status: int, reason: str = "", body: Any = "") -> ApiError:
    """The ApiError (subclass) for an answer with this HTTP code; ``body`` may be a Status
    object already decoded (a watch's ``ERROR`` event)."""
    return _BY_STATUS.get(int(status), ApiError)(status, reason, body)


def error_summary(err: BaseException) -> str:
    """One line for a failed call: an ApiError's code, reason and the server's message (a
    missing namespace reads '404 NotFound: namespaces "tidal-system" not found'), else the
    exception's text, else its type."""
    if isinstance(err, ApiError):
        text = str(err) if err.message else f"{err} {err.body}".strip()
        return text.replace("\n", " ")[:500]
    return str(err) or type(err).__name__


def unavailable(err: BaseException) -> bool:
    """Whether a failed call failed because the API server was away or refused it — an
    ApiError answer, a connection refused or reset (OSError and aiohttp's client errors, which
    derive from OSError or ClientError), a timeout — rather than because of a bug. Such a
    failure is expected while the control plane restarts: one log line, no traceback."""
    import asyncio
    try:
        from aiohttp import ClientError
    except ImportError:  # pragma: no cover - aiohttp is a dependency of every component
        ClientError = OSError  # noqa: N806
    return isinstance(err, (ApiError, OSError, ClientError, asyncio.TimeoutError, TimeoutError))
