"""Across providers: OpenAI Chat graphs rendered to Gemini, and Gemini graphs to Chat.

A rendered Gemini body must be accepted by google-genai's own types, parse back to a graph
with the same semantic view, and say (as normalizations) where results were regrouped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from google.genai import types
from openai.types.chat import completion_create_params
from pydantic import TypeAdapter

from tests.adapters.gemini_builders import body, call, model, parse, recorded_route, response
from tests.adapters.gemini_builders import text as text_part
from tests.adapters.gemini_builders import user as user_content
from tests.fixtures_dir import COUNTS, fixture_params, load_json
from turngate.adapters import get_adapter
from turngate.adapters.gemini import ADAPTER, CAPABILITIES
from turngate.errors import UnsupportedInTarget
from turngate.graph.equivalence import semantic_view
from turngate.graph.model import MessageSequence, ToolCallBlock, ToolResultBlock
from turngate.graph.validator import validate

CHAT = get_adapter("openai_chat")

_REST_FIELDS = frozenset(
    {"contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "safetySettings"}
)


def assert_google_genai_accepts(request: dict[str, Any]) -> None:
    """Each part of the body validates as google-genai's own type (unknown fields refused)."""
    assert set(request) <= _REST_FIELDS
    TypeAdapter(list[types.Content]).validate_json(orjson.dumps(request["contents"]))
    if "systemInstruction" in request:
        types.Content.model_validate_json(orjson.dumps(request["systemInstruction"]))
    if "tools" in request:
        TypeAdapter(list[types.Tool]).validate_json(orjson.dumps(request["tools"]))
    if "generationConfig" in request:
        types.GenerationConfig.model_validate_json(orjson.dumps(request["generationConfig"]))
    for content in request["contents"]:
        assert content["role"] in ("user", "model")
        assert content["parts"], "Gemini refuses a content without parts"


def _chat_requests_with_calls() -> list[Any]:
    out = []
    for param in fixture_params("openai-chat/*.request.json"):
        path = param.values[0]
        if isinstance(path, Path) and "tool_calls" not in path.read_text():
            continue
        out.append(param)
    return out


@pytest.mark.parametrize("path", _chat_requests_with_calls())
def test_recorded_chat_conversations_render_to_gemini_and_back(path: Path):
    request = load_json(path)
    assert isinstance(request, dict)
    seq = CHAT.parse_request(request)
    rendered = ADAPTER.render_request(seq)
    assert_google_genai_accepts(rendered)
    back = ADAPTER.parse_request(rendered)
    assert semantic_view(back) == semantic_view(seq)
    assert validate(back, CAPABILITIES).status == validate(seq, CHAT.capabilities).status
    assert ADAPTER.render_request(back) == rendered

    fitted = ADAPTER.fit(seq)
    moved = {n.block_id for n in fitted.normalizations if n.rule == "results_regrouped"}
    # Chat answers each call in a tool message of its own; Gemini wants one content per turn.
    expected = {
        b.id
        for m, b in seq.blocks()
        if isinstance(b, ToolResultBlock) and _turn_size(seq, b.call_id) > 1 and m.role == "tool"
    }
    assert moved == expected
    signed = [n for n in fitted.normalizations if n.rule == "thought_signature_placeholder"]
    call_turns = [c for c in rendered["contents"] if any("functionCall" in p for p in c["parts"])]
    assert len(signed) == len(call_turns)
    COUNTS["chat conversations rendered to gemini"] += 1


def _turn_size(seq: MessageSequence, call_id: str) -> int:
    for message in seq.messages:
        calls = [b for b in message.blocks if isinstance(b, ToolCallBlock)]
        if any(c.call_id == call_id for c in calls):
            return len(calls)
    return 0


_GEMINI_WITH_CALLS = [
    p
    for p in fixture_params("gemini/*.request.json")
    if not isinstance(p.values[0], Path)
    or "functionCall" in p.values[0].read_text()
    or "function_call" in p.values[0].read_text()
]


