"""OpenAI Responses tools beyond a flat list, through the openai SDK: functions grouped in
``namespace`` tools, tools a client-run tool search loaded, and programmatic tool calling
(``program`` items the provider runs, which call the client's functions). An answer calling
such a tool is checked against the tool's own schema and committed, and the items come back
in the next request unchanged.

The request and answers are the recorded ``get_capital`` exchange, with the tool moved
into a namespace (or loaded by a search) and the call naming it as the API then does."""

from __future__ import annotations

import copy
from typing import Any

import openai
import orjson
import pytest

from tests.fixtures_dir import FIXTURES_DIR, FIXTURES_PRESENT
from tests.proxy.conftest import StackFactory
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import openai_sdk

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")

RECORDED = FIXTURES_DIR / "openai-responses"
CONVERSATION = {"Turngate-Conversation-Id": "conv-namespaces"}


def recorded(name: str) -> dict[str, Any]:
    value: dict[str, Any] = orjson.loads((RECORDED / name).read_bytes())
    return value


def capital_tool() -> dict[str, Any]:
    (tool,) = recorded("pai-nonstream-function-call.request.json")["tools"]
    return {k: v for k, v in tool.items() if k != "description"}


def in_namespace(request: dict[str, Any]) -> dict[str, Any]:
    out = dict(request)
    members = [{k: v for k, v in t.items() if k != "description"} for t in request["tools"]]
    out["tools"] = [
        {"type": "namespace", "name": "geo", "description": "Geography", "tools": members}
    ]
    return out


def calling(answer: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """The recorded answer with its function call changed (``namespace``, ``arguments``...)."""
    out = copy.deepcopy(answer)
    for item in out["output"]:
        if item["type"] == "function_call":
            item.update(fields)
    return out


def namespaced_stream(**fields: Any) -> bytes:
    """The recorded stream, its function call naming the namespace in every event."""
    lines = []
    for line in (RECORDED / "pai-function-call-turn1.sse").read_bytes().split(b"\n"):
        if line.startswith(b"data: {"):
            event = orjson.loads(line[6:])
            item = event.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call":
                item.update(fields)
            for item in event.get("response", {}).get("output", []):
                if item.get("type") == "function_call":
                    item.update(fields)
            lines.append(b"data: " + orjson.dumps(event))
        else:
            lines.append(line)
    return b"\n".join(lines)


async def test_a_call_to_a_namespaced_function_is_checked_and_committed(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    request = in_namespace(recorded("pai-nonstream-function-call.request.json"))
    stack.upstream.reply(
        Reply.json(calling(recorded("pai-nonstream-function-call.json"), namespace="geo"))
    )
    async with openai_sdk(stack) as client:
        answer = await client.responses.create(**request)
    (call,) = answer.output
    assert (call.type, call.name, call.namespace) == ("function_call", "get_capital", "geo")  # type: ignore[union-attr]
    assert stack.upstream.received[0].json()["tools"] == request["tools"]


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        (
            {"namespace": "geo", "arguments": '{"country": 7}'},
            "(geo.get_capital) breaks its schema",
        ),
        (
            {"namespace": "geo", "name": "get_population"},
            "names 'geo.get_population', a tool not declared",
        ),
        ({"namespace": "crm"}, "names 'crm.get_capital', a tool not declared"),
        ({}, "names 'get_capital', a tool not declared"),
    ],
    ids=["schema", "not-a-member", "other-namespace", "no-namespace"],
)
async def test_a_bad_call_into_a_namespace_is_refused(
    make_stack: StackFactory, fields: dict[str, Any], problem: str
) -> None:
    stack = await make_stack()
    request = in_namespace(recorded("pai-nonstream-function-call.request.json"))
    stack.upstream.reply(
        Reply.json(calling(recorded("pai-nonstream-function-call.json"), **fields))
    )
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.APIStatusError) as raised:
            await client.responses.create(**request)
    assert raised.value.status_code == 502
    assert raised.value.response.headers["Turngate-Rejection"] == "invalid_tool_call"
    assert problem in raised.value.message


