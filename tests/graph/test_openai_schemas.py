"""OpenAI refuses a declared function whose parameters hold an array schema with no items,
on Chat and Responses alike; turngate finds the first such array wherever it is nested and
names it as OpenAI does."""

from __future__ import annotations

from typing import Any

import pytest

from turngate.adapters import get_adapter
from turngate.graph.validator import validate


def chat(parameters: Any) -> dict[str, Any]:
    tool = {"type": "function", "function": {"name": "search", "parameters": parameters}}
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "tools": [tool]}


def responses(parameters: Any) -> dict[str, Any]:
    tool = {"type": "function", "name": "search", "parameters": parameters}
    return {"model": "gpt-5", "input": "hi", "tools": [tool]}


def refusal(api: str, request: dict[str, Any]) -> str | None:
    adapter = get_adapter(api)
    verdict = validate(adapter.parse_request(request), adapter.capabilities)
    if verdict.ready:
        return None
    (found,) = verdict.violations
    assert found.rule == "openai_array_items"
    return found.message


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


BARE = {"type": "array"}


@pytest.mark.parametrize(
    ("parameters", "context"),
    [
        pytest.param(obj(tags=BARE), "('properties', 'tags')", id="a property"),
        pytest.param(
            obj(filter=obj(ids=BARE)), "('properties', 'filter', 'properties', 'ids')", id="nested"
        ),
        pytest.param(
            obj(rows={"type": "array", "items": BARE}),
            "('properties', 'rows', 'items')",
            id="an array of bare arrays",
        ),
        pytest.param(
            obj(value={"anyOf": [{"type": "string"}, BARE]}),
            "('properties', 'value', 'anyOf', '1')",
            id="an anyOf branch (hermes-agent PR #24208)",
        ),
        pytest.param(
            {**obj(leg={"$ref": "#/$defs/leg"}), "$defs": {"leg": obj(stops=BARE)}},
            "('$defs', 'leg', 'properties', 'stops')",
            id="a definition",
        ),
    ],
)
@pytest.mark.parametrize(("api", "build"), [("openai_chat", chat), ("openai_responses", responses)])
def test_a_bare_array_is_named_as_openai_names_it(
    parameters: dict[str, Any], context: str, api: str, build: Any
):
    message = refusal(api, build(parameters))
    assert message is not None
    words = (
        f"Invalid schema for function 'search': In context={context}, array schema missing items."
    )
    assert words in message


@pytest.mark.parametrize(
    "parameters",
    [
        obj(tags={"type": "array", "items": {}}),
        obj(tags={"type": "array", "items": {"type": "string"}}),
        obj(pair={"type": "array", "prefixItems": [{"type": "string"}, {"type": "number"}]}),
        obj(note={"type": "string"}),
        {},
    ],
)
@pytest.mark.parametrize(("api", "build"), [("openai_chat", chat), ("openai_responses", responses)])
def test_arrays_that_say_what_they_hold_go_up(parameters: dict[str, Any], api: str, build: Any):
    assert refusal(api, build(parameters)) is None


def test_a_schema_nested_past_what_json_takes_is_left_to_the_depth_check():
    """A body this deep is refused whole by the proxy's depth check (json_too_deep); the rule
    itself neither raises nor refuses it (found by tests/fuzz)."""
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(300):
        node["items"] = {}
        node = node["items"]
    assert refusal("openai_chat", chat(deep)) is None
