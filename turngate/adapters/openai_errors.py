"""The error envelope both OpenAI APIs share: ``{"error": {message, type, param, code}}``."""

from __future__ import annotations

from turngate.adapters.base import ErrorResponse
from turngate.errors import ContextLengthExceeded, SequenceRejected, TurngateError

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
    body = {
        "error": {
            "message": error.message,
            "type": _TYPES.get(error.status, "server_error"),
            "param": param,
            "code": error.rule,
        }
    }
    return ErrorResponse(status=error.status, body=body, headers={"Turngate-Rejection": error.rule})