@pytest.mark.parametrize("path", _GEMINI_WITH_CALLS)
def test_recorded_gemini_conversations_render_to_chat_and_back(path: Path):
    request = load_json(path)
    assert isinstance(request, dict)
    seq = ADAPTER.parse_request(request, recorded_route(path))
    media_results = [b.id for _m, b in seq.blocks() if isinstance(b, ToolResultBlock) and b.content]
    if media_results:
        # Chat tool messages carry text only: an image answer is refused, never dropped.
        with pytest.raises(UnsupportedInTarget, match=f"'{media_results[0]}'"):
            CHAT.render_request(seq)
        return
    chat_body = CHAT.render_request(seq)
    params: Any = (
        completion_create_params.CompletionCreateParamsStreaming
        if chat_body.get("stream")
        else completion_create_params.CompletionCreateParamsNonStreaming
    )
    TypeAdapter(params).validate_python(chat_body)
    back = CHAT.parse_request(chat_body)
    assert semantic_view(back) == semantic_view(seq)
    assert validate(back, CHAT.capabilities).status == "READY"
    COUNTS["gemini conversations rendered to openai_chat"] += 1


def _two_parallel_calls() -> dict[str, Any]:
    request = body(
        user_content(text_part("Weather in Paris and Rome?")),
        model(
            call("get_weather", {"city": "Paris"}, thoughtSignature="c2lnbmF0dXJl"),
            call("get_weather", {"city": "Rome"}),
        ),
        user_content(response("get_weather", "sunny"), response("get_weather", "rain")),
        system="Answer briefly.",
    )
    request["tools"] = [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": "Weather for a city",
                    "parametersJsonSchema": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                    },
                }
            ]
        }
    ]
    return request


def test_two_parallel_id_less_calls_cross_to_chat_and_back_to_gemini():
    seq = parse(_two_parallel_calls())
    assert validate(seq, CAPABILITIES).status == "READY"
    chat_body = CHAT.render_request(seq)
    TypeAdapter(completion_create_params.CompletionCreateParamsNonStreaming).validate_python(
        chat_body
    )
    tool_messages = [m for m in chat_body["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["sunny", "rain"]
    via_chat = CHAT.parse_request(chat_body)
    assert semantic_view(via_chat) == semantic_view(seq)

    again = ADAPTER.render_request(via_chat)
    assert_google_genai_accepts(again)
    responses = [p["functionResponse"] for p in again["contents"][2]["parts"]]
    calls = [p["functionCall"] for p in again["contents"][1]["parts"]]
    assert [r["id"] for r in responses] == [c["id"] for c in calls]
    assert [r["response"] for r in responses] == [{"output": "sunny"}, {"output": "rain"}]
    # The Gemini signature does not survive a trip through another vendor: the dummy does.
    assert again["contents"][1]["parts"][0]["thoughtSignature"] == (
        "skip_thought_signature_validator"
    )
    assert "thoughtSignature" not in again["contents"][1]["parts"][1]
    assert semantic_view(ADAPTER.parse_request(again)) == semantic_view(seq)


def test_chat_results_out_of_call_order_are_regrouped_in_call_order():
    seq = CHAT.parse_request(
        {
            "model": "gpt-4o",
            "messages": [
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "a",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        },
                        {
                            "id": "b",
                            "type": "function",
                            "function": {"name": "g", "arguments": "{}"},
                        },
                    ],
                },
                {"role": "tool", "tool_call_id": "b", "content": "B"},
                {"role": "tool", "tool_call_id": "a", "content": "A"},
                {"role": "user", "content": "thanks"},
            ],
        }
    )
    rendered = ADAPTER.render_request(seq)
    assert_google_genai_accepts(rendered)
    parts = rendered["contents"][2]["parts"]
    assert [p["functionResponse"]["id"] for p in parts[:2]] == ["a", "b"]
    assert parts[2] == {"text": "thanks"}
    notes = {n.rule for n in ADAPTER.fit(seq).normalizations}
    assert {"results_regrouped", "contents_merged", "thought_signature_placeholder"} <= notes
    assert validate(ADAPTER.parse_request(rendered), CAPABILITIES).status == "READY"


def test_what_gemini_cannot_carry_is_refused_not_dropped():
    refusal = CHAT.parse_request(
        {
            "model": "gpt-4o",
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
                {"role": "user", "content": "why"},
            ],
        }
    )
    with pytest.raises(UnsupportedInTarget, match="refusal block"):
        ADAPTER.render_request(refusal)
    late_system = CHAT.parse_request(
        {
            "model": "gpt-4o",
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "system", "content": "be terse"},
            ],
        }
    )
    with pytest.raises(UnsupportedInTarget, match=r"messages\[1\]"):
        ADAPTER.render_request(late_system)
