"""Recorded OpenAI Responses traffic: every request body parses, is READY and round-trips;
the one the provider refused for its item order is refused by turngate; non-streaming
response bodies parse into the turn they carry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_dir import COUNTS, fixture_params, fixture_paths, load_json
from turngate.adapters.openai_responses import ADAPTER, CAPABILITIES
from turngate.graph.model import ReasoningBlock, TextBlock
from turngate.graph.validator import validate

# Request bodies the provider refused because of their item sequence, and the rule that
# refuses them here. (pai-error-400-invalid-temperature was refused for temperature -1:
# not a sequence problem, so it must be READY.)
REFUSED_FOR_SEQUENCE = {
    "pai-error-400-reasoning-item-order.request.json": "responses_reasoning_unbound",
}


def _body(path: Path) -> dict[str, Any]:
    body = load_json(path)
    assert isinstance(body, dict)
    return body


@pytest.mark.parametrize("path", fixture_params("openai-responses/*.request.json"))
def test_request_fixture_parses_validates_and_round_trips(path: Path) -> None:
    body = _body(path)
    seq = ADAPTER.parse_request(body)
    verdict = validate(seq, CAPABILITIES)
    expected_rule = REFUSED_FOR_SEQUENCE.get(path.name)
    if expected_rule is not None:
        assert verdict.status == "REJECTED"
        assert verdict.rules == [expected_rule]
    else:
        assert verdict.status == "READY", verdict.violations
    assert ADAPTER.render_request(seq) == body
    # Every item is one message, in order, and nothing of it went unmodelled into a string.
    items = body["input"] if isinstance(body["input"], list) else [body["input"]]
    assert [m.index for m in seq.messages if m.origin == "input"] == list(range(len(items)))
    COUNTS["openai_responses request bodies round-tripped"] += 1


def test_the_provider_refused_reasoning_order_is_refused_with_its_item_named() -> None:
    paths = fixture_paths("openai-responses/pai-error-400-reasoning-item-order.request.json")
    if not paths:
        pytest.skip("recorded fixtures absent")
    body = _body(paths[0])
    provider_error = _body(paths[0].with_name("pai-error-400-reasoning-item-order.json"))
    verdict = validate(ADAPTER.parse_request(body), CAPABILITIES)
    (found,) = verdict.violations
    reasoning_index = next(
        i for i, item in enumerate(body["input"]) if item.get("type") == "reasoning"
    )
    rs_id = body["input"][reasoning_index]["id"]
    # The provider names the same item in its own refusal.
    assert rs_id in provider_error["error"]["message"]
    assert found.rule == "responses_reasoning_unbound"
    assert found.location == f"input[{reasoning_index}]"
    assert rs_id in found.message


def test_reasoning_payloads_and_phase_survive_byte_exact() -> None:
    paths = fixture_paths("openai-responses/pai-phase-commentary-turn2.request.json")
    if not paths:
        pytest.skip("recorded fixtures absent")
    body = _body(paths[0])
    seq = ADAPTER.parse_request(body)
    reasoning_items = [i for i in body["input"] if i.get("type") == "reasoning"]
    payloads = [b.payload for m in seq.messages for b in m.blocks if isinstance(b, ReasoningBlock)]
    assert payloads == [i["encrypted_content"] for i in reasoning_items]
    phased = [m for m in seq.messages if "phase" in m.attrs]
    assert [m.attrs["phase"] for m in phased] == [i["phase"] for i in body["input"] if "phase" in i]
    assert all(m.role == "assistant" for m in phased)


def _response_pairs() -> list[Any]:
    params = []
    for path in fixture_paths("openai-responses/*.json"):
        if path.name.endswith(".request.json"):
            continue
        body = _body(path)
        if body.get("object") == "response":
            params.append(pytest.param(path, id=path.name))
    return params or fixture_params("openai-responses/pai-nonstream-*.json")


@pytest.mark.parametrize("path", _response_pairs())
def test_nonstream_response_fixture_parses_into_its_turn(path: Path) -> None:
    body = _body(path)
    turn = ADAPTER.parse_response(body)
    output = body["output"]
    calls = [i for i in output if i["type"] == "function_call"]
    texts = [
        p["text"]
        for i in output
        if i["type"] == "message"
        for p in i["content"]
        if p["type"] == "output_text"
    ]
    assert [(c.call_id, c.name, c.arguments) for c in turn.tool_calls] == [
        (c["call_id"], c["name"], c["arguments"]) for c in calls
    ]
    # The pairing key is call_id; the fc_ item id stays a native attribute.
    assert [c.attrs.get("id") for c in turn.tool_calls] == [c.get("id") for c in calls]
    assert [b.text for b in turn.blocks if isinstance(b, TextBlock)] == texts
    assert turn.handle == body["id"]
    assert turn.model == body["model"]
    assert turn.stop_reason == body["status"]
    assert turn.usage is not None
    assert (turn.usage.input_tokens, turn.usage.output_tokens, turn.usage.total_tokens) == (
        body["usage"]["input_tokens"],
        body["usage"]["output_tokens"],
        body["usage"]["total_tokens"],
    )
    COUNTS["openai_responses response bodies parsed"] += 1
