"""The OpenAI Chat adapter over every recorded request body, and its refusal envelope."""

from __future__ import annotations

from pathlib import Path

import httpx2 as httpx
import openai
import pytest

from tests.fixtures_dir import COUNTS, fixture_params, load_json
from tests.graph.chat_builders import assistant, body, call, tool, user
from turngate.adapters.openai_chat import ADAPTER, CAPABILITIES
from turngate.errors import SequenceRejected
from turngate.graph.validator import validate


@pytest.mark.parametrize("path", fixture_params("openai-chat/*.request.json"))
def test_every_recorded_request_round_trips_and_is_ready(path: Path):
    request = load_json(path)
    assert isinstance(request, dict)
    seq = ADAPTER.parse_request(request)
    assert ADAPTER.render_request(seq) == request
    assert validate(seq, CAPABILITIES).status == "READY"
    COUNTS["openai_chat request bodies round-tripped"] += 1


@pytest.mark.parametrize(
    "path", fixture_params("openai-chat/pai-nonstream-*.json", exclude=".request.json")
)
def test_recorded_responses_parse_into_the_turn_they_carry(path: Path):
    response = load_json(path)
    assert isinstance(response, dict)
    turn = ADAPTER.parse_response(response)
    message = response["choices"][0]["message"]
    assert turn.handle == response["id"]
    assert turn.stop_reason == response["choices"][0]["finish_reason"]
    assert [c.call_id for c in turn.tool_calls] == [
        c["id"] for c in message.get("tool_calls") or []
    ]
    assert turn.usage is not None
    assert turn.usage.input_tokens == response["usage"]["prompt_tokens"]


def test_unknown_fields_are_kept_everywhere():
    request = body(
        {"role": "user", "content": [{"type": "text", "text": "hi", "vendor_x": 1}], "name": "ann"},
        assistant(calls=[{**call("c1"), "vendor_call": True}]),
        {**tool("c1"), "vendor_tool": [1, 2]},
    )
    request["temperature"] = 0.2
    request["vendor_top"] = {"a": None}
    request["tools"][0]["function"]["strict"] = True
    seq = ADAPTER.parse_request(request)
    assert ADAPTER.render_request(seq) == request


def test_refusal_is_the_openai_envelope_and_the_sdk_raises_bad_request():
    seq = ADAPTER.parse_request(body(user("hi"), assistant("hello"), tool("call_7")))
    verdict = validate(seq, CAPABILITIES)
    error = ADAPTER.render_error(SequenceRejected(verdict.violations))
    assert error.status == 400
    assert error.headers["Turngate-Rejection"] == "orphan_result"
    assert error.body["error"]["code"] == "orphan_result"
    assert error.body["error"]["param"] == "messages[2]"
    client = openai.OpenAI(api_key="k", base_url="http://127.0.0.1:9/v1")
    response = httpx.Response(
        error.status,
        json=error.body,
        request=httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions"),
    )
    raised = client._make_status_error_from_response(response)
    assert isinstance(raised, openai.BadRequestError)
    assert raised.code == "orphan_result"
    assert "turngate: tool result 'call_7' answers no tool call (messages[2])" in str(raised)
