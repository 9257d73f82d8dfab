"""Recorded Anthropic traffic: every request body parses, is READY and round-trips; every
non-streaming response body parses into the turn it carries, and that turn is the one the
next recorded request sends back as history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.fixtures_dir import COUNTS, fixture_params, fixture_paths, load_json
from turngate.adapters.anthropic import ADAPTER, CAPABILITIES
from turngate.adapters.anthropic.response import history_message
from turngate.errors import UpstreamProtocolError
from turngate.graph.model import (
    ReasoningBlock,
    ServerToolBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from turngate.graph.turn import semantic_digest_of
from turngate.graph.validator import validate

# What each native content type becomes in the graph (never a string, never dropped).
GRAPH_KIND = {
    "text": "text",
    "image": "image",
    "document": "file",
    "search_result": "snippet",
    "thinking": "reasoning",
    "redacted_thinking": "reasoning",
    "tool_use": "tool_call",
    "tool_result": "tool_result",
    "server_tool_use": "server_tool",
}


def _json(path: Path) -> dict[str, Any]:
    value = load_json(path)
    assert isinstance(value, dict)
    return value


@pytest.mark.parametrize("path", fixture_params("anthropic/*.request.json"))
def test_request_fixture_parses_is_ready_and_round_trips(path: Path) -> None:
    # No recorded Anthropic request was refused for its sequence (the two 400/404 bodies were
    # refused for an effort level and a model name), so every one must be READY.
    request = _json(path)
    seq = ADAPTER.parse_request(request)
    verdict = validate(seq, CAPABILITIES)
    assert verdict.status == "READY", verdict.violations
    assert ADAPTER.render_request(seq) == request
    for index, native in enumerate(request["messages"]):
        content = native["content"]
        parts = [{"type": "text"}] if isinstance(content, str) else content
        graph = {b.id: b for m in seq.messages if m.index == index for b in m.blocks}
        for j, part in enumerate(parts):
            block = graph[f"m{index}.b{j}"]
            assert block.kind == GRAPH_KIND.get(part["type"], "server_tool"), part["type"]
    COUNTS["anthropic request bodies round-tripped"] += 1


def test_thinking_signature_is_kept_byte_exact() -> None:
    paths = fixture_paths("anthropic/lla-thinking-signature-roundtrip.request.json")
    if not paths:
        pytest.skip("recorded fixtures absent")
    raw = paths[0].read_bytes()
    seq = ADAPTER.parse_request(_json(paths[0]))
    (thinking,) = [b for _m, b in seq.blocks() if isinstance(b, ReasoningBlock)]
    assert thinking.provider == "anthropic"
    assert thinking.signature
    # The SDK sent compact JSON: the signature sits in the recorded bytes exactly as kept.
    assert f'"signature":"{thinking.signature}"'.encode() in raw
    call = next(b for _m, b in seq.blocks() if isinstance(b, ToolCallBlock))
    assert thinking.order < call.order
    assert thinking.id.split(".")[0] == call.id.split(".")[0]


def test_server_tool_blocks_keep_their_native_fields() -> None:
    paths = fixture_paths("anthropic/pai-tool-search-mixed.request.json")
    if not paths:
        pytest.skip("recorded fixtures absent")
    seq = ADAPTER.parse_request(_json(paths[0]))
    hosted = [t for t in seq.tools if t.tool_type == "hosted"]
    assert [t.name for t in hosted] == ["tool_search_tool_bm25"]
    assert [t.attrs.get("defer_loading") for t in seq.tools if t.tool_type == "function"] == [
        True,
        True,
    ]


@pytest.mark.parametrize(
    "path", fixture_params("anthropic/pai-nonstream-*.json", exclude=".request.json")
)
def test_response_fixture_parses_into_its_turn(path: Path) -> None:
    response = _json(path)
    turn = ADAPTER.parse_response(response)
    content = response["content"]
    assert turn.handle == response["id"]
    assert turn.handle is not None
    assert turn.handle.startswith("msg_")
    assert turn.model == response["model"]
    assert turn.stop_reason == response["stop_reason"]
    uses = [c for c in content if c["type"] == "tool_use"]
    assert [(c.call_id, c.name) for c in turn.tool_calls] == [(u["id"], u["name"]) for u in uses]
    assert [c.argument_state for c in turn.tool_calls] == ["complete"] * len(uses)
    assert [load_arguments(c.arguments) for c in turn.tool_calls] == [u["input"] for u in uses]
    texts = [b.text for b in turn.blocks if isinstance(b, TextBlock)]
    assert texts == [c["text"] for c in content if c["type"] == "text"]
    signatures = [b.signature for b in turn.blocks if isinstance(b, ReasoningBlock)]
    assert signatures == [c["signature"] for c in content if c["type"] == "thinking"]
    usage = response["usage"]
    prompt = (
        usage["input_tokens"]
        + usage["cache_creation_input_tokens"]
        + usage["cache_read_input_tokens"]
    )
    assert turn.usage is not None
    assert turn.usage.input_tokens == prompt
    assert turn.usage.output_tokens == usage["output_tokens"]
    assert turn.usage.total_tokens == prompt + usage["output_tokens"]
    # Sent back as history, the turn is the same content blocks the provider returned.
    assert history_message(turn.blocks) == {"role": "assistant", "content": content}
    COUNTS["anthropic response bodies parsed"] += 1


def load_arguments(arguments: str) -> Any:
    return orjson.loads(arguments)


def test_a_committed_turn_is_the_history_of_the_next_request() -> None:
    """The 4-call response and the request that answers it: the assistant turn in that request's
    history has the same semantic digest as the turn parsed from the response."""
    first = fixture_paths("anthropic/pai-nonstream-4-parallel-tool-use.json")
    after = fixture_paths("anthropic/pai-nonstream-after-4-tool-results.request.json")
    if not first or not after:
        pytest.skip("recorded fixtures absent")
    turn = ADAPTER.parse_response(_json(first[0]))
    seq = ADAPTER.parse_request(_json(after[0]))
    (history,) = [m for m in seq.messages if m.role == "assistant"]
    assert semantic_digest_of(history.blocks) == turn.semantic_digest
    results = [b for _m, b in seq.blocks() if isinstance(b, ToolResultBlock)]
    assert [r.call_id for r in results] == [c.call_id for c in turn.tool_calls]
    assert [e.result_status for e in seq.edges] == ["success"] * 4


@pytest.mark.parametrize(
    "path", fixture_params("anthropic/pai-error-*.json", exclude=".request.json")
)
def test_an_error_body_is_not_a_turn(path: Path) -> None:
    with pytest.raises(UpstreamProtocolError):
        ADAPTER.parse_response(_json(path))


def test_parsed_blocks_of_a_server_tool_response_stay_provider_bound() -> None:
    """A response carrying web search (as the streamed fixture's blocks would arrive whole)."""
    response = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-0",
        "content": [
            {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {}},
            {
                "type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_01",
                "content": [
                    {"type": "web_search_result", "url": "https://a.example", "title": "A"}
                ],
            },
            {"type": "text", "text": "Top news", "citations": None},
        ],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 3},
    }
    turn = ADAPTER.parse_response(response)
    call, result, text = turn.blocks
    assert isinstance(call, ServerToolBlock)
    assert isinstance(result, ServerToolBlock)
    assert (call.phase, call.call_id, call.name) == ("call", "srvtoolu_01", "web_search")
    assert (result.phase, result.call_id) == ("result", "srvtoolu_01")
    assert result.attrs["content"] == response["content"][1]["content"]
    assert isinstance(text, TextBlock)
    assert turn.tool_calls == []
    assert history_message(turn.blocks)["content"] == response["content"]
