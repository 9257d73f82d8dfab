"""Refusals in Gemini's error envelope, raised by google-genai as its normal exceptions."""

from __future__ import annotations

import httpx2 as httpx
import pytest
from google.genai import errors as genai_errors

from tests.adapters.gemini_builders import body, call, check, model, response, text, user
from turngate.adapters.gemini import ADAPTER
from turngate.errors import (
    SequenceRejected,
    SequenceWaiting,
    StateConflict,
    StoreUnavailable,
    TurngateError,
    UnsupportedInTarget,
)


def _raised(error: TurngateError) -> genai_errors.APIError:
    rendered = ADAPTER.render_error(error)
    reply = httpx.Response(
        rendered.status,
        json=rendered.body,
        headers=rendered.headers,
        request=httpx.Request(
            "POST", "http://127.0.0.1:9/gemini/v1beta/models/gemini-2.5-flash:generateContent"
        ),
    )
    with pytest.raises(genai_errors.APIError) as caught:
        genai_errors.APIError.raise_for_response(reply)
    return caught.value


def test_a_rejected_sequence_is_invalid_argument_and_the_sdk_raises_client_error():
    verdict = check(body(user(text("hi")), model(text("hello")), user(response("f", id="call_7"))))
    error = SequenceRejected(verdict.violations)
    rendered = ADAPTER.render_error(error)
    assert rendered.status == 400
    assert rendered.headers["Turngate-Rejection"] == "orphan_result"
    envelope = rendered.body["error"]
    assert envelope["code"] == 400
    assert envelope["status"] == "INVALID_ARGUMENT"
    (info,) = envelope["details"]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert info["reason"] == "orphan_result"
    assert info["domain"] == "turngate.dev"
    assert info["metadata"]["location"] == "contents[2]"
    assert info["metadata"]["callId"] == "call_7"
    assert info["metadata"]["blockId"] == "m2.b0"
    assert all(isinstance(v, str) for v in info["metadata"].values())

    raised = _raised(error)
    assert isinstance(raised, genai_errors.ClientError)
    assert raised.code == 400
    assert raised.status == "INVALID_ARGUMENT"
    assert raised.message is not None
    assert raised.message.startswith(
        "turngate: tool result 'call_7' answers no tool call (contents[2])"
    )
    assert raised.details["error"]["details"][0]["reason"] == "orphan_result"


def test_a_waiting_sequence_is_failed_precondition():
    verdict = check(body(user(text("hi")), model(call("f", id="a"))))
    raised = _raised(SequenceWaiting(verdict.violations))
    assert isinstance(raised, genai_errors.ClientError)
    assert (raised.code, raised.status) == (400, "FAILED_PRECONDITION")
    assert "'a'" in (raised.message or "")


@pytest.mark.parametrize(
    ("error", "status", "canonical", "kind"),
    [
        (UnsupportedInTarget("turngate: a refusal block"), 400, "INVALID_ARGUMENT", "client"),
        (
            StateConflict("turngate: paused", rule="conversation_paused"),
            409,
            "ABORTED",
            "client",
        ),
        (StoreUnavailable("turngate: store down"), 503, "UNAVAILABLE", "server"),
    ],
)
def test_other_errors_keep_their_status_and_rule(
    error: TurngateError, status: int, canonical: str, kind: str
):
    raised = _raised(error)
    expected = genai_errors.ClientError if kind == "client" else genai_errors.ServerError
    assert isinstance(raised, expected)
    assert (raised.code, raised.status) == (status, canonical)
    assert raised.details["error"]["details"][0]["reason"] == error.rule
