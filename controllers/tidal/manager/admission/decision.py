# SPDX-License-Identifier: Apache-2.0
"""The webhook's answer to one request, before it is wrapped into an AdmissionReview."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from tidal.api.qos import QoSLevel

__all__ = ["DenialReason", "RULE_REASON_BY_LEVEL", "Decision", "ALLOWED"]


class DenialReason(enum.StrEnum):
    """Why a request was denied: ``status.reason`` of the response and the metrics label."""

    INVALID_QOS_ANNOTATION = "invalid-qos-annotation"
    HLS_RULE = "hls-rule"
    LS_RULE = "ls-rule"
    BE_RULE = "be-rule"
    QOS_LEVEL_CHANGE = "qos-level-change"
    MALFORMED_REQUEST = "malformed-request"
    INTERNAL_ERROR = "internal-error"

    @property
    def status_code(self) -> int:
        """HTTP code of ``status.code``: 400 malformed, 500 internal error, 403 a refused object.

        The API server passes code and reason through to the client; an unknown reason with
        403/400/500 still reads as Forbidden/BadRequest/InternalError to client libraries.
        """
        if self is DenialReason.MALFORMED_REQUEST:
            return 400
        if self is DenialReason.INTERNAL_ERROR:
            return 500
        return 403


RULE_REASON_BY_LEVEL = {
    QoSLevel.HLS: DenialReason.HLS_RULE,
    QoSLevel.LS: DenialReason.LS_RULE,
    QoSLevel.BE: DenialReason.BE_RULE,
}


@dataclass(frozen=True, slots=True)
class Decision:
    """Allowed or not, why, and what to change.

    Attributes:
        allowed: whether the API server may go on with the request.
        message: why it was denied ("" when allowed); shown to the user.
        reason: the denial's label, None when allowed.
        patch: RFC 6902 operations against the object (only when allowed).
        warnings: shown to the user by kubectl and client libraries, allowed or not.
    """

    allowed: bool
    message: str = ""
    reason: DenialReason | None = None
    patch: tuple[dict[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()

    @classmethod
    def allow(
        cls, patch: tuple[dict[str, Any], ...] = (), warnings: tuple[str, ...] = ()
    ) -> Decision:
        return cls(allowed=True, patch=patch, warnings=warnings)

    @classmethod
    def deny(cls, reason: DenialReason, message: str) -> Decision:
        return cls(allowed=False, message=message, reason=reason)

    @property
    def status_code(self) -> int:
        return 200 if self.allowed or self.reason is None else self.reason.status_code


#: Allowed, untouched.
ALLOWED = Decision(allowed=True)
