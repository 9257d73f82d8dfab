"""OpenAI refuses a tool_choice that the declared tools cannot meet: Chat's tool_choice or
parallel_tool_calls with no tools at all, and on both APIs a choice forcing a function the
request does not declare. turngate refuses them before sending."""

from __future__ import annotations

from typing import Any

import pytest

from turngate.adapters import get_adapter
from turngate.graph.validator import validate

SEARCH = {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}
HI = [{"role": "user", "content": "hi"}]


def refusals(api: str, request: dict[str, Any]) -> list[str]:
    adapter = get_adapter(api)
    verdict = validate(adapter.parse_request(request), adapter.capabilities)
    assert all(v.rule == "openai_tool_choice" for v in verdict.violations), verdict.violations
    return [v.message for v in verdict.violations]


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": HI, **fields}


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        pytest.param({"tool_choice": "auto"}, ["tool_choice"], id="auto"),
        pytest.param({"tool_choice": "required"}, ["tool_choice"], id="required"),
        pytest.param({"parallel_tool_calls": False}, ["parallel_tool_calls"], id="parallel"),
        pytest.param(
            {"tools": [], "tool_choice": "auto", "parallel_tool_calls": True},
            ["tool_choice", "parallel_tool_calls"],
            id="an emptied tool list",
        ),
    ],
)
def test_chat_choices_with_no_tools_are_refused_in_openais_words(
    fields: dict[str, Any], names: list[str]
):
    messages = refusals("openai_chat", chat(**fields))
    assert len(messages) == len(names)
    for message, name in zip(messages, names, strict=True):
        words = f"Invalid value for '{name}': '{name}' is only allowed when 'tools' are specified."
        assert words in message


def test_a_chat_choice_forcing_an_undeclared_function_is_refused():
    choice = {"type": "function", "function": {"name": "fetch"}}
    (message,) = refusals("openai_chat", chat(tools=[SEARCH], tool_choice=choice))
    assert "forces the function tool 'fetch'" in message


@pytest.mark.parametrize(
    "fields",
    [
        {"tool_choice": "none"},
        {},
        {"tools": [SEARCH], "tool_choice": "required", "parallel_tool_calls": False},
        {"tools": [SEARCH], "tool_choice": {"type": "function", "function": {"name": "search"}}},
    ],
)
def test_chat_choices_the_tools_meet_go_up(fields: dict[str, Any]):
    assert refusals("openai_chat", chat(**fields)) == []


def test_a_responses_choice_forcing_an_undeclared_function_is_refused_in_openais_words():
    tools = [{"type": "function", "name": "search", "parameters": {"type": "object"}}]
    request: dict[str, Any] = {"model": "gpt-5", "input": "hi", "tools": tools}
    (message,) = refusals(
        "openai_responses", {**request, "tool_choice": {"type": "function", "name": "fetch"}}
    )
    assert "Tool choice 'fetch' not found in 'tools' parameter." in message
    chosen = {**request, "tool_choice": {"type": "function", "name": "search"}}
    assert refusals("openai_responses", chosen) == []
    no_tools = {
        "model": "gpt-5",
        "input": "hi",
        "tool_choice": "auto",
        "parallel_tool_calls": False,
    }
    assert refusals("openai_responses", no_tools) == [], "codex sends these with no tools"
