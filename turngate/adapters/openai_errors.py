"""The error envelope both OpenAI APIs share: ``{"error": {message, type, param, code}}``;
a refused batch adds ``refused_requests`` (location, custom_id, code, message)."""

from __future__ import annotations

from typing import Any

from turngate.adapters.base import ErrorResponse
from turngate.errors import BatchRejected, ContextLengthExceeded, SequenceRejected, TurngateError

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable",
}


def render_openai_error(error: TurngateError) -> ErrorResponse:
    param = None
    if isinstance(error, SequenceRejected):
        param = error.violations[0].location
    elif isinstance(error, ContextLengthExceeded):
        param = error.param
    detail: dict[str, Any] = {
        "message": error.message,
        "type": _TYPES.get(error.status, "server_error"),
        "param": param,
        "code": error.rule,
    }
    if isinstance(error, BatchRejected):
        # A field of turngate's own beside OpenAI's four (the SDK keeps the whole body).
        detail["refused_requests"] = error.listing("code")
    body = {"error": detail}
    return ErrorResponse(status=error.status, body=body, headers={"Turngate-Rejection": error.rule})
