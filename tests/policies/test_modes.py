"""Rollout modes: which requests each mode enforces and which it only shadows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_dir import COUNTS, fixture_params, load_json
from tests.graph.chat_builders import assistant, body, call, tool, user
from turngate.adapters import detect_api, get_adapter
from turngate.adapters.openai_chat import ADAPTER
from turngate.policies.modes import MODES, Mode, decide, decision_table_markdown

DOCS = Path(__file__).resolve().parents[2] / "docs" / "policies.md"


def without_tools(request: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in request.items() if k != "tools"}


REQUESTS: dict[str, dict[str, Any]] = {
    "plain chat": without_tools(body(user("hi"), assistant("hello"), user("how are you?"))),
    "tools defined, none called yet": body(user("weather in Paris?")),
    "tool blocks in history only": without_tools(
        body(user("weather?"), assistant(calls=[call("c1")]), tool("c1"), user("thanks"))
    ),
    "tools defined and called": body(user("weather?"), assistant(calls=[call("c1")]), tool("c1")),
}

# mode -> request -> decision. Written out by hand: this is the contract.
TABLE: dict[Mode, dict[str, str]] = {
    "shadow": {
        "plain chat": "shadow",
        "tools defined, none called yet": "shadow",
        "tool blocks in history only": "shadow",
        "tools defined and called": "shadow",
    },
    "enforce-no-tools": {
        "plain chat": "enforce",
        "tools defined, none called yet": "shadow",
        "tool blocks in history only": "shadow",
        "tools defined and called": "shadow",
    },
    "enforce": {
        "plain chat": "enforce",
        "tools defined, none called yet": "enforce",
        "tool blocks in history only": "enforce",
        "tools defined and called": "enforce",
    },
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(REQUESTS))
def test_each_mode_enforces_or_shadows_each_kind_of_request(mode: Mode, name: str):
    seq = ADAPTER.parse_request(REQUESTS[name])
    decision = decide(mode, seq)
    assert decision.decision == TABLE[mode][name]
    assert decision.enforced == (TABLE[mode][name] == "enforce")


def test_the_table_covers_every_mode_and_request():
    assert set(TABLE) == set(MODES)
    assert all(set(row) == set(REQUESTS) for row in TABLE.values())


@pytest.mark.parametrize("path", fixture_params("*/*.request.json"))
def test_enforce_no_tools_shadows_every_recorded_tool_request(path: Path):
    request = load_json(path)
    assert isinstance(request, dict)
    api = detect_api(request)
    assert api is not None
    seq = get_adapter(api).parse_request(request)
    calls_tools = "tools" in request or any(
        marker in path.read_text()
        for marker in ('"tool_calls"', '"tool_use"', '"functionCall"', '"function_call"')
    )
    decision = decide("enforce-no-tools", seq)
    assert decision.enforced == (not calls_tools), decision
    assert decide("shadow", seq).decision == "shadow"
    assert decide("enforce", seq).decision == "enforce"
    COUNTS[f"mode decisions over recorded requests: enforce-no-tools {decision.decision}"] += 1


def test_docs_show_the_decision_table_the_code_uses():
    assert decision_table_markdown() in DOCS.read_text()
