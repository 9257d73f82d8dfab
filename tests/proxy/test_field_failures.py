"""The failures users reported against other gateways and SDKs (../shared/field-failures.md),
each replayed through turngate with the official SDK the report involved.

One test per report (two share one where a single stream shows both), named after it;
docs/field-failures.md maps each report to what turngate does and to its test. What every
test asserts is what the user would have seen: the SDK's exception and its rule code, the
calls the application got, and what the provider received (nothing, for a refusal).
"""

from __future__ import annotations

import base64
import copy
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest
from google.genai import errors as genai_errors
from google.genai import types as genai_types
from pydantic import BaseModel

from tests.adapters.anthropic_builders import png_bytes
from tests.fixtures_dir import FIXTURES_DIR, FIXTURES_PRESENT, load_json
from tests.proxy.conftest import StackFactory
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import (
    WEATHER,
    anthropic_sdk,
    claude_answer,
    genai_raw,
    genai_sdk,
    openai_sdk,
)
from tests.proxy.sdk_support import GENAI_AIOHTTP_WARNING, sdk_kwargs
from tests.proxy.stack import GEMINI_KEY, Stack
from turngate.proxy.upstream import UpstreamTimeouts

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")

CLAUDE = "claude-haiku-4-5-20251001"
TOOL = {"type": "function", "function": WEATHER}


def recorded(relative: str) -> dict[str, Any]:
    value = load_json(FIXTURES_DIR / relative)
    assert isinstance(value, dict)
    return value


def refused(stack: Stack, error: Exception, rule: str, *names: str) -> str:
    """The refusal's message, checked: it names ``rule`` and ``names``, and nothing was sent."""
    message = str(error)
    assert rule in message, message
    for name in names:
        assert name in message, message
    assert stack.upstream.received == [], "a refused request reached the provider"
    return message


def refused_after(stack: Stack, error: Exception, rule: str, *, sent: int) -> str:
    """The refusal's message, checked: it names ``rule``, and the provider received only the
    ``sent`` requests before it."""
    message = str(error)
    assert rule in message, message
    assert len(stack.upstream.received) == sent, "a refused request reached the provider"
    return message


def claude_call(call_id: str, city: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "get_weather", "input": {"city": city}}


def claude_result(call_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": "sunny"}


CLAUDE_TOOLS = [{"name": "get_weather", "input_schema": WEATHER["parameters"]}]
# The tool the recorded parallel stream (cc-parallel-2-tool-use-with-args.sse) calls.
RECORDED_TOOLS = [{"name": "weather", "input_schema": {"type": "object"}}]


def chat_call(call_id: str, arguments: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": arguments},
    }


def chat_answer(*calls: dict[str, Any]) -> Reply:
    """A non-streamed Chat answer that makes ``calls``."""
    message = {"role": "assistant", "content": None, "tool_calls": list(calls)}
    choice = {"index": 0, "finish_reason": "tool_calls", "message": message}
    answer = {"id": "chatcmpl-ff", "object": "chat.completion", "model": "gpt-4o"}
    return Reply.json({**answer, "choices": [choice]})


def call_opens(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """The Chat stream delta that opens call ``call_id`` with the first of its arguments."""
    function = {"name": name, "arguments": arguments}
    return {"tool_calls": [{"index": 0, "id": call_id, "type": "function", "function": function}]}


def chat_chunks(*deltas: dict[str, Any], finish: str | None = None, done: bool = True) -> Reply:
    """A Chat stream of ``deltas``, then ``finish`` and ``[DONE]`` when given."""
    envelope = {"id": "chatcmpl-ff", "object": "chat.completion.chunk", "model": "gpt-4o"}
    frames = [
        {**envelope, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    if finish is not None:
        frames.append({**envelope, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    body = b"".join(b"data: " + orjson.dumps(f) + b"\n\n" for f in frames)
    return Reply(
        body=body + (b"data: [DONE]\n\n" if done else b""), content_type="text/event-stream"
    )


async def chat_stream_reading(
    client: openai.AsyncOpenAI, **kwargs: Any
) -> tuple[list[Any], Exception | None]:
    """The tool-call deltas a streaming Chat client received, and the error it ended with."""
    calls: list[Any] = []
    try:
        stream = await client.chat.completions.create(stream=True, **kwargs)
        async for chunk in stream:
            for choice in chunk.choices:
                calls += choice.delta.tool_calls or []
    except openai.OpenAIError as exc:
        return calls, exc
    return calls, None


async def claude_stream_reading(
    client: anthropic.AsyncAnthropic, **kwargs: Any
) -> tuple[list[str], Exception | None]:
    """The kinds of the blocks a streaming Anthropic client saw start, and its error."""
    seen: list[str] = []
    try:
        async with client.messages.stream(**kwargs) as events:
            async for event in events:
                if event.type == "content_block_start":
                    seen.append(event.content_block.type)
    except anthropic.AnthropicError as exc:
        return seen, exc
    return seen, None


def client_create_of() -> Any:
    """``messages.create``, whose signature names what ``messages.stream`` takes."""
    return anthropic.AsyncAnthropic(api_key="k").messages.create


# 1 -----------------------------------------------------------------------------------------


async def test_litellm_25669_tool_results_are_never_stripped(make_stack: StackFactory):
    """LiteLLM #25669: an orphan check that missed Anthropic `tool_use` blocks stripped every
    `tool_result`, and the model ran the same tools forever. turngate repairs nothing: a
    valid history goes up as sent; a result with no call is refused, not dropped."""
    stack = await make_stack()
    request = recorded("anthropic/pai-nonstream-after-4-tool-results.request.json")
    stack.upstream.reply(Reply.fixture("anthropic/pai-nonstream-after-4-tool-results.json"))
    async with anthropic_sdk(stack) as client:
        await client.messages.create(**sdk_kwargs(client.messages.create, request))
        (received,) = stack.upstream.received
        assert received.json()["messages"] == request["messages"]
        results = [b for b in request["messages"][-1]["content"] if b["type"] == "tool_result"]
        assert len(results) == 4

        stack.upstream.received.clear()
        orphaned = copy.deepcopy(request)
        del orphaned["messages"][-2]  # the assistant turn holding the calls
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(**sdk_kwargs(client.messages.create, orphaned))
    refused(stack, caught.value, "orphan_result", results[0]["tool_use_id"])


# 2 and 3 -----------------------------------------------------------------------------------


def _cut_inside_first_arguments(stream: bytes) -> int:
    """The byte offset halfway through the stream's first `input_json_delta`."""
    at = stream.index(b'"input_json_delta"')
    return at + (stream.index(b"\n\n", at) - at) // 2


async def test_litellm_31067_a_broken_stream_is_never_continued_as_prose(make_stack: StackFactory):
    """LiteLLM #31067: after a mid-stream failure the gateway appended a continuation prompt
    and a prefill; the fallback wrote prose instead of tool calls and `tool_calls=[]` looked
    like success. turngate sends nothing more upstream: the client gets the API's error, and
    no call of the broken turn (its arguments were cut)."""
    stack = await make_stack()
    stream = (FIXTURES_DIR / "anthropic/cc-parallel-2-tool-use-with-args.sse").read_bytes()
    stack.upstream.reply(
        Reply(
            body=stream,
            content_type="text/event-stream",
            drop_after=_cut_inside_first_arguments(stream),
        )
    )
    async with anthropic_sdk(stack) as client:
        seen, error = await claude_stream_reading(
            client,
            model=CLAUDE,
            max_tokens=256,
            tools=RECORDED_TOOLS,
            messages=[{"role": "user", "content": "Weather in Paris and Rome?"}],
        )
    assert "tool_use" not in seen, "a call whose arguments were cut reached the client"
    assert isinstance(error, anthropic.APIStatusError), error
    assert "the provider's connection broke" in str(error)
    assert len(stack.upstream.received) == 1, "turngate sent a continuation"


async def test_litellm_27967_a_timeout_is_reported_as_a_timeout(make_stack: StackFactory):
    """LiteLLM #27967: the hardcoded continuation prefill was refused by newer Claude models, so
    users saw a prefill 400 instead of the timeout that happened. Through turngate the
    client's error is the timeout, and the provider got one request, with no prefill."""
    stack = await make_stack(timeouts=UpstreamTimeouts(connect=2.0, read=0.3))
    stack.upstream.reply(Reply.fixture("anthropic/lla-text-only.sse", pace=1.0))
    request = recorded("anthropic/lla-text-only.request.json")
    kwargs = sdk_kwargs(client_create_of(), {k: v for k, v in request.items() if k != "stream"})
    async with anthropic_sdk(stack) as client:
        _, error = await claude_stream_reading(client, **kwargs)
    assert isinstance(error, anthropic.APIStatusError), error
    message = str(error)
    assert "the provider sent nothing for 0.3 s (--upstream-read-timeout)" in message, message
    assert "prefill" not in message
    (received,) = stack.upstream.received
    assert received.json()["messages"] == request["messages"]


# 4 -----------------------------------------------------------------------------------------


async def test_litellm_40582_concatenated_arguments_fail_loudly(make_stack: StackFactory):
    """LiteLLM #40582: arguments made of several JSON objects failed to parse, the call was
    dropped silently and the model retried the same shape 22 times. turngate refuses such a
    call in a history (400, nothing sent) and never delivers it in an answer (502)."""
    stack = await make_stack()
    twice = '{"city": "Paris"}{"city": "Rome"}'
    history = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [chat_call("call_1", twice)]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="gpt-4o", messages=history, tools=[TOOL])
        refused(stack, caught.value, "incomplete_arguments", "call_1")

        stack.upstream.reply(chat_answer(chat_call("call_2", twice)))
        with pytest.raises(openai.APIStatusError) as answered:
            await client.chat.completions.create(model="gpt-4o", messages=history[:1], tools=[TOOL])
    assert answered.value.status_code == 502
    assert "call_2" in str(answered.value)


# 5 -----------------------------------------------------------------------------------------


@GENAI_AIOHTTP_WARNING
async def test_litellm_22578_gemini_parallel_calls_keep_every_call(make_stack: StackFactory):
    """LiteLLM #22578: merging Gemini's parallel calls kept only the last turn's calls, and the
    provider answered "Missing corresponding tool call for tool response message". turngate
    sends the parallel calls and their responses as they are; a response left without its
    call is refused before sending."""
    stack = await make_stack()
    request = recorded("gemini/pai-nonstream-after-3-function-responses.request.json")
    stack.upstream.reply(Reply.fixture("gemini/pai-nonstream-after-3-function-responses.json"))
    client = genai_sdk(stack)
    models = client.aio.models
    calls = [
        part
        for content in request["contents"]
        for part in content["parts"]
        if "functionCall" in part
    ]
    assert len(calls) == 3
    await models.generate_content(
        model="gemini-3-flash-preview",
        contents=request["contents"],
        config={"tools": request["tools"]},
    )
    (received,) = stack.upstream.received
    assert received.json()["contents"] == request["contents"]

    stack.upstream.received.clear()
    # What the merge did: the model turn keeps only its last call, every response stays.
    merged = copy.deepcopy(request["contents"])
    for content in merged:
        made = [p for p in content["parts"] if "functionCall" in p]
        if made:
            content["parts"] = made[-1:]
    with pytest.raises(genai_errors.ClientError) as caught:
        await models.generate_content(
            model="gemini-3-flash-preview", contents=merged, config={"tools": request["tools"]}
        )
    await client.aio.aclose()
    assert caught.value.code == 400
    refused(stack, caught.value, "orphan_result")


# 6 and 11 ----------------------------------------------------------------------------------


def _partial_inputs(stream: bytes) -> dict[int, str]:
    """Each block's `partial_json` pieces joined, by index, read from the recorded stream."""
    joined: dict[int, str] = {}
    for frame in stream.split(b"\n\n"):
        for line in frame.split(b"\n"):
            if line.startswith(b"data: ") and b"input_json_delta" in line:
                event = orjson.loads(line[6:])
                joined[event["index"]] = (
                    joined.get(event["index"], "") + event["delta"]["partial_json"]
                )
    return joined


async def test_envoy_1465_and_portkey_1275_streamed_calls_arrive_whole_and_each_its_own(
    make_stack: StackFactory,
):
    """Envoy AI Gateway #1465: a streamed Claude call opens with `"input":{}`, and appending the
    `partial_json` to it gave `{}{"location":…}`. Portkey #1275: one counter for several
    streamed calls mis-indexed them. Through turngate each call's input is its own pieces,
    whole, under its own id."""
    stack = await make_stack()
    path = FIXTURES_DIR / "anthropic/cc-parallel-2-tool-use-with-args.sse"
    stack.upstream.reply(Reply.fixture("anthropic/cc-parallel-2-tool-use-with-args.sse"))
    expected = _partial_inputs(path.read_bytes())
    assert len(expected) == 2
    async with (
        anthropic_sdk(stack) as client,
        client.messages.stream(
            model=CLAUDE,
            max_tokens=256,
            tools=RECORDED_TOOLS,
            messages=[{"role": "user", "content": "Weather in two cities?"}],
        ) as events,
    ):
        final = await events.get_final_message()
    calls = {i: b for i, b in enumerate(final.content) if b.type == "tool_use"}
    assert {i: orjson.loads(expected[i]) for i in expected} == {
        i: c.input for i, c in calls.items()
    }
    assert len({c.id for c in calls.values()}) == 2


# 7 -----------------------------------------------------------------------------------------


async def test_envoy_2467_nothing_turngate_does_not_know_is_dropped(make_stack: StackFactory):
    """Envoy AI Gateway PR #2467: unsupported Anthropic tool types were silently dropped, and
    requests failed in confusing ways. turngate relays a tool definition it has never seen
    as it came, and refuses (never drops) a content block it does not know."""
    stack = await make_stack()
    stack.upstream.reply(claude_answer("done"))
    future_tool = {"type": "teleport_20991231", "name": "teleport", "max_uses": 1}
    messages = [{"role": "user", "content": "Go."}]
    async with anthropic_sdk(stack) as client:
        await client.messages.create(
            model=CLAUDE,
            max_tokens=64,
            messages=messages,
            tools=[*CLAUDE_TOOLS, future_tool],
        )
        (received,) = stack.upstream.received
        assert received.json()["tools"] == [*CLAUDE_TOOLS, future_tool]

        stack.upstream.received.clear()
        unknown = [{"role": "user", "content": [{"type": "hologram", "frames": 3}]}]
        with pytest.raises(anthropic.APIStatusError) as caught:
            await client.messages.create(model=CLAUDE, max_tokens=64, messages=unknown)
    assert caught.value.status_code in (400, 409)
    refused(stack, caught.value, "unknown_kind", "hologram")


# 8 -----------------------------------------------------------------------------------------


async def test_bifrost_1164_parallel_results_lead_the_next_user_turn(make_stack: StackFactory):
    """Bifrost #1164: parallel tool results were not grouped into one user turn, and the
    provider answered "Expected toolResult blocks at messages.2.content…". Anthropic merges
    consecutive user messages into one turn, so results split over two of them are valid
    and turngate sends them as they are (no regrouping of its own); a text between them
    would come first in the merged turn, and that history is refused before sending, naming
    the result it displaces."""
    stack = await make_stack()
    stack.upstream.reply(claude_answer("both sunny"))
    calls = [claude_call("toolu_a", "Paris"), claude_call("toolu_b", "Rome")]
    split = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": calls},
        {"role": "user", "content": [claude_result("toolu_a")]},
        {"role": "user", "content": [claude_result("toolu_b")]},
    ]
    async with anthropic_sdk(stack) as client:
        await client.messages.create(
            model=CLAUDE, max_tokens=64, messages=split, tools=CLAUDE_TOOLS
        )
        (received,) = stack.upstream.received
        assert received.json()["messages"] == split

        stack.upstream.received.clear()
        between = [*split[:3], {"role": "user", "content": "and Rome?"}, split[3]]
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                model=CLAUDE, max_tokens=64, messages=between, tools=CLAUDE_TOOLS
            )
    refused(stack, caught.value, "misplaced_result", "toolu_b")


# 9, and earendil-works/pi #5964 ------------------------------------------------------------


async def test_bifrost_3475_cut_arguments_never_reach_the_application(make_stack: StackFactory):
    """Bifrost #3475: a stream dropped the trailing `}` of a call's arguments (earendil-works/pi
    #5964: a partial-JSON parser then made a plausible object of the prefix). Through
    turngate a call whose arguments do not complete is never delivered: the stream ends
    with the API's error instead."""
    stack = await make_stack()
    stack.upstream.reply(
        chat_chunks(
            {"role": "assistant", "content": None},
            call_opens("call_cut", "get_weather", '{"city": "Par'),
            {"tool_calls": [{"index": 0, "function": {"arguments": 'is"'}}]},
            finish="tool_calls",
        )
    )
    async with openai_sdk(stack) as client:
        calls, error = await chat_stream_reading(
            client, model="gpt-4o", tools=[TOOL], messages=[{"role": "user", "content": "Paris?"}]
        )
    assert calls == [], "a call with cut arguments reached the application"
    assert isinstance(error, openai.APIError), error
    assert "call_cut" in str(error)


# 10 ----------------------------------------------------------------------------------------


def responses_stream(items: list[dict[str, Any]]) -> Reply:
    """A Responses stream whose output is ``items``, each added and done whole, then completed."""
    response = {
        "id": "resp_ff",
        "object": "response",
        "created_at": 1,
        "model": "gpt-5",
        "status": "in_progress",
        "output": [],
    }
    events: list[dict[str, Any]] = [{"type": "response.created", "response": response}]
    for index, item in enumerate(items):
        events.append(
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**item, "status": "in_progress"},
            }
        )
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append(
        {
            "type": "response.completed",
            "response": {**response, "status": "completed", "output": items},
        }
    )
    body = b"".join(
        b"event: "
        + e["type"].encode()
        + b"\ndata: "
        + orjson.dumps({**e, "sequence_number": n})
        + b"\n\n"
        for n, e in enumerate(events)
    )
    return Reply(body=body, content_type="text/event-stream")


async def test_bifrost_4713_tool_search_items_and_the_completion_are_relayed(
    make_stack: StackFactory,
):
    """Bifrost #4713: Responses streaming dropped `tool_search_call` items and the
    `response.completed` after them; strict clients (Codex CLI) saw a stream with no end.
    Through turngate the SDK's stream helper gets both and its final response."""
    stack = await make_stack()
    search = {
        "type": "tool_search_call",
        "id": "ts_ff",
        "call_id": "call_ts",
        "execution": "server",
        "arguments": {"query": "weather"},
        "status": "completed",
    }
    message = {
        "type": "message",
        "id": "msg_ff",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Found it.", "annotations": []}],
    }
    stack.upstream.reply(responses_stream([search, message]))
    async with (
        openai_sdk(stack) as client,
        client.responses.stream(model="gpt-5", input="Find a weather tool.") as events,
    ):
        kinds = [event.type async for event in events]
        final = await events.get_final_response()
    assert "response.completed" in kinds
    assert [item.type for item in final.output] == ["tool_search_call", "message"]


# 12 ----------------------------------------------------------------------------------------


async def test_pydantic_ai_4728_a_dangling_call_is_named_before_anything_is_sent(
    make_stack: StackFactory,
):
    """pydantic-ai #4728: after a streaming timeout a dangling tool call "poisoned" the history
    and every later run got a provider 400 until someone edited it by hand. turngate refuses
    the history before sending, naming the unanswered call (what the user must fix)."""
    stack = await make_stack()
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [chat_call("call_dangling", '{"city": "Paris"}')],
        },
        {"role": "user", "content": "Never mind, what about Rome?"},
    ]
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="gpt-4o", messages=messages, tools=[TOOL])
    refused(stack, caught.value, "missing_result", "call_dangling")


