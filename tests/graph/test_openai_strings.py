"""OpenAI refuses any one string of a request longer than 10,485,760 characters: a text, a
tool's output, a call's arguments. turngate refuses it before sending, naming the message
and the call; a plain Chat request holding one is never outlined, so it is judged on its
built blocks like any other."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from turngate.adapters import get_adapter
from turngate.graph.rules.openai_strings import MAX_STRING
from turngate.graph.validator import validate

LONG = "x" * (MAX_STRING + 1)
FITS = "x" * MAX_STRING


def refusals(api: str, request: dict[str, Any]) -> list[str]:
    adapter = get_adapter(api)
    seq = adapter.parse_request(request)
    verdict = validate(seq, adapter.capabilities)
    assert all(v.rule == "openai_string_too_long" for v in verdict.violations)
    return [v.message for v in verdict.violations]


def chat_call(arguments: str) -> dict[str, Any]:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "read", "arguments": arguments},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def chat(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": "go"}, *messages]}


WORDS = "string too long. Expected a string with maximum length 10485760, but got a string with "


@pytest.mark.parametrize(
    ("request_body", "field", "what"),
    [
        pytest.param(
            chat(chat_call("{}"), {"role": "tool", "tool_call_id": "call_1", "content": LONG}),
            "messages[2].content",
            "the result of call 'call_1'",
            id="a plain tool message",
        ),
        pytest.param(
            chat(
                chat_call("{}"),
                {
                    "role": "tool",
                    "tool_call_id": "call_1",
                    "content": [{"type": "text", "text": LONG}],
                },
            ),
            "messages[2]…",
            "the result of call 'call_1'",
            id="a tool message of parts",
        ),
        pytest.param(
            chat(
                chat_call(orjson.dumps({"text": LONG[:-11]}).decode()),
                {"role": "tool", "tool_call_id": "call_1", "content": "done"},
            ),
            "messages[1].tool_calls[0].function.arguments",
            "the arguments of call 'call_1'",
            id="a call's arguments",
        ),
        pytest.param(
            {"model": "gpt-4o", "messages": [{"role": "user", "content": LONG}]},
            "messages[0].content",
            "a text",
            id="a user's text",
        ),
    ],
)
def test_a_chat_string_past_the_limit_is_refused_where_it_is(
    request_body: dict[str, Any], field: str, what: str
):
    (message,) = refusals("openai_chat", request_body)
    assert f"Invalid '{field}': {WORDS}length " in message
    assert message.startswith(f"{what} in {field.rstrip('…')} holds ")


def test_a_responses_tool_output_past_the_limit_is_refused_and_one_at_it_goes_up():
    def body(output: str) -> dict[str, Any]:
        call = {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": "{}"}
        answer = {"type": "function_call_output", "call_id": "call_1", "output": output}
        return {"model": "gpt-5", "input": [{"role": "user", "content": "go"}, call, answer]}

    (message,) = refusals("openai_responses", body(LONG))
    assert f"Invalid 'input[2].output': {WORDS}length {MAX_STRING + 1} instead." in message
    assert refusals("openai_responses", body(FITS)) == []
    plain = chat(chat_call("{}"), {"role": "tool", "tool_call_id": "call_1", "content": FITS})
    assert refusals("openai_chat", plain) == []


def test_a_plain_chat_request_is_outlined_unless_a_string_is_past_the_limit():
    """The rule runs on built blocks only; the outline declines what it would refuse."""
    adapter = get_adapter("openai_chat")
    answer = {"role": "tool", "tool_call_id": "call_1", "content": "done"}
    for fits, long in (
        (
            chat(chat_call("{}"), {**answer, "content": FITS}),
            chat(chat_call("{}"), {**answer, "content": LONG}),
        ),
        (chat(chat_call(f'"{FITS[:-2]}"'), answer), chat(chat_call(f'"{LONG[:-2]}"'), answer)),
        (
            {"model": "gpt-4o", "messages": [{"role": "user", "content": FITS}]},
            {"model": "gpt-4o", "messages": [{"role": "user", "content": LONG}]},
        ),
    ):
        assert adapter.parse_request(fits).outline is not None
        assert adapter.parse_request(long).outline is None
