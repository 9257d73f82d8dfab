"""Every ordered pair of the four APIs: two parallel tool calls and their results, parsed
from the source API, render to a body the target's official SDK types accept and parse back
to an equivalent, READY graph."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from google.genai import types as genai_types
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from pydantic import TypeAdapter

from tests.adapters.sdk_drain import drain
from tests.fixtures_dir import COUNTS
from turngate.adapters import API_NAMES, get_adapter
from turngate.adapters.base import RouteInfo
from turngate.graph.equivalence import semantic_view
from turngate.graph.validator import validate

ROUTE = RouteInfo(model="gemini-2.5-flash", stream=False)
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}

NATIVE: dict[str, dict[str, Any]] = {
    "openai_chat": {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": "Checking both.",
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_a", "content": "18C"},
            {"role": "tool", "tool_call_id": "call_b", "content": "22C"},
            {"role": "assistant", "content": "Paris 18C, Rome 22C."},
            {"role": "user", "content": "Thanks!"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather.",
                    "parameters": WEATHER,
                },
            }
        ],
    },
    "anthropic": {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": "Answer briefly.",
        "messages": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking both."},
                    {
                        "type": "tool_use",
                        "id": "toolu_a",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_b",
                        "name": "get_weather",
                        "input": {"city": "Rome"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_a", "content": "18C"},
                    {"type": "tool_result", "tool_use_id": "toolu_b", "content": "22C"},
                ],
            },
            {"role": "assistant", "content": "Paris 18C, Rome 22C."},
            {"role": "user", "content": "Thanks!"},
        ],
        "tools": [{"name": "get_weather", "description": "Weather.", "input_schema": WEATHER}],
    },
    "openai_responses": {
        "model": "gpt-5",
        "instructions": "Answer briefly.",
        "input": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": "Checking both."},
            {
                "type": "function_call",
                "call_id": "call_a",
                "name": "get_weather",
                "arguments": '{"city":"Paris"}',
            },
            {
                "type": "function_call",
                "call_id": "call_b",
                "name": "get_weather",
                "arguments": '{"city":"Rome"}',
            },
            {"type": "function_call_output", "call_id": "call_a", "output": "18C"},
            {"type": "function_call_output", "call_id": "call_b", "output": "22C"},
            {"role": "assistant", "content": "Paris 18C, Rome 22C."},
            {"role": "user", "content": "Thanks!"},
        ],
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "description": "Weather.",
                "parameters": WEATHER,
                "strict": False,
            }
        ],
    },
    "gemini": {
        "systemInstruction": {"parts": [{"text": "Answer briefly."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "Weather in Paris and Rome?"}]},
            {
                "role": "model",
                "parts": [
                    {"text": "Checking both."},
                    {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
                    {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "get_weather", "response": {"output": "18C"}}},
                    {"functionResponse": {"name": "get_weather", "response": {"output": "22C"}}},
                ],
            },
            {"role": "model", "parts": [{"text": "Paris 18C, Rome 22C."}]},
            {"role": "user", "parts": [{"text": "Thanks!"}]},
        ],
        "tools": [
            {
                "functionDeclarations": [
                    {"name": "get_weather", "description": "Weather.", "parameters": WEATHER}
                ]
            }
        ],
    },
}


# Kept alive at module level: a lazy ValidatorIterator dies with its TypeAdapter.
SDK_TYPES: dict[str, TypeAdapter[Any]] = {
    "openai_chat": TypeAdapter(CompletionCreateParamsNonStreaming),
    "openai_responses": TypeAdapter(ResponseCreateParamsNonStreaming),
    "anthropic": TypeAdapter(MessageCreateParamsNonStreaming),
}
GEMINI_CONTENTS = TypeAdapter(list[genai_types.Content])
GEMINI_TOOLS = TypeAdapter(list[genai_types.Tool])


def sdk_accepts(api: str, body: dict[str, Any]) -> None:
    if api in SDK_TYPES:
        drain(SDK_TYPES[api].validate_python(body))
        return
    GEMINI_CONTENTS.validate_json(orjson.dumps(body["contents"]))
    if "systemInstruction" in body:
        genai_types.Content.model_validate_json(orjson.dumps(body["systemInstruction"]))
    if "tools" in body:
        GEMINI_TOOLS.validate_json(orjson.dumps(body["tools"]))


PAIRS = [(s, t) for s in API_NAMES for t in API_NAMES if s != t]


@pytest.mark.parametrize("source", API_NAMES)
def test_each_native_conversation_is_ready_and_round_trips(source: str):
    adapter = get_adapter(source)
    seq = adapter.parse_request(NATIVE[source], ROUTE)
    assert validate(seq, adapter.capabilities).status == "READY"
    assert adapter.render_request(seq) == NATIVE[source]


@pytest.mark.parametrize(("source", "target"), PAIRS, ids=[f"{s}->{t}" for s, t in PAIRS])
def test_parallel_calls_render_across_every_pair(source: str, target: str):
    origin = get_adapter(source).parse_request(NATIVE[source], ROUTE)
    destination = get_adapter(target)
    body = destination.render_request(origin)
    sdk_accepts(target, orjson.loads(orjson.dumps(body)))
    back = destination.parse_request(body, ROUTE)
    assert validate(back, destination.capabilities).status == "READY"
    assert semantic_view(back) == semantic_view(origin)
    calls = [v for v in semantic_view(back) if v[1] == "tool_call"]
    assert [c[4] for c in calls] == [{"city": "Paris"}, {"city": "Rome"}]
    COUNTS["cross-provider pairs rendered and parsed back"] += 1