# 13 ----------------------------------------------------------------------------------------


async def test_pydantic_ai_6401_a_server_call_without_its_result_is_refused(
    make_stack: StackFactory,
):
    """pydantic-ai #6401: a hallucinated native `code_execution` call was replayed without its
    result and Anthropic answered 400. turngate refuses it before sending, naming the call."""
    stack = await make_stack()
    call = {
        "type": "server_tool_use",
        "id": "srvtoolu_ff1",
        "name": "code_execution",
        "input": {"code": "print(1)"},
    }
    messages = [
        {"role": "user", "content": "Compute."},
        {"role": "assistant", "content": [call, {"type": "text", "text": "Done."}]},
        {"role": "user", "content": "Thanks. Again?"},
    ]
    async with anthropic_sdk(stack) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(model=CLAUDE, max_tokens=64, messages=messages)
    refused(stack, caught.value, "anthropic_server_tool_result", "srvtoolu_ff1")


async def test_trae_bedrock_a_failed_tools_empty_result_is_refused_by_its_call(
    make_stack: StackFactory,
):
    """A failed tool answered with an empty result (TRAE on Claude Sonnet 4.5, 56 runs; a
    Claude Agent SDK session whose tool was denied by a permission timeout): Anthropic
    refused the turn and every later one ("messages.14.content.0.tool_result: content
    cannot be empty if `is_error` is true"), and the session was lost. turngate refuses it
    before sending, naming the call; once the result says what failed, it goes up."""
    stack = await make_stack()

    def turn(result: Any) -> list[Any]:
        call = {"type": "tool_use", "id": "toolu_01Bash", "name": "bash", "input": {"cmd": "ls"}}
        return [
            {"role": "user", "content": "List the files."},
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [result]},
        ]

    failed = {"type": "tool_result", "tool_use_id": "toolu_01Bash", "is_error": True}
    tools: Any = [{"name": "bash", "input_schema": {"type": "object"}}]
    async with anthropic_sdk(stack) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                model=CLAUDE, max_tokens=64, tools=tools, messages=turn({**failed, "content": ""})
            )
        message = refused(stack, caught.value, "anthropic_empty_content", "toolu_01Bash")
        assert "content cannot be empty if `is_error` is true" in message
        stack.upstream.reply(claude_answer("The directory is empty; the tool could not run."))
        said = {**failed, "content": "permission denied: the user did not answer in time"}
        await client.messages.create(model=CLAUDE, max_tokens=64, tools=tools, messages=turn(said))
    assert len(stack.upstream.received) == 1


async def test_an_openai_tool_sent_to_claude_is_refused_by_its_index(make_stack: StackFactory):
    """An OpenAI client pointed at Anthropic's Messages endpoint (a guardrail that wrote the
    tools back in OpenAI's form; 40 refusals in eight hours at one gateway): Anthropic
    refused every request ("tools.0: Input tag 'function' found using 'type' does not match
    any of the expected tags", and the same for an OpenAI tool_choice; its string "auto":
    "tool_choice: Input should be a valid dictionary or object to extract fields from").
    turngate refuses it before sending, naming the entry; the tool written Anthropic's way
    goes up."""
    stack = await make_stack()
    schema = WEATHER["parameters"]
    openai_tool: Any = [
        {"type": "function", "function": {"name": "get_weather", "parameters": schema}}
    ]
    choice: Any = {"type": "function", "function": {"name": "get_weather"}}
    ask: Any = [{"role": "user", "content": "Weather in Paris?"}]
    async with anthropic_sdk(stack) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                model=CLAUDE, max_tokens=64, messages=ask, tools=openai_tool, tool_choice=choice
            )
        message = refused(stack, caught.value, "anthropic_tool_shape", "tools.0")
        assert "Input tag 'function' found using 'type'" in message
        assert "(+1 more: anthropic_tool_shape)" in message
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                model=CLAUDE,
                max_tokens=64,
                messages=ask,
                tools=CLAUDE_TOOLS,  # type: ignore[arg-type]
                tool_choice="auto",  # type: ignore[arg-type]
            )
        message = refused(stack, caught.value, "anthropic_tool_shape", "tool_choice")
        assert "Input should be a valid dictionary" in message
        assert '(send {"type": "auto"})' in message
        stack.upstream.reply(claude_answer("Sunny, 18C."))
        await client.messages.create(
            model=CLAUDE,
            max_tokens=64,
            messages=ask,
            tools=CLAUDE_TOOLS,  # type: ignore[arg-type]
            tool_choice={"type": "tool", "name": "get_weather"},
        )
    assert len(stack.upstream.received) == 1


# 14 ----------------------------------------------------------------------------------------


async def test_openai_agents_1061_a_chained_request_must_answer_the_calls(make_stack: StackFactory):
    """openai-agents-python #1061: runs chained with `previous_response_id` failed now and then
    with "No tool output found for function call…": the output was never posted. turngate
    remembers the calls of the response it relayed and refuses the chained request that
    leaves one unanswered, before sending, naming it."""
    stack = await make_stack()
    answer = recorded("openai-responses/pai-nonstream-function-call.json")
    request = recorded("openai-responses/pai-nonstream-function-call.request.json")
    stack.upstream.reply(Reply.json(answer))
    async with openai_sdk(stack) as client:
        first = await client.responses.create(**sdk_kwargs(client.responses.create, request))
        (call,) = [item for item in first.output if item.type == "function_call"]
        stack.upstream.received.clear()
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(
                model=request["model"],
                previous_response_id=first.id,
                tools=request["tools"],
                input=[{"role": "user", "content": "And then?"}],
            )
    refused(stack, caught.value, "missing_result", call.call_id)


async def test_openai_codex_42088_an_output_named_by_its_tool_goes_up(make_stack: StackFactory):
    """openai/codex #42088: Codex's app seeds a delegated thread with the `create_thread`
    output alone: no `call_id`, no call, named by its tool. OpenAI takes it (it refuses only
    "A function call output without a call_id requires a name."); stricter servers do not.
    Through turngate it goes up as it came; one with neither call_id nor name is refused
    before anything is sent, in OpenAI's words."""
    stack = await make_stack()
    delegated: Any = {
        "type": "function_call_output",
        "id": "fco_0a1b2c",
        "name": "create_thread",
        "namespace": "codex_app",
        "output": "<codex_delegation>Fix the failing build.</codex_delegation>",
        "internal_chat_message_metadata_passthrough": {},
    }
    answer = recorded("openai-responses/pai-nonstream-after-function-output.json")
    stack.upstream.reply(Reply.json(answer))
    async with openai_sdk(stack) as client:
        await client.responses.create(model="gpt-5", input=[delegated])
        (received,) = stack.upstream.received
        assert received.json()["input"] == [delegated]

        stack.upstream.received.clear()
        nameless: Any = {"type": "function_call_output", "output": "done"}
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(model="gpt-5", input=[nameless])
    message = refused(stack, caught.value, "unknown_kind", "input[0]")
    assert "A function call output without a call_id requires a name." in message


# 15 ----------------------------------------------------------------------------------------


async def test_vercel_4290_one_id_for_two_calls_is_refused_both_ways(make_stack: StackFactory):
    """vercel/ai #4290 / #4936: after an interrupted call "ToolInvocation must have a result",
    and Azure reused one tool-call id for several calls so results went to the wrong call.
    turngate refuses a history with two calls under one id (400) and never delivers such an
    answer (502)."""
    stack = await make_stack()
    twin = [chat_call("call_same", '{"city": "Paris"}'), chat_call("call_same", '{"city": "Rome"}')]
    history = [
        {"role": "user", "content": "Paris and Rome?"},
        {"role": "assistant", "content": None, "tool_calls": twin},
        {"role": "tool", "tool_call_id": "call_same", "content": "sunny"},
    ]
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="gpt-4o", messages=history, tools=[TOOL])
        refused(stack, caught.value, "duplicate_call_id", "call_same")

        stack.upstream.reply(chat_answer(*twin))
        with pytest.raises(openai.APIStatusError) as answered:
            await client.chat.completions.create(model="gpt-4o", messages=history[:1], tools=[TOOL])
    assert answered.value.status_code == 502
    assert "duplicate_call_id" in str(answered.value)


