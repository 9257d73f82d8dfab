"""Across providers: OpenAI Chat graphs render to Responses (outputs after their calls, a
body the official SDK's request types accept, the same conversation parsed back), Responses
graphs render to Chat, and what the target cannot carry is refused, never dropped."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import orjson
import pytest
from openai.types.chat import completion_create_params as chat_params
from openai.types.responses import response_create_params as responses_params
from pydantic import TypeAdapter

from tests.fixtures_dir import COUNTS, fixture_params, load_json
from turngate.adapters import get_adapter
from turngate.adapters.openai_responses import ADAPTER, CAPABILITIES
from turngate.errors import UnsupportedInTarget
from turngate.graph.equivalence import semantic_view
from turngate.graph.model import (
    Message,
    MessageSequence,
    ReasoningBlock,
    ServerToolBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from turngate.graph.normalize import fit_to
from turngate.graph.validator import validate

CHAT = get_adapter("openai_chat")


@cache
def _responses_types() -> tuple[TypeAdapter[Any], TypeAdapter[Any]]:
    return (
        TypeAdapter(responses_params.ResponseCreateParamsNonStreaming),
        TypeAdapter(responses_params.ResponseCreateParamsStreaming),
    )


@cache
def _chat_types() -> tuple[TypeAdapter[Any], TypeAdapter[Any]]:
    return (
        TypeAdapter(chat_params.CompletionCreateParamsNonStreaming),
        TypeAdapter(chat_params.CompletionCreateParamsStreaming),
    )


def accepted_by_responses_sdk(body: dict[str, Any]) -> None:
    plain, streaming = _responses_types()
    (streaming if body.get("stream") else plain).validate_python(body)
    # TypedDicts ignore unknown keys: check those separately.
    assert set(body) <= set(responses_params.ResponseCreateParamsBase.__annotations__) | {"stream"}


def accepted_by_chat_sdk(body: dict[str, Any]) -> None:
    plain, streaming = _chat_types()
    (streaming if body.get("stream") else plain).validate_python(body)


def _chat_fixtures_with_tool_calls() -> list[Any]:
    params = fixture_params("openai-chat/*.request.json")
    out = []
    for param in params:
        path = param.values[0]
        if path is None:
            return params
        body = load_json(path)
        assert isinstance(body, dict)
        if any("tool_calls" in m for m in body["messages"]):
            out.append(param)
    return out


@pytest.mark.parametrize("path", _chat_fixtures_with_tool_calls())
def test_chat_fixture_renders_to_responses_and_back(path: Path) -> None:
    chat_seq = CHAT.parse_request(load_json(path))  # type: ignore[arg-type]
    body = ADAPTER.render_request(chat_seq)
    accepted_by_responses_sdk(orjson.loads(orjson.dumps(body)))
    back = ADAPTER.parse_request(body)
    assert semantic_view(back) == semantic_view(chat_seq)
    assert validate(back, CAPABILITIES).status == "READY"
    # Each output item comes after the item that made its call.
    position = {
        item["call_id"]: i
        for i, item in enumerate(body["input"])
        if item.get("type") == "function_call"
    }
    outputs = [
        (i, item["call_id"])
        for i, item in enumerate(body["input"])
        if item.get("type") == "function_call_output"
    ]
    assert outputs
    assert all(position[call_id] < i for i, call_id in outputs)
    COUNTS["openai_chat fixtures rendered to openai_responses"] += 1


def _common(block_id: str, role: Any, order: int) -> dict[str, Any]:
    return {"id": block_id, "role": role, "order": order, "trust": "untrusted"}


def grouped_results_graph(first_id: str = "toolu_1", second_id: str = "toolu_2") -> MessageSequence:
    """Anthropic-shaped: two parallel calls, both results in one user message, the second
    answered first, followed by user text in the same message."""
    return MessageSequence(
        api="anthropic",
        adapter="anthropic@1",
        model="claude-x",
        max_output_tokens=512,
        messages=(
            Message(
                index=0,
                role="system",
                origin="system",
                blocks=(
                    TextBlock(
                        text="Be brief.", **{**_common("s0.b0", "system", 0), "trust": "trusted"}
                    ),
                ),
            ),
            Message(
                index=0,
                role="user",
                blocks=(TextBlock(text="Weather?", **_common("m0.b0", "user", 1)),),
            ),
            Message(
                index=1,
                role="assistant",
                blocks=(
                    TextBlock(text="Checking both.", **_common("m1.b0", "assistant", 2)),
                    ToolCallBlock(
                        call_id=first_id,
                        name="get_weather",
                        arguments='{"city":"Paris"}',
                        argument_state="complete",
                        **_common("m1.b1", "assistant", 3),
                    ),
                    ToolCallBlock(
                        call_id=second_id,
                        name="get_weather",
                        arguments='{"city":"Rome"}',
                        argument_state="complete",
                        **_common("m1.b2", "assistant", 4),
                    ),
                ),
            ),
            Message(
                index=2,
                role="user",
                blocks=(
                    ToolResultBlock(
                        call_id=second_id,
                        content=(TextBlock(text="22C", **_common("m2.b0.c0", "tool", 6)),),
                        **_common("m2.b0", "tool", 5),
                    ),
                    ToolResultBlock(
                        call_id=first_id,
                        content=(TextBlock(text="18C", **_common("m2.b1.c0", "tool", 8)),),
                        **_common("m2.b1", "tool", 7),
                    ),
                    TextBlock(text="Thanks, and tomorrow?", **_common("m2.b2", "user", 9)),
                ),
            ),
        ),
    )


def test_grouped_results_are_split_into_outputs_after_their_calls_and_recorded() -> None:
    seq = grouped_results_graph()
    fitted = fit_to(seq, CAPABILITIES)
    moved = [n for n in fitted.normalizations if n.rule == "results_regrouped"]
    assert sorted(n.block_id for n in moved) == ["m2.b0", "m2.b1"]
    body = ADAPTER.render_request(seq)
    accepted_by_responses_sdk(body)
    assert body["instructions"] == "Be brief."
    assert body["max_output_tokens"] == 512
    kinds = [item.get("type", item.get("role")) for item in body["input"]]
    assert kinds == [
        "user",
        "assistant",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
        "user",
    ]
    assert [i["call_id"] for i in body["input"][4:6]] == ["toolu_1", "toolu_2"]
    back = ADAPTER.parse_request(body)
    assert semantic_view(back) == semantic_view(fitted)
    assert validate(back, CAPABILITIES).status == "READY"


def test_foreign_call_ids_too_long_for_responses_are_rewritten_on_both_ends() -> None:
    long_a, long_b = "toolu_" + "a" * 70, "toolu_" + "b" * 70
    body = ADAPTER.render_request(grouped_results_graph(long_a, long_b))
    ids = [i["call_id"] for i in body["input"] if "call_id" in i]
    assert all(len(i) <= 64 for i in ids)
    assert (ids[2], ids[3]) == (ids[0], ids[1])
    assert ids[0] != ids[1]
    notes = fit_to(grouped_results_graph(long_a, long_b), CAPABILITIES).normalizations
    assert {n.block_id for n in notes if n.rule == "call_id_rewritten"} == {
        "m1.b1",
        "m1.b2",
        "m2.b0",
        "m2.b1",
    }
    assert validate(ADAPTER.parse_request(body), CAPABILITIES).status == "READY"


def test_foreign_reasoning_and_hosted_tools_are_refused_by_responses() -> None:
    seq = grouped_results_graph()
    thinking = ReasoningBlock(
        provider="anthropic", text="hm", signature="sig", **_common("m1.b9", "assistant", 10)
    )
    signed = seq.messages[2]
    with_thinking = MessageSequence(
        api="anthropic",
        adapter="anthropic@1",
        model="claude-x",
        messages=(
            *seq.messages[:2],
            Message(index=1, role="assistant", blocks=(thinking, *signed.blocks)),
            seq.messages[3],
        ),
    )
    with pytest.raises(UnsupportedInTarget) as refused:
        ADAPTER.render_request(with_thinking)
    assert refused.value.rule == "unsupported_in_target"
    assert "m1.b9" in refused.value.message


# --- Responses graphs rendered to OpenAI Chat ---------------------------------------------


def _uncarriable_by_chat(seq: MessageSequence) -> bool:
    return any(isinstance(b, ReasoningBlock | ServerToolBlock) for _m, b in seq.blocks()) or any(
        t.tool_type == "hosted" for t in seq.tools
    )


@pytest.mark.parametrize("path", fixture_params("openai-responses/*.request.json"))
def test_responses_fixture_renders_to_chat_or_is_refused_naming_what(path: Path) -> None:
    seq = ADAPTER.parse_request(load_json(path))  # type: ignore[arg-type]
    if _uncarriable_by_chat(seq):
        with pytest.raises(UnsupportedInTarget) as refused:
            CHAT.render_request(seq)
        assert refused.value.rule == "unsupported_in_target"
        first = next(
            (b for _m, b in seq.blocks() if isinstance(b, ReasoningBlock | ServerToolBlock)), None
        )
        named = (
            first.id
            if first is not None
            else next(t.name for t in seq.tools if t.tool_type == "hosted")
        )
        assert named in refused.value.message
        COUNTS["openai_responses fixtures refused by openai_chat"] += 1
        return
    body = CHAT.render_request(seq)
    accepted_by_chat_sdk(orjson.loads(orjson.dumps(body)))
    back = CHAT.parse_request(body)
    assert semantic_view(back) == semantic_view(seq)
    COUNTS["openai_responses fixtures rendered to openai_chat"] += 1


def test_parallel_calls_go_responses_to_chat_and_back_unchanged() -> None:
    body = {
        "model": "gpt-5",
        "instructions": "Use tools.",
        "input": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_a",
                "name": "get_weather",
                "arguments": '{"city":"Paris"}',
            },
            {
                "type": "function_call",
                "id": "fc_2",
                "call_id": "call_b",
                "name": "get_weather",
                "arguments": '{"city":"Rome"}',
            },
            {"type": "function_call_output", "call_id": "call_b", "output": "22C"},
            {"type": "function_call_output", "call_id": "call_a", "output": "18C"},
        ],
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                "strict": False,
            }
        ],
    }
    seq = ADAPTER.parse_request(body)
    chat_body = CHAT.render_request(seq)
    accepted_by_chat_sdk(chat_body)
    chat_seq = CHAT.parse_request(chat_body)
    assert validate(chat_seq, CHAT.capabilities).status == "READY"
    assert semantic_view(chat_seq) == semantic_view(fit_to(seq, CHAT.capabilities))
    again = ADAPTER.render_request(chat_seq)
    accepted_by_responses_sdk(again)
    assert semantic_view(ADAPTER.parse_request(again)) == semantic_view(chat_seq)


def test_a_hosted_tool_item_going_to_chat_is_refused_naming_it() -> None:
    seq = ADAPTER.parse_request(
        {
            "model": "gpt-5",
            "input": [
                {"role": "user", "content": "news?"},
                {
                    "type": "web_search_call",
                    "id": "ws_1",
                    "status": "completed",
                    "action": {"type": "search", "query": "news"},
                },
                {"role": "assistant", "content": "Nothing new."},
            ],
        }
    )
    with pytest.raises(UnsupportedInTarget) as refused:
        CHAT.render_request(seq)
    assert "m1.b0" in refused.value.message
    assert "input[1]" in refused.value.message


# --- Responses <-> Anthropic and Gemini (adapters built by other engineers) -----------------

PARALLEL_BODY: dict[str, Any] = {
    "model": "gpt-5",
    "instructions": "Use tools.",
    "input": [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "Checking both."},
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_a",
            "name": "get_weather",
            "arguments": '{"city":"Paris"}',
        },
        {
            "type": "function_call",
            "id": "fc_2",
            "call_id": "call_b",
            "name": "get_weather",
            "arguments": '{"city":"Rome"}',
        },
        {"type": "function_call_output", "call_id": "call_b", "output": "22C"},
        {"type": "function_call_output", "call_id": "call_a", "output": "18C"},
    ],
    "tools": [
        {
            "type": "function",
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            "strict": False,
        }
    ],
}


def _accepted_by_target_sdk(api: str, body: dict[str, Any]) -> None:
    if api == "anthropic":
        from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

        TypeAdapter(MessageCreateParamsNonStreaming).validate_python(body)
        return
    from google.genai import types

    TypeAdapter(list[types.Content]).validate_json(orjson.dumps(body["contents"]))
    if "systemInstruction" in body:
        types.Content.model_validate_json(orjson.dumps(body["systemInstruction"]))
    if "tools" in body:
        TypeAdapter(list[types.Tool]).validate_json(orjson.dumps(body["tools"]))


@pytest.mark.parametrize("api", ["anthropic", "gemini"])
def test_parallel_calls_go_to_another_provider_and_back(api: str) -> None:
    try:
        target = get_adapter(api)
    except ImportError:
        pytest.skip(f"the {api} adapter is not built yet")
    seq = ADAPTER.parse_request(PARALLEL_BODY)
    body = target.render_request(seq)
    _accepted_by_target_sdk(api, orjson.loads(orjson.dumps(body)))
    there = target.parse_request(body)
    assert validate(there, target.capabilities).status == "READY"
    assert semantic_view(there) == semantic_view(fit_to(seq, target.capabilities))
    # And from that provider back to Responses: outputs after calls, same conversation.
    again = ADAPTER.render_request(there)
    accepted_by_responses_sdk(orjson.loads(orjson.dumps(again)))
    back = ADAPTER.parse_request(again)
    assert validate(back, CAPABILITIES).status == "READY"
    assert semantic_view(back) == semantic_view(there)
