"""Checking an answer's tool calls against the request's declared schemas, as the proxy does
(``call_schemas`` then ``check_turn``, the same check the stream assembler makes)."""

from __future__ import annotations

import logging
from typing import Any

import fastjsonschema
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from turngate.errors import UpstreamProtocolError
from turngate.graph.model import MessageSequence, ToolCallBlock, ToolDef
from turngate.graph.turn import AssistantTurn
from turngate.proxy.tool_calls import SchemaCache
from turngate.proxy.turn_check import call_schemas, check_turn

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def request_with(*tools: ToolDef) -> MessageSequence:
    return MessageSequence(api="openai_chat", adapter="test@1", model="m", messages=(), tools=tools)


def answer_calling(name: str, arguments: str, tool_type: str = "function") -> AssistantTurn:
    call = ToolCallBlock(
        id="b0",
        role="assistant",
        order=0,
        trust="untrusted",
        call_id="call_1",
        name=name,
        arguments=arguments,
        argument_state="complete",
        tool_type=tool_type,  # type: ignore[arg-type]
    )
    return AssistantTurn(handle="h", model="m", blocks=(call,), stop_reason="tool_calls")


def check_tool_calls(turn: AssistantTurn, seq: MessageSequence, cache: SchemaCache) -> None:
    check_turn(turn, call_schemas(seq, cache), None)


def refused(turn: AssistantTurn, seq: MessageSequence, cache: SchemaCache | None = None) -> str:
    with pytest.raises(UpstreamProtocolError) as raised:
        check_tool_calls(turn, seq, cache or SchemaCache())
    assert raised.value.rule == "invalid_tool_call"
    assert raised.value.status == 502
    return raised.value.message


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ('{"city": "Paris"', "not one complete JSON object"),
        ('"Paris"', "not one complete JSON object"),
        ('{"city": 7}', "breaks its schema"),
        ("", "breaks its schema"),  # no arguments: the required city is missing
    ],
)
def test_bad_arguments_are_refused_with_the_reason(arguments: str, problem: str):
    seq = request_with(ToolDef(name="weather", parameters=WEATHER))
    message = refused(answer_calling("weather", arguments), seq)
    assert problem in message
    assert "'call_1' (weather)" in message


def test_valid_arguments_pass():
    seq = request_with(ToolDef(name="weather", parameters=WEATHER))
    check_tool_calls(answer_calling("weather", '{"city": "Paris"}'), seq, SchemaCache())


def test_empty_arguments_call_a_tool_that_takes_none():
    """OpenAI's `arguments: ""` for a tool with no required parameters (openai-python #3502)."""
    seq = request_with(ToolDef(name="clock", parameters={"type": "object", "properties": {}}))
    check_tool_calls(answer_calling("clock", ""), seq, SchemaCache())


def test_a_call_to_an_undeclared_tool_is_refused():
    seq = request_with(ToolDef(name="weather", parameters=WEATHER))
    assert "names 'rm_rf', a tool not declared" in refused(answer_calling("rm_rf", "{}"), seq)


def test_gemini_openapi_types_in_capitals_are_checked():
    schema = {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}, "required": ["city"]}
    seq = request_with(ToolDef(name="weather", parameters=schema))
    check_tool_calls(answer_calling("weather", '{"city": "Rome"}'), seq, SchemaCache())
    refused(answer_calling("weather", '{"city": ["Rome"]}'), seq)


def test_custom_tool_input_is_free_text():
    seq = request_with(ToolDef(name="grammar", tool_type="custom"))
    check_tool_calls(answer_calling("grammar", "not json at all", "custom"), seq, SchemaCache())


def test_each_schema_is_compiled_once_and_the_cache_is_bounded(monkeypatch: pytest.MonkeyPatch):
    compiled: list[Any] = []
    real = fastjsonschema.compile

    def counting(definition: Any, **kwargs: Any) -> Any:
        compiled.append(definition)
        return real(definition, **kwargs)

    monkeypatch.setattr(fastjsonschema, "compile", counting)
    cache = SchemaCache(size=2)
    tools = [ToolDef(name=f"t{i}", parameters={**WEATHER, "title": f"t{i}"}) for i in range(3)]
    two = request_with(*tools[:2])
    check_tool_calls(answer_calling("t0", '{"city": "x"}'), two, cache)
    first = len(compiled)
    for _ in range(3):
        check_tool_calls(answer_calling("t0", '{"city": "x"}'), two, cache)
    assert len(compiled) == first  # each schema compiled once, however many answers
    check_tool_calls(answer_calling("t2", '{"city": "x"}'), request_with(*tools), cache)
    assert len(compiled) > first
    assert len(cache._compiled) == 2  # the least recently used went


async def test_a_remote_ref_is_never_fetched(aiohttp_server: Any, caplog: pytest.LogCaptureFixture):
    hits: list[str] = []

    async def schema(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.json_response({"type": "object"})

    app = web.Application()
    app.router.add_get("/schema.json", schema)
    server: TestServer = await aiohttp_server(app)
    remote = {"$ref": f"http://127.0.0.1:{server.port}/schema.json"}
    seq = request_with(ToolDef(name="weather", parameters=remote))
    with caplog.at_level(logging.WARNING, logger="turngate.proxy"):
        check_tool_calls(answer_calling("weather", '{"city": 1}'), seq, SchemaCache())
    assert hits == []
    assert any("schema not checked" in r.getMessage() for r in caplog.records)