async def test_agno_5382_a_responses_call_id_carried_into_chat_goes_up(make_stack: StackFactory):
    """agno #5382, vercel/ai #5171: an agent replayed a Responses `fc_` id of 53 characters
    into Chat Completions. OpenAI's limit on a call id was 40 then and is 64 now ("Expected a
    string with maximum length 64, but got a string with length 86", 9router PR #3167): the
    53-character id goes up as sent, and one of 65 is refused before anything is sent."""
    stack = await make_stack()
    fc_id = "fc_0f0e50a1476a6c35006912c58dc9f8819192c25864eb16f07f"

    def history(call_id: str) -> list[dict[str, Any]]:
        return [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [chat_call(call_id, "{}")]},
            {"role": "tool", "tool_call_id": call_id, "content": "sunny"},
        ]

    async with openai_sdk(stack) as client:
        too_long = "call_" + "x" * 60
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="gpt-4o", messages=history(too_long), tools=[TOOL]
            )
        refused(stack, caught.value, "invalid_call_id", too_long)
        assert "longer than 64 characters" in str(caught.value)

        stack.upstream.reply(Reply.fixture("openai-chat/pai-nonstream-after-2-tool-results.json"))
        await client.chat.completions.create(model="gpt-4o", messages=history(fc_id), tools=[TOOL])
    (received,) = stack.upstream.received
    assert received.json()["messages"] == history(fc_id)


async def test_anthropic_sdk_typescript_622_a_conversation_opening_with_the_assistant_goes_up(
    make_stack: StackFactory,
):
    """anthropic-sdk-typescript #622: Anthropic answers a conversation whose first message is
    the assistant's (a seeded greeting; a history trimmed to fit the window), where only
    Bedrock still refused it. turngate sends it as it came; an empty conversation is still
    refused before anything is sent."""
    stack = await make_stack()
    messages = [
        {"role": "assistant", "content": "Ahoy! I am a pirate bot. How may I help ye?"},
        {"role": "user", "content": "What colour is the sky? One word."},
    ]
    stack.upstream.reply(claude_answer("Blue"))
    async with anthropic_sdk(stack) as client:
        answer = await client.messages.create(model=CLAUDE, max_tokens=16, messages=messages)
        assert answer.content[0].text == "Blue"
        (received,) = stack.upstream.received
        assert received.json()["messages"] == messages

        stack.upstream.received.clear()
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(model=CLAUDE, max_tokens=16, messages=[])
        refused(stack, caught.value, "anthropic_first_message_user")
        assert "the request has no messages" in str(caught.value)


# Also seen outside gateways ----------------------------------------------------------------


async def test_hermes_agent_81017_a_stream_cut_after_the_tool_name_runs_nothing(
    make_stack: StackFactory,
):
    """hermes-agent PR #81017: a stream died after the tool *name*, and the agent ran
    `write_file` with `{}`. Through turngate the application gets no call at all."""
    stack = await make_stack()
    reply = chat_chunks(
        {"role": "assistant", "content": None},
        call_opens("call_write", "write_file", ""),
        done=False,
    )
    stack.upstream.reply(
        Reply(body=reply.body, content_type=reply.content_type, drop_after=len(reply.body))
    )
    write_file = {
        "type": "function",
        "function": {"name": "write_file", "parameters": {"type": "object"}},
    }
    async with openai_sdk(stack) as client:
        calls, error = await chat_stream_reading(
            client,
            model="gpt-4o",
            tools=[write_file],
            messages=[{"role": "user", "content": "Save it."}],
        )
    assert calls == [], "the application got a call whose arguments never came"
    assert error is not None


async def test_openai_python_3502_a_call_with_no_arguments_reaches_the_application(
    make_stack: StackFactory,
):
    """openai-python PR #3502 (and simonw/llm PR #1170): OpenAI answers a call to a tool that
    takes no arguments with `arguments: ""`. turngate delivers it as sent, whole and streamed,
    and the history that replays it goes up; a stream cut before the provider closed the
    call still delivers nothing (hermes-agent PR #81017, above)."""
    stack = await make_stack()
    clock: Any = {
        "type": "function",
        "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
    }
    ask = [{"role": "user", "content": "What time is it?"}]
    now = {"id": "call_now", "type": "function", "function": {"name": "get_time", "arguments": ""}}
    stack.upstream.reply(chat_answer(now))
    async with openai_sdk(stack) as client:
        answer = await client.chat.completions.create(model="gpt-4o", messages=ask, tools=[clock])
        (whole,) = answer.choices[0].message.tool_calls or []
        assert (whole.id, whole.function.arguments) == ("call_now", "")  # type: ignore[union-attr]
        stack.upstream.reply(
            chat_chunks(
                {"role": "assistant", "content": None},
                call_opens("call_later", "get_time", ""),
                finish="tool_calls",
            )
        )
        streamed, error = await chat_stream_reading(
            client, model="gpt-4o", messages=ask, tools=[clock]
        )
        assert error is None
        assert [c.id for c in streamed] == ["call_later"]

        stack.upstream.received.clear()
        stack.upstream.reply(Reply.fixture("openai-chat/pai-nonstream-after-2-tool-results.json"))
        history = [
            *ask,
            {"role": "assistant", "content": None, "tool_calls": [now]},
            {"role": "tool", "tool_call_id": "call_now", "content": "09:30"},
        ]
        await client.chat.completions.create(model="gpt-4o", messages=history, tools=[clock])
    (received,) = stack.upstream.received
    assert received.json()["messages"] == history


@GENAI_AIOHTTP_WARNING
async def test_gemini_cli_3814_calls_and_responses_that_no_longer_match_are_named(
    make_stack: StackFactory,
):
    """gemini-cli #3814 / #16984: after context compression the function calls and responses
    no longer matched, with no recovery. turngate refuses such a history before sending and
    names the call left without its response."""
    stack = await make_stack()
    contents = [
        {"role": "user", "parts": [{"text": "Weather in Paris and Rome?"}]},
        {
            "role": "model",
            "parts": [
                {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
                {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}},
            ],
        },
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": "get_weather", "response": {"r": "sunny"}}}],
        },
        {"role": "user", "parts": [{"text": "And tomorrow?"}]},
    ]
    tools = [{"functionDeclarations": [WEATHER]}]
    client = genai_sdk(stack)
    with pytest.raises(genai_errors.ClientError) as caught:
        await client.aio.models.generate_content(
            model="gemini-2.5-flash", contents=contents, config={"tools": tools}
        )
    await client.aio.aclose()
    assert caught.value.code == 400
    refused(stack, caught.value, "missing_result", "get_weather")


async def test_claude_code_1237_tool_use_without_its_result_is_refused_by_name(
    make_stack: StackFactory,
):
    """anthropics/claude-code #1237 (and dozens of duplicates): "tool_use ids were found without
    tool_result blocks immediately after". turngate refuses it before sending, naming the id
    and the rule, instead of the provider's 400 after a round trip."""
    stack = await make_stack()
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [claude_call("toolu_lost", "Paris")]},
        {"role": "user", "content": "Hello?"},
    ]
    async with anthropic_sdk(stack) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                model=CLAUDE, max_tokens=64, messages=messages, tools=CLAUDE_TOOLS
            )
    refused(stack, caught.value, "missing_result", "toolu_lost")


# Found while replaying the above: failures as common, from the same trackers ---------------


async def test_home_assistant_175637_whitespace_text_is_refused_by_name(make_stack: StackFactory):
    """home-assistant/core #175637 (and claude-code #23440, LibreChat agents PR #124): a
    history with a message of whitespace text alone (a blank voice turn) got "text content
    blocks must contain non-whitespace text" from Anthropic on every later turn. turngate
    refuses it before sending, with Anthropic's words and the message."""
    stack = await make_stack()
    messages = [
        {"role": "user", "content": "Turn on the lights."},
        {"role": "assistant", "content": [{"type": "text", "text": "\n"}]},
        {"role": "user", "content": "Thanks."},
    ]
    async with anthropic_sdk(stack) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(model=CLAUDE, max_tokens=64, messages=messages)
    message = refused(stack, caught.value, "anthropic_empty_content", "messages[1]")
    assert "must contain non-whitespace text" in message


@GENAI_AIOHTTP_WARNING
async def test_langgraph_3939_a_content_without_parts_is_refused_by_name(
    make_stack: StackFactory,
):
    """langchain-ai/langgraph #3939 (and vercel/ai #3775, livekit/agents PR #1397): a model
    turn that kept nothing (its only text empty, dropped on the way) became a content with no
    parts, and Gemini answered every later request with "contents.parts must not be empty".
    turngate refuses it before sending, with Gemini's words and the content's place."""
    stack = await make_stack()
    contents = [
        {"role": "user", "parts": [{"text": "Hello"}]},
        {"role": "model", "parts": []},
        {"role": "user", "parts": [{"text": "Are you there?"}]},
    ]
    client = genai_sdk(stack)
    with pytest.raises(genai_errors.ClientError) as caught:
        await client.aio.models.generate_content(model="gemini-2.5-flash", contents=contents)
    await client.aio.aclose()
    assert caught.value.code == 400
    message = refused(stack, caught.value, "gemini_empty_parts", "contents[1]")
    assert "model content has no parts" in message
    assert "contents.parts must not be empty" in message


@GENAI_AIOHTTP_WARNING
async def test_inspect_ai_2377_a_function_response_under_role_function_is_refused_with_the_fix(
    make_stack: StackFactory,
):
    """UKGovernmentBEIS/inspect_ai #2377 (and sashiko PR #500, genkit-dart PR #340,
    dart_agent_core #34): tool output sent back under OpenAI's convention, a content with role
    'function' or 'tool', which Gemini refuses ("Role 'function' is not supported"). turngate
    refuses it before sending, naming the content and the fix: a user content."""
    stack = await make_stack()
    call = genai_types.FunctionCall(id="call_1", name="get_weather", args={"city": "Paris"})
    answer = genai_types.FunctionResponse(id="call_1", name="get_weather", response={"t": 18})
    contents = [
        genai_types.Content(role="user", parts=[genai_types.Part(text="Weather in Paris?")]),
        genai_types.Content(role="model", parts=[genai_types.Part(function_call=call)]),
        genai_types.Content(role="function", parts=[genai_types.Part(function_response=answer)]),
    ]
    client = genai_sdk(stack)
    with pytest.raises(genai_errors.ClientError) as caught:
        await client.aio.models.generate_content(model="gemini-2.5-flash", contents=contents)
    await client.aio.aclose()
    assert caught.value.code == 400
    refused(stack, caught.value, "unknown_kind", "contents[2]", "role:function")
    message = caught.value.message or ""
    assert "Role 'function' is not supported" in message
    assert "functionResponse parts in a content with role user" in message


@GENAI_AIOHTTP_WARNING
async def test_hermes_agent_57940_a_request_with_no_contents_is_refused_by_name(
    make_stack: StackFactory,
):
    """NousResearch/hermes-agent #57940 (PR #57942): a turn built only from system prompts, or
    whose one event lost its media, became ``{"contents": []}``; Gemini answered "contents is
    not specified", which reached the user as an opaque "model provider failed after retries".
    turngate refuses it before sending, with Gemini's words. (The Python SDK refuses empty
    contents itself; hermes builds its own bodies, as REST clients do: the body goes in raw.)"""
    stack = await make_stack()
    client = genai_sdk(stack)
    config = genai_types.GenerateContentConfig(
        system_instruction="Review the last turn.",
        http_options=genai_types.HttpOptions(extra_body={"contents": []}),
    )
    with pytest.raises(genai_errors.ClientError) as caught:
        await client.aio.models.generate_content(
            model="gemini-2.5-flash", contents="placeholder", config=config
        )
    await client.aio.aclose()
    assert caught.value.code == 400
    message = refused(stack, caught.value, "gemini_empty_contents")
    assert "the request has no contents" in message
    assert "contents is not specified" in message


async def test_home_assistant_147760_an_mcp_tool_name_anthropic_refuses_is_refused_by_name(
    make_stack: StackFactory,
):
    """home-assistant/core #147760 (and netclaw #1133, atlas-mcp-server #14, claude-code
    #96152): MCP tools declared as 'caldav-mcp.create-event' or 'todoist/find-tasks' got
    "tools.N.custom.name: String should match pattern" from Anthropic on every turn. turngate
    refuses it before sending, naming the tool and its place."""
    stack = await make_stack()
    tools = [*CLAUDE_TOOLS, {**CLAUDE_TOOLS[0], "name": "caldav-mcp.create-event"}]
    async with anthropic_sdk(stack) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                model=CLAUDE,
                max_tokens=64,
                tools=tools,  # type: ignore[arg-type]
                messages=[{"role": "user", "content": "Book lunch on Friday."}],
            )
    message = refused(stack, caught.value, "anthropic_tool_name_pattern", "caldav-mcp.create-event")
    assert "tools.1.custom.name: String should match pattern" in message


async def test_langchaingo_1355_a_temperature_gpt_5_does_not_take_is_refused_by_param(
    make_stack: StackFactory,
):
    """tmc/langchaingo #1355 (and chatbox #2564, code-gpt-docs #445, Open-WebUI-Functions
    #98): an application's fixed temperature (or max_tokens) sent to GPT-5 or an o-series
    model, and OpenAI refused every call ("Unsupported value: 'temperature' does not support
    0 with this model. Only the default (1) value is supported."; Responses, sourcebot #454:
    "Unsupported parameter: 'temperature' is not supported with this model."). turngate
    refuses it before sending, in OpenAI's words and with its param; the settings the model
    takes go up."""
    stack = await make_stack()
    ask: Any = [{"role": "user", "content": "Tag this ticket."}]
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="gpt-5-mini", messages=ask, temperature=0, max_tokens=256
            )
        message = refused(stack, caught.value, "openai_reasoning_settings", "gpt-5-mini")
        assert "Unsupported value: 'temperature' does not support 0 with this model." in message
        assert caught.value.param == "temperature"
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(model="gpt-5", input="Tag this ticket.", temperature=0.2)
        message = refused(stack, caught.value, "openai_reasoning_settings", "gpt-5")
        assert "Unsupported parameter: 'temperature' is not supported with this model." in message
        stack.upstream.reply(chat_answer())
        await client.chat.completions.create(
            model="gpt-5-mini", messages=ask, max_completion_tokens=256
        )
    assert len(stack.upstream.received) == 1


