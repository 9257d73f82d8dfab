"""Refusals in the OpenAI error envelope, raised by the official SDK as its own exceptions.

The SDK is pointed at an in-process transport that answers with what ``render_error``
built, so the exception comes out of the SDK's real response handling.
"""

from __future__ import annotations

from typing import Any

import httpx2
import openai
import orjson
import pytest

from turngate.adapters.openai_responses import ADAPTER, CAPABILITIES
from turngate.errors import SequenceRejected, StateConflict, TurngateError, UnsupportedInTarget
from turngate.graph.validator import validate


def sdk_error_for(error: TurngateError) -> openai.APIStatusError:
    rendered = ADAPTER.render_error(error)

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(
            rendered.status, content=orjson.dumps(rendered.body), headers=rendered.headers
        )

    with httpx2.Client(transport=httpx2.MockTransport(answer)) as http:
        client = openai.OpenAI(
            api_key="k", base_url="http://127.0.0.1:9/openai/v1", max_retries=0, http_client=http
        )
        with pytest.raises(openai.APIStatusError) as caught:
            client.responses.create(model="gpt-5", input="hi")
    return caught.value


def rejection(items: list[Any]) -> SequenceRejected:
    verdict = validate(ADAPTER.parse_request({"model": "gpt-5", "input": items}), CAPABILITIES)
    assert verdict.violations
    return SequenceRejected(verdict.violations)


def test_orphan_output_raises_bad_request_naming_rule_item_and_call() -> None:
    error = rejection(
        [
            {"role": "user", "content": "hi"},
            {"type": "function_call_output", "call_id": "call_7", "output": "x"},
        ]
    )
    rendered = ADAPTER.render_error(error)
    assert rendered.status == 400
    assert rendered.headers == {"Turngate-Rejection": "orphan_result"}
    assert set(rendered.body) == {"error"}
    assert set(rendered.body["error"]) == {"message", "type", "param", "code"}
    raised = sdk_error_for(error)
    assert isinstance(raised, openai.BadRequestError)
    assert raised.code == "orphan_result"
    assert raised.type == "invalid_request_error"
    assert raised.param == "input[1]"
    assert "call_7" in raised.message
    assert "input[1]" in raised.message
    assert raised.response.headers["turngate-rejection"] == "orphan_result"


def test_reasoning_rule_refusal_reaches_the_sdk_with_its_code() -> None:
    error = rejection(
        [
            {"role": "user", "content": "hi"},
            {"type": "reasoning", "id": "rs_5", "summary": [], "encrypted_content": "e"},
        ]
    )
    raised = sdk_error_for(error)
    assert isinstance(raised, openai.BadRequestError)
    assert raised.code == "responses_reasoning_unbound"
    assert "rs_5" in raised.message


def test_unsupported_in_target_and_state_conflict_map_to_their_sdk_types() -> None:
    unsupported = sdk_error_for(UnsupportedInTarget("turngate: a reasoning block cannot go"))
    assert isinstance(unsupported, openai.BadRequestError)
    assert unsupported.code == "unsupported_in_target"
    conflict = sdk_error_for(StateConflict("turngate: revision 3 was already committed"))
    assert isinstance(conflict, openai.ConflictError)
    assert conflict.code == "state_conflict"
