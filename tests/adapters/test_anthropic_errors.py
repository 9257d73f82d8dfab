"""Refusals in Anthropic's own error envelope: the official SDK raises its normal exception,
with the rule code where SDK 2.x reads a stable code (``error.details.error_code``)."""

from __future__ import annotations

import anthropic
import httpx2 as httpx
import pytest
from anthropic.types.shared.error_response import ErrorResponse as SDKErrorResponse

from tests.adapters.anthropic_builders import assistant, body, tool_result, user, verdict_of
from turngate.adapters.anthropic import ADAPTER
from turngate.errors import (
    SequenceRejected,
    StateConflict,
    StoreUnavailable,
    TurngateError,
    UpstreamProtocolError,
)

_CLIENT = anthropic.Anthropic(api_key="k", base_url="http://127.0.0.1:9")


def _raised(status: int, payload: dict[str, object], headers: dict[str, str]) -> Exception:
    response = httpx.Response(
        status,
        json=payload,
        headers=headers,
        request=httpx.Request("POST", "http://127.0.0.1:9/v1/messages"),
    )
    return _CLIENT._make_status_error_from_response(response)


def _orphan() -> SequenceRejected:
    verdict = verdict_of(body(user("hi"), assistant("hello"), user(tool_result("toolu_7"))))
    return SequenceRejected(verdict.violations)


def test_a_rejected_sequence_is_an_invalid_request_error_the_sdk_raises() -> None:
    error = ADAPTER.render_error(_orphan())
    assert error.status == 400
    assert error.headers["Turngate-Rejection"] == "orphan_result"
    assert error.body["type"] == "error"
    assert error.body["request_id"] is None
    assert error.body["error"]["type"] == "invalid_request_error"
    message = error.body["error"]["message"]
    assert message.startswith("turngate: tool result 'toolu_7' answers no tool call (messages[2])")
    assert "orphan_result" in message
    # The SDK's own response model accepts the body as an Anthropic error response.
    assert SDKErrorResponse.model_validate(error.body).error.type == "invalid_request_error"
    raised = _raised(error.status, error.body, error.headers)
    assert type(raised) is anthropic.BadRequestError
    assert raised.error_code == "orphan_result"
    assert raised.type == "invalid_request_error"
    assert raised.api_message == message
    assert "toolu_7" in str(raised)


@pytest.mark.parametrize(
    ("error", "exception", "error_type"),
    [
        (StateConflict("turngate: conversation is paused", rule="conversation_paused"),
         anthropic.ConflictError, "conflict_error"),
        (TurngateError("turngate: body too large", rule="body_too_large", status=413),
         anthropic.ContentTooLargeError, "request_too_large"),
        (StoreUnavailable("turngate: state store unreachable"),
         anthropic.ServiceUnavailableError, "api_error"),
        (UpstreamProtocolError("turngate: upstream broke its stream"),
         anthropic.InternalServerError, "api_error"),
        (TurngateError("turngate: upstream overloaded", rule="upstream_overloaded", status=529),
         anthropic.OverloadedError, "overloaded_error"),
    ],
)  # fmt: skip
def test_each_status_gets_its_documented_type_and_sdk_exception(
    error: TurngateError, exception: type[Exception], error_type: str
) -> None:
    rendered = ADAPTER.render_error(error)
    assert rendered.status == error.status
    assert rendered.body["error"]["type"] == error_type
    assert rendered.headers["Turngate-Rejection"] == error.rule
    raised = _raised(rendered.status, rendered.body, rendered.headers)
    assert type(raised) is exception
    assert isinstance(raised, anthropic.APIStatusError)
    assert raised.error_code == error.rule