async def test_librechat_11689_a_sampling_preset_sent_to_a_reasoning_model_is_refused(
    make_stack: StackFactory,
):
    """LibreChat discussion #11689: an application's sampling preset (presence and frequency
    penalties, top_p) sent to GPT-5 or an o-series model, and OpenAI refused every call
    ("Unsupported parameter: 'presence_penalty' is not supported with this model.").
    turngate refuses it before sending, naming OpenAI's param, on Chat and on Responses; the
    same preset on GPT-4o goes up, and so does the reasoning model's call without it."""
    stack = await make_stack()
    ask: Any = [{"role": "user", "content": "Summarise the release notes."}]
    preset: Any = {"top_p": 0.9, "presence_penalty": 0.6, "frequency_penalty": 0.3}
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="gpt-5", messages=ask, **preset)
        message = refused(stack, caught.value, "openai_reasoning_settings", "gpt-5")
        assert "Unsupported parameter: 'top_p' is not supported with this model." in message
        assert "(+2 more: openai_reasoning_settings, openai_reasoning_settings)" in message
        assert caught.value.param == "top_p"
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(model="o4-mini", input="Summarise.", top_p=0.9)
        refused(stack, caught.value, "openai_reasoning_settings", "'top_p' is not supported")
        stack.upstream.reply(chat_answer())
        await client.chat.completions.create(model="gpt-4o", messages=ask, **preset)
        stack.upstream.reply(chat_answer())
        await client.chat.completions.create(model="gpt-5", messages=ask)
    assert len(stack.upstream.received) == 2


async def test_smolagents_1671_a_stop_sequence_gpt_5_does_not_take_is_refused(
    make_stack: StackFactory,
):
    """huggingface/smolagents #1671 and #1893 (and NeMo-Agent-Toolkit #610, n8n #18149): an
    agent loop that cuts each answer at a marker sends ``stop`` on every turn, and GPT-5,
    its point releases, o3 and o4-mini refused every call ("Unsupported parameter: 'stop' is
    not supported with this model."). turngate refuses it before sending, with OpenAI's
    param; the same turn without it goes up, and so does the marker sent to o3-mini."""
    stack = await make_stack()
    ask: Any = [{"role": "user", "content": "What is the 118th Fibonacci number?"}]
    async with openai_sdk(stack) as client:
        for model in ("gpt-5-mini", "gpt-5.2"):
            with pytest.raises(openai.BadRequestError) as caught:
                await client.chat.completions.create(
                    model=model, messages=ask, stop=["<end_code>", "Observation:"]
                )
            message = refused(stack, caught.value, "openai_reasoning_settings", model)
            assert "Unsupported parameter: 'stop' is not supported with this model." in message
            assert caught.value.param == "stop"
        stack.upstream.reply(chat_answer())
        await client.chat.completions.create(model="gpt-5.2", messages=ask)
        stack.upstream.reply(chat_answer())
        await client.chat.completions.create(model="o3-mini", messages=ask, stop=["<end_code>"])
    assert len(stack.upstream.received) == 2


async def test_openai_dotnet_500_a_reasoning_effort_sent_to_gpt_4o_is_refused(
    make_stack: StackFactory,
):
    """RageAgainstThePixel/OpenAI-DotNet #500 (and mozilla-ai/any-llm #270, BAML PR #2708):
    a library that always sent a reasoning effort, and GPT-4o, GPT-4.1 and GPT-4.1 nano
    refused every call ("Unsupported parameter: 'reasoning.effort' is not supported with
    this model.", and on Chat 'reasoning_effort'), even at effort "none". turngate refuses
    it before sending, with OpenAI's param; the reasoning model takes it, and GPT-4o without
    it goes up."""
    stack = await make_stack()
    ask: Any = [{"role": "user", "content": "File this claim."}]
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="gpt-4o-mini", messages=ask, reasoning_effort="none"
            )
        message = refused(stack, caught.value, "openai_reasoning_effort", "gpt-4o-mini")
        assert "'reasoning_effort' is not supported with this model." in message
        assert caught.value.param == "reasoning_effort"
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(
                model="gpt-4.1-mini", input="File this claim.", reasoning={"effort": "low"}
            )
        refused(stack, caught.value, "openai_reasoning_effort", "'reasoning.effort' is not")
        assert caught.value.param == "reasoning.effort"
        stack.upstream.reply(chat_answer())
        await client.chat.completions.create(model="o4-mini", messages=ask, reasoning_effort="low")
        stack.upstream.reply(chat_answer())
        await client.chat.completions.create(model="gpt-4o-mini", messages=ask)
    assert len(stack.upstream.received) == 2


async def test_forgecode_1185_an_output_limit_past_gpt_4os_is_refused_with_its_param(
    make_stack: StackFactory,
):
    """tailcallhq/forgecode #1185 (and ExtractThinker #346, catwalk #41, obsidian-copilot
    #256, NextChat #3195): an output limit set for another model (20,480, 32,000) sent to
    GPT-4o, and OpenAI refused the first "hello" ("max_tokens is too large: 20480. This model
    supports at most 16384 completion tokens, whereas you provided 20480."). turngate
    refuses it before sending, under either parameter name and as Responses'
    ``max_output_tokens``, with OpenAI's param and words; the model's own limit goes up."""
    stack = await make_stack()
    ask: Any = [{"role": "user", "content": "hello"}]
    async with openai_sdk(stack) as client:
        for name in ("max_tokens", "max_completion_tokens"):
            with pytest.raises(openai.BadRequestError) as caught:
                await client.chat.completions.create(model="gpt-4o", messages=ask, **{name: 20480})
            message = refused(stack, caught.value, "openai_max_tokens")
            assert (
                f"{name} is too large: 20480. This model supports at most 16384 completion "
                "tokens, whereas you provided 20480."
            ) in message
            assert caught.value.param == name
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(model="gpt-4o", input="hello", max_output_tokens=20480)
        message = refused(stack, caught.value, "openai_max_tokens")
        assert "max_output_tokens is too large: 20480. This model supports at most 16384" in message
        assert caught.value.param == "max_output_tokens"
        stack.upstream.reply(chat_answer())
        await client.chat.completions.create(
            model="gpt-4o", messages=ask, max_completion_tokens=16384
        )
    (sent,) = stack.upstream.received
    assert sent.json()["max_completion_tokens"] == 16384


async def test_hindsight_58_a_responses_output_limit_under_16_is_refused_with_its_param(
    make_stack: StackFactory,
):
    """vectorize-io/hindsight #58 (and new-api #2438, Work-Review #41): a connection check
    that asked for 10 output tokens (5, 8, 1 after a clamp to what was left of the window)
    through Responses, and OpenAI refused it ("Invalid 'max_output_tokens': integer below
    minimum value. Expected a value >= 16, but got 10 instead."). turngate refuses it before
    sending, with OpenAI's param and words; 16 goes up."""
    stack = await make_stack()
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(model="gpt-5", input="ping", max_output_tokens=10)
        message = refused(stack, caught.value, "openai_max_tokens")
        assert "Expected a value >= 16, but got 10 instead." in message
        assert caught.value.param == "max_output_tokens"
        answer = "openai-responses/pai-nonstream-after-function-output.json"
        stack.upstream.reply(Reply.fixture(answer))
        await client.responses.create(model="gpt-5", input="ping", max_output_tokens=16)
    (sent,) = stack.upstream.received
    assert sent.json()["max_output_tokens"] == 16


async def test_langgraphjs_506_a_tool_result_of_objects_is_refused_in_openais_words(
    make_stack: StackFactory,
):
    """langchain-ai/langgraphjs #506 (and neuron-ai #76, #292): a tool that returned objects
    had them passed on as the tool message's content, a list of parts without a type or the
    object itself, and OpenAI refused every turn ("Missing required parameter:
    'messages[3].content[0].type'."; "Invalid type for 'messages[2].content': expected one
    of a string or array of objects, but got an object instead."). turngate refuses it before
    sending, in those words and with the fix; the same result as a JSON string goes up. A
    replayed call without its ``type`` is named too, not the results it would orphan."""
    stack = await make_stack()
    ask: Any = {"role": "user", "content": "What is the weather in Paris?"}
    turn: Any = {"role": "assistant", "content": None, "tool_calls": [chat_call("call_1", "{}")]}
    for content, said in [
        ([{"temp": 9, "sky": "clear"}], "Missing required parameter: 'messages[2].content[0]"),
        ({"temp": 9, "sky": "clear"}, "but got an object instead."),
    ]:
        result: Any = {"role": "tool", "tool_call_id": "call_1", "content": content}
        async with openai_sdk(stack) as client:
            with pytest.raises(openai.BadRequestError) as caught:
                await client.chat.completions.create(model="gpt-4o", messages=[ask, turn, result])
        message = refused(stack, caught.value, "unknown_kind", said)
        assert "json.dumps" in message
    untyped: Any = {
        **turn,
        "tool_calls": [{"id": "call_1", "function": turn["tool_calls"][0]["function"]}],
    }
    result = {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 9, "sky": "clear"}'}
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="gpt-4o", messages=[ask, untyped, result])
        refused(stack, caught.value, "chat_call_type", "Missing required parameter")
        assert caught.value.param == "messages[1].tool_calls[0].type"
        stack.upstream.reply(chat_answer())
        await client.chat.completions.create(model="gpt-4o", messages=[ask, turn, result])
    (sent,) = stack.upstream.received
    assert sent.json()["messages"][2] == result


async def test_praisonai_3934_chat_content_parts_sent_to_responses_are_named_with_their_type(
    make_stack: StackFactory,
):
    """MervinPraison/PraisonAI #3934: a Chat history appended to Responses' input unchanged,
    its parts typed 'text' and 'image_url', and OpenAI refused every vision turn ("Invalid
    value: 'text'. Supported values are: 'input_text', 'input_image', ..."). turngate refuses
    it before sending, in those words and with the type each part stands for; typed so, the
    turn goes up."""
    stack = await make_stack()
    picture = "https://example.com/cat.png"
    chat_parts: Any = [
        {"type": "text", "text": "What is in the picture?"},
        {"type": "image_url", "image_url": {"url": picture}},
    ]
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(
                model="gpt-4o-mini", input=[{"role": "user", "content": chat_parts}]
            )
        message = refused(stack, caught.value, "unknown_kind", "Invalid value: 'text'.")
        assert "(type it 'input_text')" in message
        assert "(+1 more" in message
        responses_parts: Any = [
            {"type": "input_text", "text": "What is in the picture?"},
            {"type": "input_image", "image_url": picture},
        ]
        answer = "openai-responses/pai-nonstream-after-function-output.json"
        stack.upstream.reply(Reply.fixture(answer))
        await client.responses.create(
            model="gpt-4o-mini", input=[{"role": "user", "content": responses_parts}]
        )
    (sent,) = stack.upstream.received
    assert sent.json()["input"][0]["content"] == responses_parts


async def test_litellm_5803_stream_options_on_a_call_that_does_not_stream_is_refused(
    make_stack: StackFactory,
):
    """BerriAI/litellm #5803 (and aliasrobotics/cai #77): a gateway turned a stream into a
    plain call for a model that did not stream, or a client always asked for usage in the
    stream, and OpenAI refused the call ("The 'stream_options' parameter is only allowed when
    'stream' is enabled."). turngate refuses it before sending, with OpenAI's param; with
    the stream on, the same options go up."""
    stack = await make_stack()
    ask: Any = [{"role": "user", "content": "Summarise the ticket."}]
    usage: Any = {"include_usage": True}
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="gpt-4o", messages=ask, stream_options=usage)
        refused(stack, caught.value, "chat_stream_options", "only allowed when 'stream'")
        assert caught.value.param == "stream_options"
        stack.upstream.reply(Reply.fixture("openai-chat/pai-text-only.sse"))
        stream = await client.chat.completions.create(
            model="gpt-4o", messages=ask, stream=True, stream_options=usage
        )
        async for _chunk in stream:
            pass
    (sent,) = stack.upstream.received
    assert sent.json()["stream_options"] == usage


async def test_vercel_ai_21202_a_structured_output_in_the_wrong_shape_is_refused_by_param(
    make_stack: StackFactory,
):
    """vercel/ai #21202 (and SwiftOpenAI #151, Datus-agent PR #1281): a json_schema format sent
    without its name, or in the other endpoint's shape, and OpenAI refused every call
    ("Missing required parameter: 'text.format.name'."; on Chat "... 'response_format.
    json_schema'."). turngate refuses each before sending, with OpenAI's param and the shape
    that endpoint takes; written so, each goes up."""
    stack = await make_stack()
    schema: Any = {"type": "object", "properties": {"tag": {"type": "string"}}}
    flat: Any = {"type": "json_schema", "name": "ticket_tag", "schema": schema}
    nested: Any = {"type": "json_schema", "json_schema": {"name": "ticket_tag", "schema": schema}}
    ask: Any = [{"role": "user", "content": "Tag this ticket, in json."}]
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(
                model="gpt-5", input="Tag this ticket.", text={"format": {"type": "json_schema"}}
            )
        refused(stack, caught.value, "openai_format_shape", "'text.format.name'")
        assert caught.value.param == "text.format.name"
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="gpt-4o", messages=ask, response_format=flat)
        refused(stack, caught.value, "openai_format_shape", "nest name, schema under json_schema")
        assert caught.value.param == "response_format.json_schema"
        stack.upstream.reply(Reply.fixture("openai-chat/pai-nonstream-after-2-tool-results.json"))
        await client.chat.completions.create(model="gpt-4o", messages=ask, response_format=nested)
        answer = "openai-responses/pai-nonstream-after-function-output.json"
        stack.upstream.reply(Reply.fixture(answer))
        await client.responses.create(
            model="gpt-5", input="Tag this ticket.", text={"format": flat}
        )
    chat_sent, responses_sent = stack.upstream.received
    assert chat_sent.json()["response_format"] == nested
    assert responses_sent.json()["text"]["format"] == flat


