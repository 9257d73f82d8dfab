"""Gemini non-streaming response bodies parsed into the assistant turn they carry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.adapters.gemini_builders import body, parse, text, user
from tests.fixtures_dir import fixture_params, load_json
from turngate.adapters.gemini import ADAPTER
from turngate.adapters.gemini.response import history_content
from turngate.errors import UpstreamProtocolError
from turngate.graph.model import Message, ToolCallBlock
from turngate.graph.rules.gemini import thought_signature
from turngate.graph.turn import semantic_digest_of

_RESPONSES = [
    p
    for p in fixture_params("gemini/pai-*.json")
    if not (isinstance(p.values[0], Path) and p.values[0].name.endswith(".request.json"))
    and not (isinstance(p.values[0], Path) and "error" in p.values[0].name)
]


@pytest.mark.parametrize("path", _RESPONSES)
def test_recorded_responses_parse_into_the_turn_they_carry(path: Path):
    recorded = load_json(path)
    assert isinstance(recorded, dict)
    turn = ADAPTER.parse_response(recorded)
    candidate = recorded["candidates"][0]
    parts: list[dict[str, Any]] = candidate["content"].get("parts", [])
    assert turn.handle == recorded["responseId"]
    assert turn.model == recorded["modelVersion"]
    assert turn.stop_reason == candidate["finishReason"]
    assert [c.name for c in turn.tool_calls] == [
        p["functionCall"]["name"] for p in parts if "functionCall" in p
    ]
    assert [orjson.loads(c.arguments) for c in turn.tool_calls] == [
        p["functionCall"]["args"] for p in parts if "functionCall" in p
    ]
    assert len({c.call_id for c in turn.tool_calls}) == len(turn.tool_calls)
    assert [thought_signature(b) for b in turn.blocks] == [p.get("thoughtSignature") for p in parts]
    usage = recorded["usageMetadata"]
    assert turn.usage is not None
    assert turn.usage.input_tokens == usage["promptTokenCount"]
    assert turn.usage.total_tokens == usage["totalTokenCount"]
    if "candidatesTokenCount" in usage:
        output = usage["candidatesTokenCount"] + usage.get("thoughtsTokenCount", 0)
        assert turn.usage.output_tokens == output
        assert usage["promptTokenCount"] + output == usage["totalTokenCount"]


def test_a_blocked_prompt_has_no_blocks_and_the_block_reason_as_stop_reason():
    turn = ADAPTER.parse_response(
        {
            "promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
            "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9},
            "modelVersion": "gemini-2.5-flash",
            "responseId": "r1",
        }
    )
    assert turn.blocks == ()
    assert turn.stop_reason == "PROHIBITED_CONTENT"
    assert turn.handle == "r1"
    assert turn.usage is not None
    assert turn.usage.output_tokens is None


@pytest.mark.parametrize(
    "not_a_response",
    [
        {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}},
        {"candidates": [{"content": "text"}]},
        # Found by the response fuzzer: content with no role and parts null raised KeyError.
        {"candidates": [{"content": {"parts": None}, "finishReason": "STOP"}]},
        {"candidates": [{"content": {"role": "user", "parts": [{"text": "hi"}]}}]},
    ],
)
def test_a_body_that_is_not_a_response_is_an_upstream_protocol_error(not_a_response: Any):
    with pytest.raises(UpstreamProtocolError):
        ADAPTER.parse_response(not_a_response)


def test_a_turn_echoed_back_by_the_client_is_the_same_turn_in_the_history():
    """google-genai chats send the model content back unchanged, without call ids."""
    recorded = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {
                            "functionCall": {"name": "f", "args": {"a": 1}},
                            "thoughtSignature": "AQ==",
                        },
                        {"functionCall": {"name": "f", "args": {"a": 2}}},
                        {"functionCall": {"name": "g", "args": {}}},
                    ],
                },
                "finishReason": "STOP",
            }
        ],
        "responseId": "r2",
    }
    turn = ADAPTER.parse_response(recorded)
    message = Message(index=0, role="assistant", blocks=turn.blocks, origin="contents")
    echoed = history_content(message)
    assert echoed == recorded["candidates"][0]["content"]
    seq = parse(body(user(text("go")), echoed))
    history_blocks = seq.messages[1].blocks
    assert semantic_digest_of(history_blocks) == turn.semantic_digest
    assert [b.call_id for b in history_blocks if isinstance(b, ToolCallBlock)] == [
        c.call_id for c in turn.tool_calls
    ]
