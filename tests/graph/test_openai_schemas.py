"""OpenAI refuses a declared function whose parameters hold an array schema with no items,
on Chat and Responses alike, and a schema marked strict that leaves an object open; turngate
finds the first such schema wherever it is nested and names it as OpenAI does."""

from __future__ import annotations

from typing import Any, Literal

import openai
import pytest
from openai.lib._parsing._completions import type_to_response_format_param
from pydantic import BaseModel

from turngate.adapters import get_adapter
from turngate.graph.validator import validate


def chat(parameters: Any, **marks: Any) -> dict[str, Any]:
    function = {"name": "search", "parameters": parameters, **marks}
    tool = {"type": "function", "function": function}
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "tools": [tool]}


def responses(parameters: Any, **marks: Any) -> dict[str, Any]:
    tool = {"type": "function", "name": "search", "parameters": parameters, **marks}
    return {"model": "gpt-5", "input": "hi", "tools": [tool]}


def refusal(api: str, request: dict[str, Any], rule: str = "openai_array_items") -> str | None:
    adapter = get_adapter(api)
    verdict = validate(adapter.parse_request(request), adapter.capabilities)
    if verdict.ready:
        return None
    (found,) = verdict.violations
    assert found.rule == rule
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


STRICT = "openai_strict_schema"


def closed(**properties: Any) -> dict[str, Any]:
    return {**obj(**properties), "additionalProperties": False, "required": list(properties)}


TEXT = {"type": "string"}
OPEN_WORDS = "'additionalProperties' is required to be supplied and to be false."
EVERY_KEY = "'required' is required to be supplied and to be an array including every key in"


@pytest.mark.parametrize(
    ("parameters", "context", "words"),
    [
        pytest.param(obj(note=TEXT), "()", OPEN_WORDS, id="the root left open"),
        pytest.param(
            {**obj(city=TEXT, note=TEXT), "additionalProperties": False, "required": ["city"]},
            "()",
            f"{EVERY_KEY} properties. Missing 'note'.",
            id="an optional property (codex output schemas)",
        ),
        pytest.param(
            {**closed(city=TEXT), "required": ["city", "country"]},
            "()",
            f"{EVERY_KEY} properties. Extra required key 'country' supplied.",
            id="a required key with no property",
        ),
        pytest.param(
            closed(personas={"type": "array", "items": obj(name=TEXT)}),
            "('properties', 'personas', 'items')",
            OPEN_WORDS,
            id="an object in an array",
        ),
        pytest.param(
            closed(filter={"type": ["object", "null"], "properties": {"a": TEXT}}),
            "('properties', 'filter')",
            OPEN_WORDS,
            id="a nullable object (agents-python #4114)",
        ),
        pytest.param(
            {**closed(leg={"$ref": "#/$defs/leg"}), "$defs": {"leg": obj(stop=TEXT)}},
            "('$defs', 'leg')",
            OPEN_WORDS,
            id="a definition",
        ),
        pytest.param(
            closed(value={"anyOf": [TEXT, {"type": "object", "properties": {}}]}),
            "('properties', 'value', 'anyOf', '1')",
            OPEN_WORDS,
            id="an anyOf branch",
        ),
    ],
)
@pytest.mark.parametrize(("api", "build"), [("openai_chat", chat), ("openai_responses", responses)])
def test_a_strict_function_that_leaves_an_object_open_is_named_as_openai_names_it(
    parameters: dict[str, Any], context: str, words: str, api: str, build: Any
):
    message = refusal(api, build(parameters, strict=True), STRICT)
    assert message is not None
    assert f"Invalid schema for function 'search': In context={context}, {words}" in message
    assert refusal(api, build(parameters, strict=False)) is None
    assert refusal(api, build(parameters)) is None, "an omitted strict is not judged"


@pytest.mark.parametrize(
    "parameters",
    [
        closed(city=TEXT, note={"type": ["string", "null"]}),
        closed(),
        {"type": "object", "properties": {}, "additionalProperties": False},
        closed(tags={"type": "array", "items": closed(name=TEXT)}),
        {**closed(leg={"$ref": "#/$defs/leg"}), "$defs": {"leg": closed(stop=TEXT)}},
    ],
)
@pytest.mark.parametrize(("api", "build"), [("openai_chat", chat), ("openai_responses", responses)])
def test_strict_schemas_that_close_every_object_go_up(
    parameters: dict[str, Any], api: str, build: Any
):
    assert refusal(api, build(parameters, strict=True), STRICT) is None


class Stop(BaseModel):
    city: str
    minutes: int | None = None


class Trip(BaseModel):
    """What the openai SDK's own helpers make strict: optional fields, nested models, lists."""

    stops: list[Stop]
    first: Stop
    note: str | None = None
    mode: Literal["train", "bus"] = "train"