async def test_a_streamed_namespaced_call_is_delivered_and_a_bad_one_never_is(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    request = in_namespace(recorded("pai-function-call-turn1.request.json"))
    sse = "text/event-stream"
    stack.upstream.reply(Reply(body=namespaced_stream(namespace="geo"), content_type=sse))
    async with openai_sdk(stack) as client:
        async with client.responses.stream(
            **{k: v for k, v in request.items() if k != "stream"}
        ) as stream:
            final = await stream.get_final_response()
        (call,) = [item for item in final.output if item.type == "function_call"]
        assert (call.name, call.namespace, call.arguments) == (
            "get_capital",
            "geo",
            '{"country":"France"}',
        )  # type: ignore[union-attr]

        stack.upstream.reply(Reply(body=namespaced_stream(namespace="crm"), content_type=sse))
        with pytest.raises(openai.APIError, match="tool not declared"):
            async with client.responses.stream(
                **{k: v for k, v in request.items() if k != "stream"}
            ) as stream:
                await stream.get_final_response()


async def test_a_tool_the_clients_tool_search_loaded_may_be_called(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    request = recorded("pai-nonstream-function-call.request.json")
    search = {
        "type": "tool_search",
        "execution": "client",
        "description": "Find tools by topic",
        "parameters": {"type": "object", "properties": {"topic": {"type": "string"}}},
    }
    request["tools"] = [search]
    request["input"] = [
        *request["input"],
        {
            "type": "tool_search_call",
            "call_id": "ts_1",
            "execution": "client",
            "arguments": {"topic": "geography"},
            "status": "completed",
        },
        {
            "type": "tool_search_output",
            "call_id": "ts_1",
            "execution": "client",
            "status": "completed",
            "tools": [capital_tool()],
        },
    ]
    stack.upstream.reply(Reply.json(recorded("pai-nonstream-function-call.json")))
    async with openai_sdk(stack) as client:
        answer = await client.responses.create(**request)
        assert answer.output[0].name == "get_capital"  # type: ignore[union-attr]
        # Loaded by nothing: the same call is refused.
        request["input"] = request["input"][:1]
        with pytest.raises(openai.APIStatusError, match="names 'get_capital', a tool not declared"):
            await client.responses.create(**request)
    assert len(stack.upstream.received) == 2


PROGRAM = {
    "type": "program",
    "id": "prg_1",
    "call_id": "prog_1",
    "code": "const c = await tools.geo.get_capital({country: 'France'}); return c;",
    "fingerprint": "fp-opaque-1",
}


async def test_a_program_and_what_it_returned_come_back_as_the_committed_turn(
    make_stack: StackFactory,
) -> None:
    """Programmatic tool calling over three requests of one conversation: the program and
    its call, the client's result, the program's output and the tools it loaded; then a
    configuration update and the next question."""
    stack = await make_stack()
    request = in_namespace(recorded("pai-nonstream-function-call.request.json"))
    first = calling(
        recorded("pai-nonstream-function-call.json"),
        namespace="geo",
        caller={"type": "program", "caller_id": "prog_1"},
    )
    first["output"].insert(0, PROGRAM)
    stack.upstream.reply(Reply.json(first))
    async with openai_sdk(stack, **CONVERSATION) as client:
        answer = await client.responses.create(**request)
        assert [item.type for item in answer.output] == ["program", "function_call"]
        call = first["output"][1]

        history = [*request["input"], *first["output"]]
        history.append(
            {"type": "function_call_output", "call_id": call["call_id"], "output": "Paris"}
        )
        loaded = {
            "type": "additional_tools",
            "id": "at_1",
            "role": "developer",
            "tools": [capital_tool()],
        }
        done = {
            "type": "program_output",
            "id": "po_1",
            "call_id": "prog_1",
            "result": "Paris",
            "status": "completed",
        }
        second = recorded("pai-nonstream-after-function-output.json")
        second["output"] = [done, loaded, *second["output"]]
        stack.upstream.reply(Reply.json(second))
        await client.responses.create(**{**request, "input": history})

        # The whole history back, the provider's items as it wrote them: one more turn.
        # ... with the reasoning effort changed from here on (a developer's item).
        settings = {"type": "configuration_update", "reasoning": {"effort": "high"}}
        history = [*history, *second["output"], settings, {"role": "user", "content": "And Spain?"}]
        stack.upstream.reply(Reply.json(recorded("pai-nonstream-after-function-output.json")))
        await client.responses.create(**{**request, "input": history})
    assert [r.json()["input"] for r in stack.upstream.received][-1] == history
    assert len(stack.upstream.received) == 3
