"""Across providers: graphs from other APIs render to Anthropic bodies the official SDK's
request types accept and parse back to the same conversation; Anthropic graphs render to the
other APIs, or are refused naming the block those cannot carry."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from anthropic.types.message_create_params import (
    MessageCreateParamsBase,
    MessageCreateParamsNonStreaming,
    MessageCreateParamsStreaming,
)
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsNonStreaming,
    CompletionCreateParamsStreaming,
)
from pydantic import TypeAdapter

from tests.adapters import gemini_builders as gem
from tests.adapters.anthropic_builders import (
    assistant,
    body,
    parse,
    text,
    thinking,
    tool_result,
    tool_use,
    user,
)
from tests.adapters.sdk_drain import drain
from tests.fixtures_dir import COUNTS, fixture_params, load_json
from tests.graph import chat_builders as chat
from turngate.adapters import API_NAMES, get_adapter
from turngate.adapters.anthropic import ADAPTER, CAPABILITIES
from turngate.adapters.anthropic.foreign import DEFAULT_MAX_TOKENS, fit_foreign
from turngate.adapters.base import RouteInfo
from turngate.errors import UnsupportedInTarget
from turngate.graph.equivalence import semantic_view
from turngate.graph.model import MessageSequence, ToolCallBlock, ToolResultBlock
from turngate.graph.validator import validate

CHAT = get_adapter("openai_chat")
_ANTHROPIC_PARAMS: dict[bool, TypeAdapter[Any]] = {
    False: TypeAdapter(MessageCreateParamsNonStreaming),
    True: TypeAdapter(MessageCreateParamsStreaming),
}
_CHAT_PARAMS: dict[bool, TypeAdapter[Any]] = {
    False: TypeAdapter(CompletionCreateParamsNonStreaming),
    True: TypeAdapter(CompletionCreateParamsStreaming),
}


def sdk_accepts_anthropic(rendered: dict[str, Any]) -> None:
    drain(_ANTHROPIC_PARAMS[rendered.get("stream") is True].validate_python(rendered))
    # The SDK types ignore unknown keys; a foreign graph must not leak any.
    allowed = set(MessageCreateParamsBase.__annotations__) | {"stream"}
    assert set(rendered) <= allowed, set(rendered) - allowed


def sdk_accepts_chat(rendered: dict[str, Any]) -> None:
    drain(_CHAT_PARAMS[rendered.get("stream") is True].validate_python(rendered))


def _turns_with_parallel_results(seq: MessageSequence) -> set[str]:
    """Ids of results whose assistant turn was answered by more than one result."""
    grouped: set[str] = set()
    calls_per_turn: list[set[str]] = []
    for message in seq.messages:
        calls = {b.call_id for b in message.blocks if isinstance(b, ToolCallBlock)}
        if calls:
            calls_per_turn.append(calls)
    for calls in calls_per_turn:
        results = [
            b for _m, b in seq.blocks() if isinstance(b, ToolResultBlock) and b.call_id in calls
        ]
        if len(results) > 1:
            grouped.update(r.id for r in results)
    return grouped


@pytest.mark.parametrize("path", fixture_params("openai-chat/*.request.json"))
def test_chat_fixtures_render_to_anthropic_and_back(path: Path) -> None:
    request = load_json(path)
    assert isinstance(request, dict)
    chat_seq = CHAT.parse_request(request)
    rendered = ADAPTER.render_request(chat_seq)
    sdk_accepts_anthropic(rendered)
    parsed = ADAPTER.parse_request(rendered)
    assert semantic_view(parsed) == semantic_view(chat_seq)
    assert validate(parsed, CAPABILITIES).ready
    assert rendered["max_tokens"] == (chat_seq.max_output_tokens or DEFAULT_MAX_TOKENS)
    # Chat sends one tool message per result; Anthropic wants a turn's results in one user
    # message: each result that moved is recorded.
    notes = fit_foreign(chat_seq, CAPABILITIES).normalizations
    regrouped = {n.block_id for n in notes if n.rule == "results_regrouped"}
    assert regrouped == _turns_with_parallel_results(chat_seq)
    if any(isinstance(b, ToolCallBlock) for _m, b in chat_seq.blocks()):
        COUNTS["openai_chat requests with tool calls rendered to anthropic"] += 1


@pytest.mark.parametrize("path", fixture_params("anthropic/*.request.json"))
def test_anthropic_fixtures_render_to_chat_or_are_refused_by_name(path: Path) -> None:
    request = load_json(path)
    assert isinstance(request, dict)
    seq = ADAPTER.parse_request(request)
    uncarried = {
        b.id: b.kind
        for _m, b in seq.blocks()
        if b.kind not in get_adapter("openai_chat").capabilities.block_kinds
    }
    # Chat cannot carry server tools either: a hosted tool definition is refused by name.
    named = [f"'{i}'" for i in uncarried] + [
        f"'{t.name}'" for t in seq.tools if t.tool_type == "hosted"
    ]
    if named:
        with pytest.raises(UnsupportedInTarget) as refused:
            CHAT.render_request(seq)
        assert refused.value.rule == "unsupported_in_target"
        assert any(name in refused.value.message for name in named)
        COUNTS["anthropic requests refused by chat, naming the block"] += 1
        return
    rendered = CHAT.render_request(seq)
    sdk_accepts_chat(rendered)
    back = CHAT.parse_request(rendered)
    assert semantic_view(back) == semantic_view(seq)
    assert validate(back, CHAT.capabilities).ready
    COUNTS["anthropic requests rendered to openai_chat"] += 1


def _parallel_conversation() -> dict[str, Any]:
    return body(
        user("Weather in Paris and Rome?"),
        assistant(
            text("Checking both."),
            tool_use("toolu_1", input={"city": "Paris"}),
            tool_use("toolu_2", input={"city": "Rome"}),
        ),
        user(tool_result("toolu_2", content="rainy"), tool_result("toolu_1", content="sunny")),
        system="Be brief.",
    )


@pytest.mark.parametrize("api", [a for a in API_NAMES if a != "anthropic"])
def test_two_parallel_calls_go_to_every_other_api_and_come_back(api: str) -> None:
    try:
        other = get_adapter(api)
    except ImportError:
        pytest.skip(f"the {api} adapter is not built yet")
    seq = parse(_parallel_conversation())
    there = other.render_request(seq)
    route = RouteInfo(model="claude-sonnet-4-5") if api == "gemini" else None
    theirs = other.parse_request(there, route)
    assert validate(theirs, other.capabilities).ready
    # Each API places results its own way (Gemini and Chat in call order): compare with the
    # graph as fitted for that API, then bring it back to Anthropic.
    back = ADAPTER.render_request(theirs)
    sdk_accepts_anthropic(back)
    parsed = ADAPTER.parse_request(back)
    assert semantic_view(parsed) == semantic_view(theirs)
    assert validate(parsed, CAPABILITIES).ready
    calls = [(b.name, b.arguments) for _m, b in parsed.blocks() if isinstance(b, ToolCallBlock)]
    assert calls == [("get_weather", '{"city":"Paris"}'), ("get_weather", '{"city":"Rome"}')]
    results = [b for _m, b in parsed.blocks() if isinstance(b, ToolResultBlock)]
    assert len(results) == 2
    assert len({r.call_id for r in results}) == 2


def test_chat_results_followed_by_text_are_grouped_before_it() -> None:
    request = chat.body(
        chat.user("hi"),
        chat.assistant(calls=[chat.call("call_a"), chat.call("call_b")]),
        chat.tool("call_a"),
        chat.tool("call_b", content="rainy"),
        chat.user("thanks, and tomorrow?"),
    )
    rendered = ADAPTER.render_request(CHAT.parse_request(request))
    third, fourth = rendered["messages"][2:]
    assert [b["type"] for b in third["content"]] == ["tool_result", "tool_result"]
    assert [b["tool_use_id"] for b in third["content"]] == ["call_a", "call_b"]
    assert fourth == {"role": "user", "content": "thanks, and tomorrow?"}


def test_foreign_changes_are_recorded_not_silent() -> None:
    request = chat.body(
        chat.system("be brief"),
        chat.user("hi"),
        {**chat.assistant("", calls=[chat.call("call.1")])},
        chat.tool("call.1"),
        chat.system("now answer in French"),
        chat.user("merci"),
    )
    seq = CHAT.parse_request(request)
    fitted = fit_foreign(seq, CAPABILITIES)
    rules = sorted(n.rule for n in fitted.normalizations)
    assert rules == ["call_id_rewritten", "call_id_rewritten", "empty_text_dropped"]
    rendered = ADAPTER.render_request(seq)
    sdk_accepts_anthropic(rendered)
    assert rendered["system"] == "be brief"
    assert rendered["messages"][3] == {"role": "system", "content": "now answer in French"}
    parsed = ADAPTER.parse_request(rendered)
    assert validate(parsed, CAPABILITIES).ready
    (call,) = [b for _m, b in parsed.blocks() if isinstance(b, ToolCallBlock)]
    (result,) = [b for _m, b in parsed.blocks() if isinstance(b, ToolResultBlock)]
    assert call.call_id == result.call_id != "call.1"


def _calls_and_answers(parsed: MessageSequence) -> list[tuple[str, str]]:
    """(call id, the text of the result that answers it), in call order."""
    results = {
        b.call_id: b.content[0].text  # type: ignore[union-attr]
        for _m, b in parsed.blocks()
        if isinstance(b, ToolResultBlock)
    }
    return [
        (b.call_id, results[b.call_id]) for _m, b in parsed.blocks() if isinstance(b, ToolCallBlock)
    ]


@pytest.mark.parametrize("source", ["gemini", "openai_chat"])
def test_a_call_id_a_later_turn_uses_again_is_sent_as_a_new_one(source: str) -> None:
    # Anthropic refuses a tool_use id used twice in a conversation; Gemini's synthesized ids
    # (``gemini:get_weather#0`` in every turn) and a backend numbering its calls per turn
    # (``call_0``) repeat them. Each later call gets a fresh id, and its result with it.
    if source == "gemini":
        turns = [
            gem.model(gem.call("get_weather", {"city": city}))
            if i % 2 == 0
            else gem.user(gem.response("get_weather", temp))
            for city, temp in (("Paris", "18C"), ("Rome", "22C"), ("Oslo", "3C"))
            for i in range(2)
        ]
        seq = gem.parse(gem.body(gem.user(gem.text("Weather, city by city?")), *turns))
    else:
        turns = [
            message
            for city, temp in (("Paris", "18C"), ("Rome", "22C"), ("Oslo", "3C"))
            for message in (
                chat.assistant(calls=[chat.call("call_0", arguments=f'{{"city":"{city}"}}')]),
                chat.tool("call_0", content=temp),
            )
        ]
        seq = get_adapter(source).parse_request(chat.body(chat.user("Weather?"), *turns))
    rendered = ADAPTER.render_request(seq)
    sdk_accepts_anthropic(rendered)
    parsed = ADAPTER.parse_request(rendered)
    assert validate(parsed, CAPABILITIES).ready
    pairs = _calls_and_answers(parsed)
    assert [answer for _id, answer in pairs] == ["18C", "22C", "3C"]
    assert len({call_id for call_id, _answer in pairs}) == 3
    notes = fit_foreign(seq, CAPABILITIES).normalizations
    assert sum("used by an earlier turn" in n.detail for n in notes) == 4  # 2 calls, 2 results


def test_an_image_moves_between_chat_and_anthropic_unchanged() -> None:
    png = "iVBORw0KGgo="
    request = chat.body(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
            ],
        }
    )
    rendered = ADAPTER.render_request(CHAT.parse_request(request))
    sdk_accepts_anthropic(rendered)
    image = rendered["messages"][0]["content"][1]
    assert image == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": png},
    }
    back = CHAT.render_request(ADAPTER.parse_request(rendered))
    assert back["messages"][0]["content"][1]["image_url"]["url"] == f"data:image/png;base64,{png}"


@pytest.mark.parametrize(
    ("request_body", "named"),
    [
        pytest.param(
            chat.body(
                {"role": "user", "content": [{"type": "file", "file": {"file_id": "file-a"}}]}
            ),
            "'m0.b0'",
            id="another provider's file id",
        ),
        pytest.param(
            chat.body(
                {
                    "role": "user",
                    "content": [
                        {"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}}
                    ],
                }
            ),
            "'m0.b0'",
            id="audio",
        ),
        pytest.param(
            chat.body(
                chat.user("hi"),
                chat.assistant(
                    calls=[{"id": "c1", "type": "custom", "custom": {"name": "sh", "input": "ls"}}]
                ),
                chat.tool("c1"),
            ),
            "'m1.b0'",
            id="a free-form custom tool call",
        ),
        pytest.param(
            {**chat.body(chat.user("hi")), "tools": [{"type": "web_search_preview"}]},
            "'web_search_preview'",
            id="a hosted tool",
        ),
    ],
)
def test_what_anthropic_cannot_carry_is_refused_by_name(
    request_body: dict[str, Any], named: str
) -> None:
    seq = CHAT.parse_request(request_body)
    with pytest.raises(UnsupportedInTarget) as refused:
        ADAPTER.render_request(seq)
    assert refused.value.rule == "unsupported_in_target"
    assert named in refused.value.message


def test_a_cancelled_result_is_sent_as_an_error_and_recorded() -> None:
    seq = CHAT.parse_request(
        chat.body(chat.user("hi"), chat.assistant(calls=[chat.call("c1")]), chat.tool("c1"))
    )
    messages = list(seq.messages)
    (result,) = messages[2].blocks
    assert isinstance(result, ToolResultBlock)
    messages[2] = dataclasses.replace(
        messages[2], blocks=(dataclasses.replace(result, status="cancel"),)
    )
    cancelled = dataclasses.replace(seq, messages=tuple(messages))
    notes = fit_foreign(cancelled, CAPABILITIES).normalizations
    assert [(n.rule, n.block_id) for n in notes] == [("result_status_mapped", result.id)]
    rendered = ADAPTER.render_request(cancelled)
    assert rendered["messages"][2]["content"][0]["is_error"] is True


def test_thinking_from_anthropic_is_refused_by_chat_naming_it() -> None:
    seq = parse(
        body(
            user("hi"),
            assistant(thinking(), tool_use("toolu_1")),
            user(tool_result("toolu_1")),
            thinking={"type": "enabled", "budget_tokens": 1024},
        )
    )
    with pytest.raises(UnsupportedInTarget) as refused:
        CHAT.render_request(seq)
    assert "'m1.b0'" in refused.value.message