def test_the_openai_sdks_own_strict_schemas_go_up():
    tool = openai.pydantic_function_tool(Trip)
    request = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "plan"}],
        "tools": [tool],
        "response_format": type_to_response_format_param(Trip),
    }
    assert tool["function"].get("strict") is True
    assert refusal("openai_chat", request, STRICT) is None


def test_a_strict_response_format_is_judged_on_both_apis():
    schema = {**obj(answer=TEXT, note=TEXT), "additionalProperties": False, "required": ["answer"]}
    missing = f"{EVERY_KEY} properties. Missing 'note'."
    chat_format = {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}
    request: dict[str, Any] = {**chat(closed()), "response_format": chat_format}
    assert refusal("openai_chat", request, STRICT) is None, "not marked strict"
    chat_format["json_schema"]["strict"] = True
    message = refusal("openai_chat", request, STRICT)
    assert message is not None
    assert message.startswith("response_format is marked strict")
    assert f"Invalid schema for response_format 'reply': In context=(), {missing}" in message
    text_format = {"type": "json_schema", "name": "reply", "schema": schema, "strict": True}
    request = {**responses(closed()), "text": {"format": text_format}}
    message = refusal("openai_responses", request, STRICT)
    assert message is not None
    assert message.startswith("text.format.schema is marked strict")


ROOT = "openai_schema_root"
ROOT_WORDS = "schema must be a JSON Schema of 'type: \"object\"', got 'type: \"{}\"'."


@pytest.mark.parametrize(
    ("parameters", "got"),
    [
        pytest.param({"type": "array", "items": TEXT}, "array", id="an array root"),
        pytest.param(
            {"anyOf": [closed(path=TEXT), closed(url=TEXT)]}, "None", id="a zod union's root"
        ),
        pytest.param({"oneOf": [closed(path=TEXT)], "description": "x"}, "None", id="oneOf"),
    ],
)
@pytest.mark.parametrize(("api", "build"), [("openai_chat", chat), ("openai_responses", responses)])
def test_a_root_that_is_not_an_object_is_refused_strict_or_not(
    parameters: dict[str, Any], got: str, api: str, build: Any
):
    words = f"Invalid schema for function 'search': {ROOT_WORDS.format(got)}"
    for marks in ({}, {"strict": False}):
        message = refusal(api, build(parameters, **marks), ROOT)
        assert message is not None
        assert words in message


@pytest.mark.parametrize(
    "parameters",
    [
        {},
        {"type": "object", "anyOf": [closed(path=TEXT)]},
        {"type": "object", "properties": {"q": TEXT}},
    ],
)
@pytest.mark.parametrize(("api", "build"), [("openai_chat", chat), ("openai_responses", responses)])
def test_object_roots_and_an_empty_schema_go_up(parameters: dict[str, Any], api: str, build: Any):
    assert refusal(api, build(parameters), ROOT) is None


def test_a_response_format_that_is_not_an_object_is_refused_strict_or_not():
    schema = {"type": "array", "items": closed(title=TEXT)}
    chat_format = {"type": "json_schema", "json_schema": {"name": "chapters", "schema": schema}}
    message = refusal("openai_chat", {**chat(closed()), "response_format": chat_format}, ROOT)
    assert message is not None
    words = f"Invalid schema for response_format 'chapters': {ROOT_WORDS.format('array')}"
    assert words in message
    text_format = {"type": "json_schema", "name": "chapters", "schema": schema}
    request = {**responses(closed()), "text": {"format": text_format}}
    message = refusal("openai_responses", request, ROOT)
    assert message is not None
    assert message.startswith("text.format.schema is not an object schema")


def test_a_required_list_holding_other_than_names_is_judged_by_its_names():
    """Entries that are not strings (a dict, a list) name no property: the object still
    misses its one property, and nothing raises."""
    parameters = {
        **obj(a=TEXT),
        "additionalProperties": False,
        "required": [{"x": 1}, ["a"], None],
    }
    message = refusal("openai_chat", chat(parameters, strict=True), STRICT)
    assert message is not None
    assert "Missing 'a'." in message


def test_a_strict_response_format_with_a_bare_array_is_refused_as_a_function_would_be():
    schema = closed(tags={"type": "array"})
    chat_format = {
        "type": "json_schema",
        "json_schema": {"name": "labels", "schema": schema, "strict": True},
    }
    message = refusal("openai_chat", {**chat(closed()), "response_format": chat_format})
    assert message is not None
    words = (
        "Invalid schema for response_format 'labels': In context=('properties', 'tags'), "
        "array schema missing items."
    )
    assert words in message
    chat_format["json_schema"]["strict"] = False
    assert refusal("openai_chat", {**chat(closed()), "response_format": chat_format}) is None