async def test_openhands_755_chat_parameters_sent_to_responses_are_refused_by_name(
    make_stack: StackFactory,
):
    """OpenHands/software-agent-sdk #755: a client that moved GPT-5 to /v1/responses kept
    Chat Completions' names, and OpenAI refused every call ("Unsupported parameter:
    'reasoning_effort'. In the Responses API, this parameter has moved to
    'reasoning.effort'."; the same for messages, max_completion_tokens and
    response_format). turngate refuses it before sending, naming where Responses takes
    each; the body written with Responses' names goes up."""
    stack = await make_stack()
    chat_body: Any = {
        "messages": [{"role": "user", "content": "Fix the failing test."}],
        "reasoning_effort": "low",
        "max_completion_tokens": 2048,
    }
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(model="gpt-5", extra_body=chat_body)
        message = refused(stack, caught.value, "responses_chat_parameter", "'messages'")
        assert "this parameter has moved to 'input'." in message
        assert "(+2 more: responses_chat_parameter, responses_chat_parameter)" in message
        assert caught.value.param == "messages"
        stack.upstream.reply(
            Reply.json(recorded("openai-responses/pai-nonstream-after-function-output.json"))
        )
        await client.responses.create(
            model="gpt-5",
            input="Fix the failing test.",
            reasoning={"effort": "low"},
            max_output_tokens=2048,
        )
    assert len(stack.upstream.received) == 1


async def test_dspy_9943_a_tool_in_the_other_apis_shape_is_refused_by_index(
    make_stack: StackFactory,
):
    """stanfordnlp/dspy #9943 (and any-llm PR #1310, geode PR #612): a library that builds
    Chat Completions tools sent them to /v1/responses, and OpenAI refused every request
    ("Missing required parameter: 'tools[0].name'."; the other way round, "Missing
    required parameter: 'tools[0].function'."). turngate refuses it before sending, naming
    the entry with OpenAI's param; each API's own shape goes up."""
    stack = await make_stack()
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    nested: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": schema}}]
    flat: Any = [{"type": "function", "name": "get_weather", "parameters": schema}]
    ask: Any = [{"role": "user", "content": "Weather in Paris?"}]
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(model="gpt-5", input="Weather in Paris?", tools=nested)
        refused(stack, caught.value, "openai_tool_shape", "'tools[0].name'")
        assert caught.value.param == "tools[0].name"
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="gpt-4o", messages=ask, tools=flat)
        refused(stack, caught.value, "openai_tool_shape", "'tools[0].function'")
        stack.upstream.reply(
            Reply.json(recorded("openai-responses/pai-nonstream-after-function-output.json"))
        )
        await client.responses.create(model="gpt-5", input="Weather in Paris?", tools=flat)
        stack.upstream.reply(chat_answer())
        await client.chat.completions.create(model="gpt-4o", messages=ask, tools=nested)
    assert len(stack.upstream.received) == 2


async def test_mem0_3559_json_mode_with_no_message_saying_json_is_refused_by_name(
    make_stack: StackFactory,
):
    """mem0ai/mem0 #3559 (and xray.koplugin #33, agno PR #5317): JSON mode on, and a custom
    prompt that no longer said "json"; OpenAI refused every call ("'messages' must contain
    the word 'json' in some form, to use 'response_format' of type 'json_object'.", and in
    Responses' words for text.format). turngate refuses it before sending with OpenAI's
    param; once a message says JSON, it goes up."""
    stack = await make_stack()
    ask: Any = [{"role": "user", "content": "Extract the facts from: I live in Lyon."}]
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="gpt-4o-mini", messages=ask, response_format={"type": "json_object"}
            )
        refused(stack, caught.value, "openai_json_mode", "'messages' must contain the word")
        assert caught.value.param == "messages"
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(
                model="gpt-4o-mini",
                input="Extract the facts from: I live in Lyon.",
                text={"format": {"type": "json_object"}},
            )
        refused(stack, caught.value, "openai_json_mode", "'text.format' of type 'json_object'")
        assert caught.value.param == "text.format"
        stack.upstream.reply(chat_answer())
        system: Any = {"role": "system", "content": "Reply with a JSON object of facts."}
        await client.chat.completions.create(
            model="gpt-4o-mini", messages=[system, *ask], response_format={"type": "json_object"}
        )
    assert len(stack.upstream.received) == 1


async def test_a_structured_output_named_by_its_schema_title_is_refused_by_name(
    make_stack: StackFactory,
):
    """A schema's title used as the structured output's name ("intent/1.0", a versioned
    "extractor.v4", a Korean title through langchain): OpenAI refused every such call
    ("Invalid 'response_format.json_schema.name': string does not match pattern. Expected a
    string that matches the pattern '^[a-zA-Z0-9_-]+$'."). turngate refuses it before
    sending, on Chat and Responses, with OpenAI's param; a name in the pattern goes up."""
    stack = await make_stack()
    schema: Any = {"type": "object", "properties": {"intent": {"type": "string"}}}
    ask: Any = [{"role": "user", "content": "Book a table for two."}]
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="gpt-4o-mini",
                messages=ask,
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "intent/1.0", "schema": schema},
                },
            )
        refused(stack, caught.value, "openai_format_name", "'intent/1.0'")
        assert caught.value.param == "response_format.json_schema.name"
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(
                model="gpt-4o-mini",
                input="Book a table for two.",
                text={"format": {"type": "json_schema", "name": "시말서", "schema": schema}},
            )
        message = refused(stack, caught.value, "openai_format_name", "text.format.name")
        assert "string does not match pattern" in message
        stack.upstream.reply(chat_answer())
        await client.chat.completions.create(
            model="gpt-4o-mini",
            messages=ask,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "intent_v1", "schema": schema},
            },
        )
    assert len(stack.upstream.received) == 1


async def test_codex_8174_a_tool_name_openai_refuses_is_refused_by_name(
    make_stack: StackFactory,
):
    """openai/codex #8174 (and openai-dotnet #441, codex #1289): MCP tools declared to the
    Responses API as 'github.search_issues', or under a composed 'mcp__…' name longer than
    the API takes (128 characters now: codex #46188), got "Invalid 'tools[N].name'" on
    every turn. turngate refuses it before sending, naming the tool and its place; a
    68-character name, which Chat refuses, goes up."""
    stack = await make_stack()
    long_name = "mcp__codex_apps__" + "github_" * 16
    for name, words in (
        ("github.search_issues", "string does not match pattern"),
        (long_name, "string too long. Expected a string with maximum length 128"),
    ):
        tools = [{"type": "function", "name": name, "parameters": {"type": "object"}}]
        async with openai_sdk(stack) as client:
            with pytest.raises(openai.BadRequestError) as caught:
                await client.responses.create(
                    model="gpt-5",
                    input="Any open bugs?",
                    tools=tools,  # type: ignore[arg-type]
                )
        message = refused(stack, caught.value, "responses_name_pattern", name)
        assert f"Invalid 'tools[0].name': {words}" in message
    stack.upstream.reply(Reply.fixture("openai-responses/pai-nonstream-after-function-output.json"))
    tools = [
        {
            "type": "function",
            "name": "mcp__chrome_devtools_mcp_chrome_devtools_performance_analyze_insight",
            "parameters": {"type": "object"},
        }
    ]
    async with openai_sdk(stack) as client:
        await client.responses.create(
            model="gpt-5",
            input="Any open bugs?",
            tools=tools,  # type: ignore[arg-type]
        )
    assert len(stack.upstream.received) == 1


class Stop(BaseModel):
    city: str
    minutes: int | None = None


class Trip(BaseModel):
    stops: list[Stop]
    note: str | None = None


async def test_openai_agents_4114_a_strict_schema_with_an_open_object_is_refused_by_name(
    make_stack: StackFactory,
):
    """openai/openai-agents-python #4114 (and codex output schemas, openai4j PR #74): a
    function marked strict whose parameters hold a nullable object with no
    additionalProperties: false, or a property left out of required, got "Invalid schema for
    function …: In context=…, 'additionalProperties' is required to be supplied and to be
    false." on every turn. turngate refuses it before sending, naming the function and the
    place; the strict schemas the openai SDK makes from a pydantic model go up, and the SDK
    parses the answer."""
    stack = await make_stack()
    parameters = {
        "type": "object",
        "properties": {"a": {"type": ["object", "null"], "properties": {"b": {"type": "string"}}}},
        "required": ["a"],
        "additionalProperties": False,
    }
    tools = [{"type": "function", "name": "process", "parameters": parameters, "strict": True}]
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(
                model="gpt-5",
                input="Process it",
                tools=tools,  # type: ignore[arg-type]
            )
    message = refused(stack, caught.value, "openai_strict_schema", "tools[0].parameters")
    words = (
        "Invalid schema for function 'process': In context=('properties', 'a'), "
        "'additionalProperties' is required to be supplied and to be false."
    )
    assert words in message
    trip = {"stops": [{"city": "Lyon", "minutes": None}], "note": None}
    message_out = {"role": "assistant", "content": orjson.dumps(trip).decode()}
    choice = {"index": 0, "finish_reason": "stop", "message": message_out}
    answer = {"id": "chatcmpl-ff", "object": "chat.completion", "model": "gpt-4o"}
    stack.upstream.reply(Reply.json({**answer, "created": 0, "choices": [choice]}))
    async with openai_sdk(stack) as client:
        parsed = await client.chat.completions.parse(
            model="gpt-4o",
            messages=[{"role": "user", "content": "Plan a trip"}],
            tools=[openai.pydantic_function_tool(Trip)],
            response_format=Trip,
        )
    assert parsed.choices[0].message.parsed == Trip.model_validate(trip)
    (sent,) = stack.upstream.received
    assert sent.json()["tools"][0]["function"]["strict"] is True


LS_OUTPUT = "src/main.rb\n" * 900_000  # 10,800,000 characters: a runaway `ls -R`


async def test_roast_52_a_tool_output_past_openais_string_limit_is_refused_by_name(
    make_stack: StackFactory,
):
    """Shopify/roast #52 (and earendil-works/pi #2122): a tool's output of more than
    10,485,760 characters went back into the conversation, and OpenAI answered "Invalid
    'messages[5].content': string too long. Expected a string with maximum length 10485760"
    on that turn and every turn after it: the session was dead. turngate refuses it before
    sending, naming the call whose output it is; cut to what a model reads, it goes up."""
    stack = await make_stack()
    call = chat_call("call_ls", '{"path": "."}')
    call["function"]["name"] = "run_command"
    history: list[Any] = [
        {"role": "user", "content": "List the repository"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
    ]
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="gpt-4o",
                messages=[
                    *history,
                    {"role": "tool", "tool_call_id": "call_ls", "content": LS_OUTPUT},
                ],
            )
    message = refused(stack, caught.value, "openai_string_too_long", "call_ls")
    words = (
        "Invalid 'messages[2].content': string too long. Expected a string with maximum length "
        "10485760, but got a string with length 10800000 instead."
    )
    assert words in message
    stack.upstream.reply(chat_answer())
    cut = LS_OUTPUT[:20_000]
    async with openai_sdk(stack) as client:
        await client.chat.completions.create(
            model="gpt-4o",
            messages=[*history, {"role": "tool", "tool_call_id": "call_ls", "content": cut}],
        )
    assert len(stack.upstream.received) == 1


async def test_openai_agents_2293_an_item_id_without_its_types_prefix_is_refused_by_name(
    make_stack: StackFactory,
):
    """openai/openai-agents-python #2293 (and langchain #39113, codex #33176, nodetool PR
    #4252): items kept under ids the client made up ('__fake_id__' from a chat-model run, a
    call's call_id in its id) were sent back to the Responses API, which answered "Expected
    an ID that begins with 'msg'" (or 'fc') on every later turn. turngate refuses it before
    sending, naming the item; with the id the answer gave it, or none, it goes up."""
    stack = await make_stack()
    kept = {
        "type": "message",
        "role": "assistant",
        "id": "__fake_id__",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Paris is sunny.", "annotations": []}],
    }
    question = {"role": "user", "content": "And Rome?"}
    items: Any = [{"role": "user", "content": "Weather in Paris?"}, kept, question]
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(model="gpt-5", input=items)
    message = refused(stack, caught.value, "responses_item_id_prefix", "input[1]", "__fake_id__")
    assert "Expected an ID that begins with 'msg'" in message
    stack.upstream.reply(Reply.fixture("openai-responses/pai-nonstream-after-function-output.json"))
    items[1] = {key: value for key, value in kept.items() if key != "id"}
    async with openai_sdk(stack) as client:
        await client.responses.create(model="gpt-5", input=items)
    assert len(stack.upstream.received) == 1


async def test_opencode_7724_reasoning_without_its_content_under_store_false_is_refused(
    make_stack: StackFactory,
):
    """anomalyco/opencode #7724 (and vercel/ai #7543, oh-my-pi #41): an agent running with
    store: false sent the model's reasoning back by id without its encrypted content; OpenAI
    answered "Item with id 'rs_…' not found. Items are not persisted when `store` is set to
    false" on the turn after every think. turngate refuses it before sending, naming the
    item; with its encrypted content, it goes up."""
    stack = await make_stack()
    reasoning = {"type": "reasoning", "id": "rs_04962823ecde", "summary": []}
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    }
    output = {"type": "function_call_output", "call_id": "call_1", "output": "18C"}
    items: Any = [{"role": "user", "content": "Weather in Paris?"}, reasoning, call, output]
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(model="gpt-5", input=items, store=False)
    message = refused(stack, caught.value, "responses_item_not_stored", "input[1]")
    assert "Item with id 'rs_04962823ecde' not found. Items are not persisted" in message
    stack.upstream.reply(Reply.fixture("openai-responses/pai-nonstream-after-function-output.json"))
    items[1] = {**reasoning, "encrypted_content": "gAAAAB-opaque=="}
    async with openai_sdk(stack) as client:
        await client.responses.create(model="gpt-5", input=items, store=False)
    assert len(stack.upstream.received) == 1


