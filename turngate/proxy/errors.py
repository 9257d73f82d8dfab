"""Every error turngate itself answers with, in the caller's own API envelope.

The route's adapter renders the envelope (``render_error``), so the official SDK raises
its normal exception (openai.BadRequestError, anthropic.BadRequestError,
google.genai.errors.ClientError…). The message names the rule, since that is what the
SDKs print: ``turngate [orphan_result]: tool result 'call_7' answers no tool call
(messages[2])``. Each such response carries ``Turngate-Rejection: <rule>``. Should an
adapter be missing from the build, a minimal envelope of the same provider shape stands
in, so the SDK still raises.
"""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

import orjson
from aiohttp import web

from turngate.adapters import get_adapter
from turngate.adapters.base import ErrorResponse
from turngate.errors import TurngateError
from turngate.graph.model import ApiName

log = logging.getLogger("turngate.proxy")

_GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    404: "NOT_FOUND",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    415: "INVALID_ARGUMENT",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


class AdapterMissing(TurngateError):
    rule = "adapter_unavailable"
    status = 501


def render(api: ApiName, error: TurngateError) -> ErrorResponse:
    try:
        adapter = get_adapter(api)
    except (ImportError, AttributeError):
        return _stand_in(api, error)
    return adapter.render_error(error)


def _stand_in(api: ApiName, error: TurngateError) -> ErrorResponse:
    body: dict[str, Any]
    if api == "anthropic":
        body = {"type": "error", "error": {"type": error.rule, "message": error.message}}
    elif api == "gemini":
        status = _GOOGLE_STATUS.get(error.status, "INTERNAL")
        body = {"error": {"code": error.status, "message": error.message, "status": status}}
    else:
        body = {"error": {"message": error.message, "type": error.rule, "code": error.rule}}
    return ErrorResponse(status=error.status, body=body)


def error_response(
    api: ApiName, error: TurngateError, headers: dict[str, str] | None = None
) -> web.Response:
    name_the_rule(error)
    rendered = render(api, error)
    response = web.Response(
        status=rendered.status,
        body=orjson.dumps(rendered.body),
        content_type="application/json",
    )
    response.headers.update(rendered.headers)
    response.headers.setdefault("Turngate-Rejection", error.rule)
    if headers:
        response.headers.update(headers)
    if rendered.status == 409:
        # A conflict with recorded state stands unless the caller says otherwise: without
        # this the openai and anthropic SDKs would resend it twice, a second or two apart.
        response.headers.setdefault("x-should-retry", "false")
    return response


def name_the_rule(error: TurngateError) -> None:
    """Put the rule code in the message: SDKs show the message, not the envelope's code."""
    if error.rule in error.message:
        return
    prefix = "turngate: "
    if error.message.startswith(prefix):
        error.message = f"turngate [{error.rule}]: {error.message.removeprefix(prefix)}"
    else:
        error.message = f"{error.message} [{error.rule}]"


def plain_error(status: int, message: str, code: str) -> web.Response:
    """An error outside any provider's routes (unknown prefix, turngate's own endpoints)."""
    body = {"error": {"message": message, "type": HTTPStatus(status).phrase, "code": code}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")
