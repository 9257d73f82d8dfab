"""Anthropic's error envelope: ``{"type": "error", "error": {type, message}, "request_id"}``.

The error ``type`` follows the status as the API's errors page lists it (400
``invalid_request_error``, 409 ``conflict_error``, 413 ``request_too_large``, 529
``overloaded_error``…). The rule code goes where the envelope has room for a code:
``error.details.error_code`` (read by SDK 2.x into ``APIStatusError.error_code``), the end
of the message, and the ``Turngate-Rejection`` header. A refused batch lists every refused
request in ``error.details.refused_requests`` (location, custom_id, error_code, message).
"""

from __future__ import annotations

from typing import Any

from turngate.adapters.base import ErrorResponse
from turngate.errors import BatchRejected, TurngateError

ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    """The error type for ``status``; other 4xx are ``invalid_request_error`` as the API does."""
    known = ERROR_TYPES.get(status)
    if known is not None:
        return known
    return "api_error" if status >= 500 else "invalid_request_error"


def render_anthropic_error(error: TurngateError) -> ErrorResponse:
    message = error.message
    if error.rule not in message:
        message = f"{message} [rule: {error.rule}]"
    details: dict[str, Any] = {"error_code": error.rule}
    if isinstance(error, BatchRejected):
        details["refused_requests"] = error.listing("error_code")
    body = {
        "type": "error",
        "error": {"type": error_type(error.status), "message": message, "details": details},
        "request_id": None,
    }
    return ErrorResponse(status=error.status, body=body, headers={"Turngate-Rejection": error.rule})