async def test_dokploy_mcp_74_a_tool_schema_outside_the_draft_is_refused_by_name(
    make_stack: StackFactory,
):
    """Dokploy/mcp #74 (and fizzy-mcp PR #30, kestra PR #17075, claude-code #63673): an MCP
    server declared a draft-4 boolean exclusiveMinimum, and Anthropic answered "tools.N.custom.
    input_schema: JSON schema is invalid. It must match JSON Schema draft 2020-12" to every
    request of the session, naming neither the tool nor the keyword. turngate refuses it
    before sending with both; with a numeric bound it goes up."""
    stack = await make_stack()
    ttl: dict[str, Any] = {"type": "integer", "exclusiveMinimum": True, "minimum": 0}
    record = {
        "name": "dnsProvider-createRecord",
        "input_schema": {"type": "object", "properties": {"ttl": ttl}},
    }
    async with anthropic_sdk(stack) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                model=CLAUDE,
                max_tokens=64,
                messages=[{"role": "user", "content": "Add an A record"}],
                tools=[*CLAUDE_TOOLS, record],  # type: ignore[list-item]
            )
    message = refused(stack, caught.value, "anthropic_tool_schema", "dnsProvider-createRecord")
    assert "tools.1.custom.input_schema: JSON schema is invalid" in message
    body = caught.value.body
    assert isinstance(body, dict)
    detail = "at properties.ttl.exclusiveMinimum: True is not of type 'number'"
    assert detail in body["error"]["message"]
    ttl["exclusiveMinimum"] = 0
    del ttl["minimum"]
    stack.upstream.reply(claude_answer("Added."))
    async with anthropic_sdk(stack) as client:
        await client.messages.create(
            model=CLAUDE,
            max_tokens=64,
            messages=[{"role": "user", "content": "Add an A record"}],
            tools=[*CLAUDE_TOOLS, record],  # type: ignore[list-item]
        )
    assert len(stack.upstream.received) == 1


async def test_claude_code_12009_a_screenshot_labelled_jpeg_is_refused_by_name(
    make_stack: StackFactory,
):
    """anthropics/claude-code #12009 (and #11918, #17452, llxprt-code #2130): a screenshot
    tool returned a PNG that the client labelled image/jpeg; Anthropic answered "The image
    was specified using the image/jpeg media type, but the image appears to be a image/png
    image" and every later turn of the conversation failed. turngate refuses it before
    sending, naming the call whose result holds it; labelled by its bytes, it goes up."""
    stack = await make_stack()
    stack.upstream.reply(Reply.fixture("anthropic/pai-nonstream-after-4-tool-results.json"))
    screenshot = base64.b64encode(png_bytes()).decode()

    def history(label: str) -> list[dict[str, Any]]:
        shot = {"type": "base64", "media_type": label, "data": screenshot}
        return [
            {"role": "user", "content": "What does the page show?"},
            {"role": "assistant", "content": [claude_call("toolu_01Shot", "example.com")]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01Shot",
                        "content": [{"type": "image", "source": shot}],
                    }
                ],
            },
        ]

    async with anthropic_sdk(stack) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                model=CLAUDE, max_tokens=64, tools=CLAUDE_TOOLS, messages=history("image/jpeg")
            )
        message = refused(stack, caught.value, "anthropic_image_media_type", "toolu_01Shot")
        assert "the image appears to be a image/png image" in message

        await client.messages.create(
            model=CLAUDE, max_tokens=64, tools=CLAUDE_TOOLS, messages=history("image/png")
        )
    (received,) = stack.upstream.received
    sent = received.json()["messages"][2]["content"][0]["content"][0]["source"]
    assert sent == {"type": "base64", "media_type": "image/png", "data": screenshot}


async def test_claude_code_19539_thinking_changed_since_the_answer_is_refused_by_name(
    make_stack: StackFactory,
):
    """anthropics/claude-code #19539 / #63203 / #63404 (and llxprt-code #1653, atomic #1318):
    the client sent the latest assistant turn back with its thinking re-joined or trimmed;
    Anthropic answered "`thinking` or `redacted_thinking` blocks in the latest assistant
    message cannot be modified", on every retry. turngate remembers each signed block it
    relayed and refuses the changed one before sending, naming it; sent back as streamed,
    the turn goes up."""
    stack = await make_stack()
    stack.upstream.reply(Reply.fixture("anthropic/lla-thinking-then-tool-use.sse"))
    tools: Any = [{"name": "fixed_version", "input_schema": {"type": "object"}}]
    ask: Any = {"role": "user", "content": "Which version is fixed? Then joke about it."}
    thinking = {"type": "enabled", "budget_tokens": 1024}
    common: Any = {"model": CLAUDE, "max_tokens": 2048, "tools": tools, "thinking": thinking}
    async with anthropic_sdk(stack) as client:
        async with client.messages.stream(**common, messages=[ask]) as stream:
            answer = await stream.get_final_message()
        turn = [block.model_dump(exclude_none=True) for block in answer.content]
        call = next(block for block in turn if block["type"] == "tool_use")
        result = {"type": "tool_result", "tool_use_id": call["id"], "content": "4.2.1"}
        edited = [
            {**block, "thinking": block["thinking"].strip().replace("\n", " ")}
            if block["type"] == "thinking"
            else block
            for block in turn
        ]
        history = [ask, {"role": "assistant", "content": edited}]
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                **common, messages=[*history, {"role": "user", "content": [result]}]
            )
        message = refused_after(stack, caught.value, "anthropic_thinking_modified", sent=1)
        assert "messages[1]" in message
        assert "carries the signature of a block turngate relayed, but not its text" in message
        assert "blocks in the latest assistant message cannot be modified" in message
        stack.upstream.reply(claude_answer("4.2.1: a fix so small it needs glasses."))
        history = [ask, {"role": "assistant", "content": turn}]
        await client.messages.create(
            **common, messages=[*history, {"role": "user", "content": [result]}]
        )
    assert len(stack.upstream.received) == 2


async def test_llmgateway_2629_a_1h_cache_mark_after_a_5m_one_is_refused_by_name(
    make_stack: StackFactory,
):
    """theopenco/llmgateway PR #2629 (and vellum-assistant PR #22191, UncommonRoute #1): a
    gateway's own 5-minute cache marks landed before the caller's 1-hour ones, and Anthropic
    refused every request ("a ttl='1h' cache_control block must not come after a ttl='5m'
    cache_control block"). turngate refuses it before sending, naming both marks; with the
    longer TTL first, the request goes up."""
    stack = await make_stack()
    system: Any = [
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    ]
    tool: Any = {**CLAUDE_TOOLS[0], "cache_control": {"type": "ephemeral"}}
    ask: Any = [{"role": "user", "content": "Weather in Paris?"}]
    async with anthropic_sdk(stack) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                model=CLAUDE, max_tokens=256, system=system, tools=[tool], messages=ask
            )
        refused(stack, caught.value, "anthropic_cache_ttl_order")
        body = caught.value.body
        assert isinstance(body, dict)
        message = body["error"]["message"]
        assert "on block 'system.b0' comes after the 5-minute one on tool 'get_weather'" in message
        assert "a ttl='1h' cache_control block must not come after a ttl='5m'" in message
        stack.upstream.reply(claude_answer("Sunny."))
        tool["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
        await client.messages.create(
            model=CLAUDE, max_tokens=256, system=system, tools=[tool], messages=ask
        )
    assert len(stack.upstream.received) == 1


async def test_forgecode_3071_a_reasoning_only_turn_in_the_history_is_refused_by_name(
    make_stack: StackFactory,
):
    """tailcallhq/forgecode #3071 / #2107 (and hermes-agent PR #16921): an answer that was
    thinking alone (no text, no call) was kept in the history, and every later request
    failed ("messages.17: The final block in an assistant message cannot be `thinking`."),
    so the conversation was dead. turngate refuses it before sending, naming the message;
    with the answer's text after its thinking, the request goes up."""
    stack = await make_stack()
    thought: Any = {"type": "thinking", "thinking": "The user wants a plan.", "signature": "c2ln"}
    settings: Any = {
        "model": CLAUDE,
        "max_tokens": 4096,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
    }
    ask: Any = {"role": "user", "content": "Plan the migration."}
    more: Any = {"role": "user", "content": "Go on."}
    async with anthropic_sdk(stack) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                **settings, messages=[ask, {"role": "assistant", "content": [thought]}, more]
            )
        message = refused(stack, caught.value, "anthropic_thinking_final", "messages[1]")
        assert "The final block in an assistant message cannot be `thinking`." in message
        stack.upstream.reply(claude_answer("Step two: migrate."))
        answered: Any = [thought, {"type": "text", "text": "Step one: back up."}]
        await client.messages.create(
            **settings, messages=[ask, {"role": "assistant", "content": answered}, more]
        )
    assert len(stack.upstream.received) == 1


async def test_litellm_9001_a_thinking_budget_not_below_max_tokens_is_refused_unless_interleaved(
    make_stack: StackFactory,
):
    """BerriAI/litellm #9001 (and llm.js #30, agent-afk #951, sudocode PR #438): a thinking
    budget at or above max_tokens, or under 1,024, and Anthropic refused every turn; LiteLLM's
    users asked for the refusal before sending. turngate refuses both in Anthropic's words.
    With the interleaved-thinking beta (the SDK's ``betas``, a header) the budget spans the
    whole turn, so the same request goes up, header and all."""
    stack = await make_stack()
    ask: Any = [{"role": "user", "content": "Plan the migration."}]
    common: Any = {"model": CLAUDE, "max_tokens": 1024, "messages": ask, "tools": CLAUDE_TOOLS}
    async with anthropic_sdk(stack) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                **common, thinking={"type": "enabled", "budget_tokens": 1024}
            )
        message = refused(stack, caught.value, "anthropic_thinking_budget", "(1024)")
        assert "`max_tokens` must be greater than `thinking.budget_tokens`." in message
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                **common, thinking={"type": "enabled", "budget_tokens": 512}
            )
        message = refused(stack, caught.value, "anthropic_thinking_budget", "is 512")
        assert "greater than or equal to 1024" in message
        stack.upstream.reply(claude_answer("Step one: back up."))
        await client.beta.messages.create(
            **common,
            thinking={"type": "enabled", "budget_tokens": 1024},
            betas=["interleaved-thinking-2025-05-14"],
        )
    (sent,) = stack.upstream.received
    assert "interleaved-thinking-2025-05-14" in sent.headers["anthropic-beta"]


async def test_vercel_ai_10554_a_max_tokens_past_the_models_output_limit_is_refused(
    make_stack: StackFactory,
):
    """vercel/ai PR #10554, JetBrains/koog PR #1825, Effect-TS PR #7129: one output limit set
    for every model (64K) met a model that writes less (Claude Opus 4.1: 32K), and Anthropic
    refused every request with "max_tokens: 64000 > 32000, which is the maximum allowed
    number of output tokens for ...". turngate refuses it before sending, in those words;
    the model's own limit goes up, and so does 64K to Haiku 4.5, which writes that much."""
    stack = await make_stack()
    stack.upstream.reply(Reply.fixture("anthropic/lla-text-only.sse"))
    ask: Any = [{"role": "user", "content": "Write the whole migration guide."}]
    opus = "claude-opus-4-1-20250805"
    async with anthropic_sdk(stack) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(model=opus, max_tokens=64000, messages=ask, stream=True)
        message = refused(stack, caught.value, "anthropic_max_tokens")
        assert (
            f"max_tokens: 64000 > 32000, which is the maximum allowed number of output tokens "
            f"for {opus}"
        ) in message
        for model, limit in [(opus, 32000), (CLAUDE, 64000)]:
            async with client.messages.stream(model=model, max_tokens=limit, messages=ask) as got:
                await got.get_final_message()
    assert [sent.json()["max_tokens"] for sent in stack.upstream.received] == [32000, 64000]


async def test_claude_code_6695_a_call_input_sent_as_a_string_is_refused_with_the_fix(
    make_stack: StackFactory,
):
    """anthropics/claude-code #6695: a replayed tool_use whose input was a JSON string, as
    OpenAI writes arguments, and Anthropic refused the turn ("messages.1.content.0.tool_use.
    input: Input should be a valid dictionary"). turngate refuses it before sending, saying
    so; so it does a tool_result whose content is the object the tool returned, which turngate
    relayed before. The same turn with an object input and a text result goes up."""
    stack = await make_stack()
    ask: Any = {"role": "user", "content": "What is the weather in Paris?"}
    called = {"type": "tool_use", "id": "toolu_1", "name": "get_weather"}
    answered = {"type": "tool_result", "tool_use_id": "toolu_1"}
    cases: Any = [
        ({**called, "input": '{"city": "Paris"}'}, {**answered, "content": "sunny"}),
        ({**called, "input": {"city": "Paris"}}, {**answered, "content": {"sky": "clear"}}),
    ]
    async with anthropic_sdk(stack) as client:
        expected = [
            ("incomplete_arguments", "Input should be a valid dictionary"),
            ("unknown_kind", "tool_result content must be a string or a list of blocks"),
        ]
        for (call, result), (rule, said) in zip(cases, expected, strict=True):
            turn: Any = [ask, {"role": "assistant", "content": [call]}]
            with pytest.raises(anthropic.BadRequestError) as caught:
                await client.messages.create(
                    model=CLAUDE,
                    max_tokens=256,
                    tools=CLAUDE_TOOLS,
                    messages=[*turn, {"role": "user", "content": [result]}],
                )
            refused(stack, caught.value, rule, said)
        stack.upstream.reply(claude_answer("Clear skies."))
        history: Any = [ask, {"role": "assistant", "content": [cases[1][0]]}]
        result = {**answered, "content": '{"sky": "clear"}'}
        await client.messages.create(
            model=CLAUDE,
            max_tokens=256,
            tools=CLAUDE_TOOLS,
            messages=[*history, {"role": "user", "content": [result]}],
        )
    (sent,) = stack.upstream.received
    assert sent.json()["messages"][2]["content"] == [result]


