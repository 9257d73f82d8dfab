"""Refusals in Gemini's own error envelope (google.rpc.Status as JSON).

    {"error": {"code": 400, "message": "...", "status": "INVALID_ARGUMENT",
               "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                            "reason": "<rule code>", "domain": "turngate.dev",
                            "metadata": {"location": "contents[3]", ...}}]}}

A refused batch adds a ``google.rpc.BadRequest`` detail whose ``fieldViolations`` name every
refused request (``field``: its place in the batch, ``reason``: its rule code).

google-genai raises ``errors.ClientError`` for a 4xx body of this shape (``ServerError``
for 5xx), with ``.code``, ``.status``, ``.message`` and ``.details`` = the body.
"""

from __future__ import annotations

from typing import Any

from turngate.adapters.base import ErrorResponse
from turngate.errors import BatchRejected, SequenceRejected, SequenceWaiting, TurngateError

DOMAIN = "turngate.dev"
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"

# HTTP status -> canonical google.rpc code name.
_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def canonical_status(error: TurngateError) -> str:
    if isinstance(error, SequenceWaiting):
        # The request is well formed; the conversation is not in a state to send it yet.
        return "FAILED_PRECONDITION"
    return _STATUS.get(error.status, "INTERNAL" if error.status >= 500 else "INVALID_ARGUMENT")


def render_gemini_error(error: TurngateError) -> ErrorResponse:
    metadata: dict[str, str] = {"rule": error.rule}
    if isinstance(error, SequenceRejected):
        first = error.violations[0]
        for key, value in (
            ("location", first.location),
            ("messageIndex", None if first.message_index is None else str(first.message_index)),
            ("blockId", first.block_id),
            ("callId", first.call_id),
        ):
            if value is not None:
                metadata[key] = value
        metadata["violations"] = ",".join(v.rule for v in error.violations)
    details: list[dict[str, Any]] = [
        {"@type": ERROR_INFO, "reason": error.rule, "domain": DOMAIN, "metadata": metadata}
    ]
    if isinstance(error, BatchRejected):
        details.append({"@type": BAD_REQUEST, "fieldViolations": _field_violations(error)})
    body: dict[str, Any] = {
        "error": {
            "code": error.status,
            "message": error.message,
            "status": canonical_status(error),
            "details": details,
        }
    }
    return ErrorResponse(status=error.status, body=body, headers={"Turngate-Rejection": error.rule})


def _field_violations(error: BatchRejected) -> list[dict[str, str]]:
    """Every refused request of a batch, as google.rpc.BadRequest names a bad field."""
    return [
        {
            "field": refusal.location,
            "description": refusal.describe(),
            "reason": refusal.error.rule,
        }
        for refusal in error.refused
    ]