async def test_gproxy_209_a_system_prompt_sent_as_the_first_message_is_refused(
    make_stack: StackFactory,
):
    """LeenHawk/gproxy #209: a Codex developer message converted into Claude's messages[0]
    as a system message, and Opus 4.8 and Opus 5 refused every request ("messages.0: use the
    top-level 'system' parameter for the initial system prompt"); before Opus 4.8 any
    system message in messages is refused ("Unexpected role "system"..."). turngate refuses
    both before sending; the same prompt in the top-level system field goes up."""
    stack = await make_stack()
    prompt = "Answer in one line."
    ask: Any = {"role": "user", "content": "What changed in the release?"}
    async with anthropic_sdk(stack) as client:
        for model, said in [
            ("claude-opus-4-8", "use the top-level 'system' parameter"),
            (CLAUDE, 'Unexpected role "system"'),
        ]:
            with pytest.raises(anthropic.BadRequestError) as caught:
                await client.messages.create(
                    model=model,
                    max_tokens=256,
                    messages=[{"role": "system", "content": prompt}, ask],  # type: ignore[list-item]
                )
            refused(stack, caught.value, "anthropic_system_message", said)
        stack.upstream.reply(claude_answer("Streaming retries were fixed."))
        await client.messages.create(
            model="claude-opus-4-8", max_tokens=256, system=prompt, messages=[ask]
        )
    (sent,) = stack.upstream.received
    assert sent.json()["system"] == prompt


async def test_opencode_23007_a_manual_budget_on_opus_4_7_is_refused_by_name(
    make_stack: StackFactory,
):
    """anomalyco/opencode #23007 (and pi #3297, hermes-agent #11152, Everywhere #410): a
    thinking level kept a manual budget when the user picked Claude Opus 4.7, which takes
    adaptive thinking only, and every request failed; pensarai/apex PR #890 met the reverse,
    adaptive thinking sent to Haiku 4.5. turngate refuses both before sending, in
    Anthropic's words and with the setting each model takes; that setting goes up."""
    stack = await make_stack()
    ask: Any = [{"role": "user", "content": "Plan the migration."}]
    async with anthropic_sdk(stack) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                model="claude-opus-4-7",
                max_tokens=16000,
                messages=ask,
                thinking={"type": "enabled", "budget_tokens": 8000},
            )
        message = refused(stack, caught.value, "anthropic_thinking_mode", "claude-opus-4-7")
        assert '"thinking.type.enabled" is not supported for this model.' in message
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                model=CLAUDE, max_tokens=16000, messages=ask, thinking={"type": "adaptive"}
            )
        message = refused(stack, caught.value, "anthropic_thinking_mode", CLAUDE)
        assert "adaptive thinking is not supported on this model" in message
        stack.upstream.reply(claude_answer("Step one: back up."))
        await client.messages.create(
            model="claude-opus-4-7", max_tokens=16000, messages=ask, thinking={"type": "adaptive"}
        )
    assert len(stack.upstream.received) == 1


async def test_libre_chat_11949_sampling_settings_a_claude_model_refuses_are_refused_by_name(
    make_stack: StackFactory,
):
    """danny-avila/LibreChat #11949 (and snow-app #42, inspect_ai #3721, open-webui #17922): an
    agent's fixed ``temperature`` met thinking, or Claude Opus 4.7, which dropped it, or a
    top_p beside it on Claude 4.5; Anthropic refused every request. Under API version
    2026-10-21, which the SDK sends and whose create() takes no temperature, one passed in
    ``extra_body`` is refused at any value (qiita: Python SDK 2.0 migration). turngate
    refuses each in Anthropic's words, naming the values; what the version and model take
    goes up."""
    stack = await make_stack()
    ask: Any = [{"role": "user", "content": "Summarize the ticket."}]
    old: Any = {"anthropic-version": "2023-06-01"}
    refusals: list[tuple[dict[str, Any], dict[str, Any], str]] = [
        (
            {"model": "claude-sonnet-4-6"},
            {"temperature": 0.2},
            '"temperature: Extra inputs are not permitted"',
        ),
        (
            {"model": "claude-sonnet-4-6", "thinking": {"type": "adaptive"}, "extra_headers": old},
            {"temperature": 0.05},
            "`temperature` may only be set to 1 when thinking is enabled or in adaptive mode.",
        ),
        (
            {"model": "claude-opus-4-7", "extra_headers": old},
            {"temperature": 0},
            "`temperature` is deprecated for this model.",
        ),
        (
            {"model": CLAUDE, "extra_headers": old},
            {"temperature": 0.2, "top_p": 0.9},
            "`temperature` and `top_p` cannot both be specified for this model.",
        ),
    ]
    async with anthropic_sdk(stack) as client:
        for settings, sampling, words in refusals:
            with pytest.raises(anthropic.BadRequestError) as caught:
                await client.messages.create(
                    max_tokens=4096, messages=ask, extra_body=sampling, **settings
                )
            message = refused(stack, caught.value, "anthropic_sampling")
            assert words in message
        stack.upstream.reply(claude_answer("A login bug."))
        await client.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=4096,
            messages=ask,
            thinking={"type": "adaptive"},
            extra_body={"temperature": 1},
            extra_headers=old,
        )
    (sent,) = stack.upstream.received
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.json()["temperature"] == 1


async def test_openclaw_5344_a_photo_over_the_limit_once_encoded_is_refused_by_name(
    make_stack: StackFactory,
):
    """openclaw #5344 / PR #9598 (and langchain #21654, lobehub PR #14711): a photo checked
    against the limit before encoding went up over it as base64; Anthropic answered "image
    exceeds 5 MB maximum" (10 MB since mid-2026) and, with the photo in the history, every
    later message failed. turngate refuses it before sending, with the encoded size; a photo
    over the old limit and under the new one goes up."""
    stack = await make_stack()

    def photo_message(raw: int) -> list[Any]:
        data = base64.b64encode(png_bytes() + bytes(raw)).decode()
        shot = {"type": "base64", "media_type": "image/png", "data": data}
        content = [{"type": "image", "source": shot}, {"type": "text", "text": "What is this?"}]
        return [{"role": "user", "content": content}]

    async with anthropic_sdk(stack) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                model=CLAUDE, max_tokens=64, messages=photo_message(8_000_000)
            )
    message = refused(stack, caught.value, "anthropic_image_size", "messages[0]")
    assert "image exceeds 10 MB maximum: 10666760 bytes > 10485760 bytes" in message
    stack.upstream.reply(claude_answer("A photo."))
    async with anthropic_sdk(stack) as client:
        await client.messages.create(model=CLAUDE, max_tokens=64, messages=photo_message(4_600_000))
    assert len(stack.upstream.received) == 1


async def test_claude_code_19822_the_image_limit_is_the_models_window(make_stack: StackFactory):
    """anthropics/claude-code #19822: a computer-use loop's 102nd screenshot made every later
    request fail ("Too much media: 0 document pages + 102 images > 100"). Since the 1M-token
    window's general availability (2026-03-13) Anthropic takes 600 images, and 100 only on a
    model of a 200k-token window: 101 screenshots go up to Claude Opus 4.6 and are refused,
    before sending, to Claude Haiku 4.5."""
    stack = await make_stack()
    data = base64.b64encode(png_bytes(1280, 800)).decode()
    shot = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    messages: list[Any] = [{"role": "user", "content": "Book the flight."}]
    for n in range(101):
        call = {"type": "tool_use", "id": f"toolu_{n}", "name": "screenshot", "input": {}}
        result = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": [shot]}
        messages += [
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [result]},
        ]
    tools: Any = [{"name": "screenshot", "input_schema": {"type": "object"}}]
    async with anthropic_sdk(stack) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                model=CLAUDE, max_tokens=64, tools=tools, messages=messages
            )
        message = refused(stack, caught.value, "anthropic_image_count", "messages[202]")
        assert "Too much media: 0 document pages + 101 images > 100" in message

        stack.upstream.reply(claude_answer("Booked."))
        await client.messages.create(
            model="claude-opus-4-6", max_tokens=64, tools=tools, messages=messages
        )
    (received,) = stack.upstream.received
    assert len(received.json()["messages"]) == 203


async def test_claude_code_9375_a_large_screenshot_in_a_21_image_history_is_refused_by_name(
    make_stack: StackFactory,
):
    """anthropics/claude-code #9375 / #49537 (and opencode #12068, jcode #381): a computer-use
    loop's screenshots pile up in the history; once it holds a 21st image, Anthropic answers
    "At least one of the image dimensions exceed max allowed size for many-image requests:
    2000 pixels" for an earlier 2560x1440 one, on every later turn. turngate refuses it before
    sending, naming the call whose result holds it and the count."""
    stack = await make_stack()
    messages: list[Any] = [{"role": "user", "content": "Book the flight."}]
    for n in range(21):
        size = (2560, 1440) if n == 4 else (1280, 800)
        data = base64.b64encode(png_bytes(*size)).decode()
        shot = {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": data},
        }
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": f"toolu_{n}", "name": "screenshot", "input": {}}
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": [shot]}
                ],
            }
        )
    tools: Any = [{"name": "screenshot", "input_schema": {"type": "object"}}]
    async with anthropic_sdk(stack) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                model=CLAUDE, max_tokens=64, tools=tools, messages=messages
            )
    message = refused(stack, caught.value, "anthropic_image_dimensions", "messages[10]", "toolu_4")
    assert "2560x1440 pixels" in message
    assert "max allowed size for many-image requests: 2000 pixels" in message
    assert "the request holds 21 images" in message


async def gemini_refusal(stack: Stack, tools: list[genai_types.Tool]) -> Exception:
    """The 400 google-genai raises for a request declaring ``tools``."""
    client = genai_sdk(stack)
    with pytest.raises(genai_errors.ClientError) as caught:
        await client.aio.models.generate_content(
            model="gemini-2.5-flash",
            contents="Any open bugs?",
            config=genai_types.GenerateContentConfig(tools=tools),  # type: ignore[arg-type]
        )
    await client.aio.aclose()
    assert caught.value.code == 400
    return caught.value


async def gemini_goes_up(stack: Stack, tools: list[genai_types.Tool]) -> None:
    """A request declaring ``tools`` reaches Gemini and its answer is read: one send."""
    text = {"role": "model", "parts": [{"text": "Done."}]}
    stack.upstream.reply(Reply.json({"candidates": [{"content": text, "finishReason": "STOP"}]}))
    client = genai_sdk(stack)
    await client.aio.models.generate_content(
        model="gemini-2.5-flash",
        contents="Any open bugs?",
        config=genai_types.GenerateContentConfig(tools=tools),  # type: ignore[arg-type]
    )
    await client.aio.aclose()
    assert len(stack.upstream.received) == 1


@GENAI_AIOHTTP_WARNING
async def test_gemini_cli_7878_a_function_name_gemini_refuses_is_refused_by_name(
    make_stack: StackFactory,
):
    """google-gemini/gemini-cli #7878 / #2966 (and router-for-me Cli-Proxy-API #120): an MCP
    server's tool declared under a name Gemini refuses (a space, a slash, a leading digit)
    got "function_declarations[N].name: Invalid function name" on every request. turngate
    refuses it before sending, naming the function and Gemini's place for it."""
    stack = await make_stack()
    tools = [
        genai_types.Tool(
            function_declarations=[
                genai_types.FunctionDeclaration(name="get_weather"),
                genai_types.FunctionDeclaration(name="github/search issues"),
            ]
        )
    ]
    error = await gemini_refusal(stack, tools)
    message = refused(stack, error, "gemini_name_pattern", "github/search issues")
    assert "tools[0].function_declarations[1].name: Invalid function name" in message


@GENAI_AIOHTTP_WARNING
async def test_gemini_desktop_7_an_array_parameter_with_no_items_is_refused_by_name(
    make_stack: StackFactory,
):
    """kkrishnan90/gemini-desktop PR #7: tools converted from MCP schemas declared arrays
    without items; Gemini answered "…parameters.properties[tags].items: missing field." on
    every request. turngate refuses it before sending, with Gemini's field path; the same
    array with its items goes up."""
    stack = await make_stack()

    def notes(items: genai_types.Schema | None) -> list[genai_types.Tool]:
        tags = genai_types.Schema(type=genai_types.Type.ARRAY, items=items)
        schema = genai_types.Schema(type=genai_types.Type.OBJECT, properties={"tags": tags})
        add = genai_types.FunctionDeclaration(name="add_notes", parameters=schema)
        return [genai_types.Tool(function_declarations=[add])]

    error = await gemini_refusal(stack, notes(None))
    message = refused(stack, error, "gemini_array_items", "add_notes")
    words = "tools[0].function_declarations[0].parameters.properties[tags].items: missing field."
    assert words in message
    await gemini_goes_up(stack, notes(genai_types.Schema(type=genai_types.Type.STRING)))


@GENAI_AIOHTTP_WARNING
async def test_moltis_747_a_required_property_never_defined_is_refused_by_name(
    make_stack: StackFactory,
):
    """moltis-org/moltis #747 / #849: MCP tools whose array items list required names with no
    properties beside them (the GitHub MCP server's) made Gemini answer
    "GenerateContentRequest.tools[0].function_declarations[0].parameters…required[0]:
    property is not defined" for every request. turngate refuses it before sending, with
    Gemini's field path; with the property declared it goes up."""
    stack = await make_stack()

    def issues(item: genai_types.Schema) -> list[genai_types.Tool]:
        fields = genai_types.Schema(type=genai_types.Type.ARRAY, items=item)
        schema = genai_types.Schema(
            type=genai_types.Type.OBJECT, properties={"issue_fields": fields}
        )
        create = genai_types.FunctionDeclaration(name="create_issue", parameters=schema)
        return [genai_types.Tool(function_declarations=[create])]

    undefined = genai_types.Schema(type=genai_types.Type.OBJECT, required=["summary"])
    error = await gemini_refusal(stack, issues(undefined))
    message = refused(stack, error, "gemini_required_undefined", "create_issue")
    words = (
        "tools[0].function_declarations[0].parameters.properties[issue_fields].items."
        "required[0]: property is not defined"
    )
    assert words in message
    summary = genai_types.Schema(type=genai_types.Type.STRING)
    await gemini_goes_up(
        stack, issues(undefined.model_copy(update={"properties": {"summary": summary}}))
    )


@GENAI_AIOHTTP_WARNING
async def test_claude_code_router_475_an_enum_on_a_schema_with_no_type_is_refused_by_name(
    make_stack: StackFactory,
):
    """musistudio/claude-code-router #475 (and 9router #359, musistudio/llms PR #20): tools
    converted for Gemini carried an enum on a property with no type, and Gemini answered
    "GenerateContentRequest.tools[0].function_declarations[14].parameters.properties
    [truncateMode].enum: only allowed for STRING type" to every request. turngate refuses it
    before sending, with Gemini's field path; typed as STRING it goes up."""
    stack = await make_stack()

    def read(mode: genai_types.Schema) -> list[genai_types.Tool]:
        schema = genai_types.Schema(type=genai_types.Type.OBJECT, properties={"truncateMode": mode})
        declaration = genai_types.FunctionDeclaration(name="read_file", parameters=schema)
        return [genai_types.Tool(function_declarations=[declaration])]

    untyped = genai_types.Schema(enum=["head", "tail"])
    error = await gemini_refusal(stack, read(untyped))
    message = refused(stack, error, "gemini_enum_not_string", "read_file")
    words = "parameters.properties[truncateMode].enum: only allowed for STRING type"
    assert words in message
    await gemini_goes_up(stack, read(untyped.model_copy(update={"type": genai_types.Type.STRING})))


@GENAI_AIOHTTP_WARNING
async def test_cliproxyapi_97_a_json_schema_keyword_gemini_cannot_read_is_refused_by_name(
    make_stack: StackFactory,
):
    """router-for-me/CLIProxyAPI #97 (and qwen-code #1186, jan #5927, zed #44875): MCP tools
    forwarded to Gemini with their JSON Schema as ``parameters`` (``$schema``, zod's
    ``exclusiveMinimum``) got "Invalid JSON payload received. Unknown name "$schema" at
    'tools[0].function_declarations[0].parameters': Cannot find field." for every request.
    turngate refuses it before sending, naming the function and the field; the same schema
    as ``parametersJsonSchema`` goes up. (The Python SDK's Schema type refuses these keywords
    itself; proxies and REST clients send them, so the tools go in raw.)"""
    stack = await make_stack()
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"limit": {"type": "integer", "exclusiveMinimum": 0}},
    }

    async def ask(key: str) -> None:
        declaration = {"name": "list_issues", key: schema}
        tools = {"tools": [{"functionDeclarations": [declaration]}]}
        await genai_raw(stack, tools, ask="Any open bugs?")

    with pytest.raises(genai_errors.ClientError) as caught:
        await ask("parameters")
    assert caught.value.code == 400
    refused(stack, caught.value, "gemini_schema_field", "list_issues")
    words = "Unknown name \"$schema\" at 'tools[0].function_declarations[0].parameters'"
    assert words in str(caught.value.message)
    text = {"role": "model", "parts": [{"text": "None open."}]}
    stack.upstream.reply(Reply.json({"candidates": [{"content": text, "finishReason": "STOP"}]}))
    await ask("parametersJsonSchema")
    (received,) = stack.upstream.received
    declared = received.json()["tools"][0]["functionDeclarations"][0]
    assert declared["parametersJsonSchema"] == schema


@GENAI_AIOHTTP_WARNING
async def test_a_function_declared_twice_for_gemini_is_refused_by_name(
    make_stack: StackFactory,
):
    """Agent projects that register an MCP toolset and the same function by hand (an
    Elastic MCP demo's search_products, reyn's list_actions): "OpenAI silently accepts
    duplicates; Gemini rejects them" with "Duplicate function declaration found:
    search_products", for every request. turngate refuses it before sending, naming both
    places; declared once it goes up."""
    stack = await make_stack()
    search = genai_types.FunctionDeclaration(name="search_products", description="by query")
    toolset = genai_types.Tool(function_declarations=[search])
    by_hand = genai_types.Tool(function_declarations=[search])
    error = await gemini_refusal(stack, [toolset, by_hand])
    message = refused(stack, error, "gemini_function_names_unique", "search_products")
    assert "Duplicate function declaration found: search_products" in message
    await gemini_goes_up(stack, [toolset])


@GENAI_AIOHTTP_WARNING
async def test_a_response_schema_gemini_refuses_is_refused_by_name(make_stack: StackFactory):
    """A schema-constrained call whose responseSchema kept a required name after its
    properties were stripped (a keyword allow-list run over the property names): Gemini
    answered "…response_schema.required[0]: property is not defined" to every such call,
    and the application showed "the reviewer is unavailable". turngate refuses it before
    sending, with Gemini's field path; with the property declared it goes up."""
    stack = await make_stack()

    def verdict(properties: dict[str, genai_types.Schema]) -> genai_types.GenerateContentConfig:
        schema = genai_types.Schema(
            type=genai_types.Type.OBJECT, properties=properties, required=["score"]
        )
        return genai_types.GenerateContentConfig(
            response_mime_type="application/json", response_schema=schema
        )

    client = genai_sdk(stack)
    with pytest.raises(genai_errors.ClientError) as caught:
        await client.aio.models.generate_content(
            model="gemini-2.5-flash", contents="Review this", config=verdict({})
        )
    message = refused(stack, caught.value, "gemini_required_undefined", "the response schema")
    assert "generation_config.response_schema.required[0]: property is not defined" in message
    text = {"role": "model", "parts": [{"text": '{"score": 7}'}]}
    stack.upstream.reply(Reply.json({"candidates": [{"content": text, "finishReason": "STOP"}]}))
    score = genai_types.Schema(type=genai_types.Type.INTEGER)
    answer = await client.aio.models.generate_content(
        model="gemini-2.5-flash", contents="Review this", config=verdict({"score": score})
    )
    await client.aio.aclose()
    assert answer.parsed == {"score": 7}
    assert len(stack.upstream.received) == 1


@GENAI_AIOHTTP_WARNING
async def test_qwen_code_9094_thinking_settings_gemini_refuses_are_refused_by_name(
    make_stack: StackFactory,
):
    """QwenLM/qwen-code PR #9094 (and kilocode PR #5139, eclipse-peon-ai #115, pi #3460): a
    thinking level sent to Gemini 2.5, a level beside a budget, or a budget of 0 on a Pro
    model, and Gemini refused every request ("thinking_level is not supported for this
    model", "You can only set only one of thinking budget and thinking level.", "Budget 0 is
    invalid."). turngate refuses each before sending in Gemini's words; the setting the
    model takes goes up."""
    stack = await make_stack()
    level, budget = genai_types.ThinkingLevel.LOW, 1024
    refusals = [
        ("gemini-2.5-flash", {"thinking_level": level}, "thinking_level is not supported"),
        (
            "gemini-3-flash-preview",
            {"thinking_level": level, "thinking_budget": budget},
            "You can only set only one of thinking budget and thinking level.",
        ),
        ("gemini-2.5-pro", {"thinking_budget": 0}, "This model only works in thinking mode."),
    ]
    client = genai_sdk(stack)
    for model_name, settings, words in refusals:
        config = genai_types.GenerateContentConfig(
            thinking_config=genai_types.ThinkingConfig(**settings)
        )
        with pytest.raises(genai_errors.ClientError) as caught:
            await client.aio.models.generate_content(
                model=model_name, contents="Plan the release.", config=config
            )
        assert words in refused(stack, caught.value, "gemini_thinking_config")
    text = {"role": "model", "parts": [{"text": "Freeze, then tag."}]}
    stack.upstream.reply(Reply.json({"candidates": [{"content": text, "finishReason": "STOP"}]}))
    config = genai_types.GenerateContentConfig(
        thinking_config=genai_types.ThinkingConfig(thinking_budget=budget)
    )
    await client.aio.models.generate_content(
        model="gemini-2.5-flash", contents="Plan the release.", config=config
    )
    await client.aio.aclose()
    (sent,) = stack.upstream.received
    # google-genai writes this config's keys in snake_case; Gemini reads both spellings.
    assert sent.json()["generationConfig"]["thinkingConfig"] == {"thinking_budget": budget}


@GENAI_AIOHTTP_WARNING
async def test_symfony_ai_1777_json_output_beside_functions_on_gemini_2_is_refused_by_name(
    make_stack: StackFactory,
):
    """symfony/ai #1777 / #803 (and ai-manus #101, gemini-balance #264): an agent asked
    Gemini 2.5 for JSON output while declaring its tools, or gave it Google Search beside
    them, and every request failed ("Function calling with a response mime type:
    'application/json' is unsupported", "Tool use with function calling is unsupported").
    Gemini 3 combines them (symfony/ai PR #1023). turngate refuses the combination before
    sending, by the model in the path; the same request to Gemini 3 goes up."""
    stack = await make_stack()
    functions = genai_types.Tool(
        function_declarations=[genai_types.FunctionDeclaration(name="get_weather")]
    )
    search = genai_types.Tool(google_search=genai_types.GoogleSearch())
    json_out = genai_types.GenerateContentConfig(
        tools=[functions], response_mime_type="application/json"
    )
    searching = genai_types.GenerateContentConfig(tools=[search, functions])
    client = genai_sdk(stack)
    for config, words in (
        (json_out, "Function calling with a response mime type: 'application/json'"),
        (searching, "Tool use with function calling is unsupported"),
    ):
        with pytest.raises(genai_errors.ClientError) as caught:
            await client.aio.models.generate_content(
                model="gemini-2.5-flash", contents="Weather in Paris?", config=config
            )
        refused(stack, caught.value, "gemini_tool_combination")
        assert words in str(caught.value.message)
    text = {"role": "model", "parts": [{"text": '{"city": "Paris"}'}]}
    stack.upstream.reply(Reply.json({"candidates": [{"content": text, "finishReason": "STOP"}]}))
    await client.aio.models.generate_content(
        model="gemini-3-flash-preview", contents="Weather in Paris?", config=json_out
    )
    await client.aio.aclose()
    assert len(stack.upstream.received) == 1


@GENAI_AIOHTTP_WARNING
async def test_openai_gemini_63_a_penalty_gemini_2_5_does_not_take_is_refused_by_name(
    make_stack: StackFactory,
):
    """PublicAffairs/openai-gemini #63 (and google-gemini/cookbook #1290, litellm PR #32273):
    an anti-repetition preset kept from Gemini 2.0 Flash sent a presence or frequency
    penalty to Gemini 2.5, and every request failed ("Penalty is not enabled for
    models/gemini-2.5-flash"). turngate refuses it before sending, naming the setting; the
    same preset goes up to Gemini 2.0 Flash, which takes it."""
    stack = await make_stack()
    preset = genai_types.GenerateContentConfig(presence_penalty=0.6, frequency_penalty=0.3)
    client = genai_sdk(stack)
    with pytest.raises(genai_errors.ClientError) as caught:
        await client.aio.models.generate_content(
            model="gemini-2.5-flash", contents="Write a limerick.", config=preset
        )
    message = refused(stack, caught.value, "gemini_penalty")
    assert "gemini-2.5-flash takes no presencePenalty (the request sets 0.6)" in message
    assert '"Penalty is not enabled for this model"' in message
    text = {"role": "model", "parts": [{"text": "There once was a proxy..."}]}
    stack.upstream.reply(Reply.json({"candidates": [{"content": text, "finishReason": "STOP"}]}))
    await client.aio.models.generate_content(
        model="gemini-2.0-flash", contents="Write a limerick.", config=preset
    )
    await client.aio.aclose()
    (sent,) = stack.upstream.received
    assert sent.json()["generationConfig"]["presencePenalty"] == 0.6


async def test_an_openai_tool_sent_to_gemini_is_refused_by_its_entry(make_stack: StackFactory):
    """An agent framework that wraps its MCP tools the OpenAI way for every provider posted
    them to Gemini (over HTTP: google-genai itself would not build the body), and Gemini
    refused every request ("Invalid JSON payload received. Unknown name "type" at
    'tools[0]': Cannot find field."). turngate refuses it before sending, in Gemini's
    envelope, naming the entry; the function declared Gemini's way goes up."""
    stack = await make_stack()
    url = f"{stack.base('/gemini')}/v1beta/models/gemini-2.5-flash:generateContent"
    headers = {"x-goog-api-key": GEMINI_KEY}
    ask = {"role": "user", "parts": [{"text": "Weather in Paris?"}]}
    openai_tool = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
    declared = {"functionDeclarations": [{"name": "get_weather"}]}
    text = {"role": "model", "parts": [{"text": "Sunny."}]}
    stack.upstream.reply(Reply.json({"candidates": [{"content": text, "finishReason": "STOP"}]}))
    async with aiohttp.ClientSession() as http:
        body = {"contents": [ask], "tools": [openai_tool]}
        async with http.post(url, json=body, headers=headers) as refusal:
            assert refusal.status == 400
            assert refusal.headers["Turngate-Rejection"] == "gemini_tool_shape"
            error = (await refusal.json())["error"]
        assert error["status"] == "INVALID_ARGUMENT"
        assert "Unknown name \"type\" at 'tools[0]': Cannot find field." in error["message"]
        async with http.post(url, json={**body, "tools": [declared]}, headers=headers) as ok:
            assert ok.status == 200
    assert len(stack.upstream.received) == 1


@GENAI_AIOHTTP_WARNING
async def test_gemini_cli_19083_more_than_512_functions_are_refused_by_count(
    make_stack: StackFactory,
):
    """google-gemini/gemini-cli #19083 / #25440: with many MCP servers enabled, every request
    got "At most 512 function declarations can be specified". turngate refuses it before
    sending, with the count."""
    stack = await make_stack()
    declarations = [genai_types.FunctionDeclaration(name=f"mcp_tool_{n}") for n in range(530)]
    tools = [genai_types.Tool(function_declarations=declarations)]
    error = await gemini_refusal(stack, tools)
    message = refused(stack, error, "gemini_function_count", "declares 530 functions")
    assert "At most 512 function declarations can be specified" in message
