"""The official openai SDK (Chat and Responses, sync and async) after a base-URL swap."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import orjson
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState

from tests.adapters.test_stream_encoders import Reading, sdk_read
from tests.fixtures_dir import COUNTS, FIXTURES_DIR, FIXTURES_PRESENT, load_json
from tests.graph.test_validator_table import TABLE
from tests.proxy.conftest import StackFactory
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import CHAT_ANSWER
from tests.proxy.sdk_support import MODES, call, consume, requires_adapter, sdk_kwargs
from tests.proxy.stack import OPENAI_KEY, Stack

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")

CHAT_CONVERSATIONS = [
    "openai-chat/pai-nonstream-after-2-tool-results.json",
    "openai-chat/pai-multi-agent-history.json",
    "openai-chat/pai-after-parallel-tool-results.sse",
    "openai-chat/pai-long-tool-args.sse",
]
RESPONSES_CONVERSATIONS = [
    "openai-responses/pai-nonstream-after-function-output.json",
    "openai-responses/pai-function-call-turn2.sse",
    "openai-responses/pai-phase-commentary-turn2.sse",
]


@pytest.fixture(params=MODES)
async def client(request: pytest.FixtureRequest, make_stack: StackFactory) -> AsyncIterator[Any]:
    stack = await make_stack(record_bodies=True)
    base = stack.base("/openai/v1")
    if request.param == "sync":
        sync = openai.OpenAI(api_key=OPENAI_KEY, base_url=base, max_retries=0)
        sync.stack = stack  # type: ignore[attr-defined]
        sync.mode = "sync"  # type: ignore[attr-defined]
        yield sync
        sync.close()
    else:
        async_client = openai.AsyncOpenAI(api_key=OPENAI_KEY, base_url=base, max_retries=0)
        async_client.stack = stack  # type: ignore[attr-defined]
        async_client.mode = "async"  # type: ignore[attr-defined]
        yield async_client
        await async_client.close()


def request_of(answer: str) -> dict[str, Any]:
    stem = answer.rsplit(".", 1)[0]
    body = load_json(FIXTURES_DIR / f"{stem}.request.json")
    assert isinstance(body, dict)
    return body


def assert_sent_as_received(stack: Stack, expected: dict[str, Any]) -> None:
    (received,) = stack.upstream.received
    (client_body,) = stack.client_bodies
    # turngate sends the client's own bytes; the SDK sent the conversation it was given.
    assert received.body == client_body
    assert received.json() == orjson.loads(client_body)
    sent = received.json()
    sent.pop("stream", None)
    expected = dict(expected)
    expected.pop("stream", None)
    assert sent == expected


def _accumulated(chunks: list[Any]) -> Reading:
    """What the SDK's own accumulator makes of the chunks, as ``sdk_read`` reports it."""
    reading = Reading()
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    for chunk in chunks:
        if chunk.usage is not None:
            reading.usage = chunk.usage.model_dump()
        if chunk.choices:
            state.handle_chunk(chunk)
    message = state.get_final_completion().choices[0].message
    reading.text = message.content or ""
    for tool_call in message.tool_calls or []:
        function = tool_call.function
        reading.calls.append((tool_call.id, function.name, orjson.loads(function.arguments)))
    return reading


def _partial_tool_calls(chunks: list[Any]) -> list[Any]:
    """Tool-call deltas that are not a whole call: id, name and one JSON object of arguments."""
    partial = []
    for chunk in chunks:
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                function = delta.function
                whole = bool(delta.id and function and function.name and function.arguments)
                if not (whole and isinstance(orjson.loads(function.arguments), dict)):
                    partial.append(delta)
    return partial


@pytest.mark.parametrize("answer", CHAT_CONVERSATIONS)
async def test_chat_tool_conversations_pass_through(client: Any, answer: str):
    stack: Stack = client.stack
    stack.upstream.reply(Reply.fixture(answer))
    body = request_of(answer)
    body["stream"] = answer.endswith(".sse")
    create = client.chat.completions.create
    result = await call(client.mode, create, **sdk_kwargs(create, body))
    if body["stream"]:
        chunks = await consume(client.mode, result)
        # Tool calls arrive whole, so the chunks differ from the recording's; the message the
        # SDK accumulates must not: the same as reading the upstream's stream directly.
        direct = sdk_read("openai_chat", (FIXTURES_DIR / answer).read_bytes())
        assert direct.error is None
        assert direct.calls  # these recordings stream tool calls: what the check is about
        assert _accumulated(chunks) == direct
        assert _partial_tool_calls(chunks) == []
    else:
        assert result.id == load_json(FIXTURES_DIR / answer)["id"]  # type: ignore[index]
    assert_sent_as_received(stack, body)
    COUNTS["SDK conversations through turngate (openai chat)"] += 1


@pytest.mark.parametrize(
    ("request_body", "rule"),
    [pytest.param(b, r, id=name) for name, b, _s, r in TABLE],
)
async def test_chat_invalid_sequences_raise_bad_request_and_send_nothing(
    client: Any, request_body: dict[str, Any], rule: str
):
    create = client.chat.completions.create
    with pytest.raises(openai.BadRequestError) as raised:
        await call(client.mode, create, **sdk_kwargs(create, request_body))
    assert raised.value.status_code == 400
    assert raised.value.code == rule
    assert rule in str(raised.value)
    assert raised.value.response.headers["Turngate-Rejection"] == rule
    assert client.stack.upstream.received == []
    COUNTS["SDK refusals with zero upstream sends (openai chat)"] += 1


@requires_adapter("openai_responses")
@pytest.mark.parametrize("answer", RESPONSES_CONVERSATIONS)
async def test_responses_tool_conversations_pass_through(client: Any, answer: str):
    stack: Stack = client.stack
    stack.upstream.reply(Reply.fixture(answer))
    body = request_of(answer)
    body["stream"] = answer.endswith(".sse")
    create = client.responses.create
    result = await call(client.mode, create, **sdk_kwargs(create, body))
    if body["stream"]:
        events = await consume(client.mode, result)
        assert events[-1].type == "response.completed"
    else:
        assert result.id == load_json(FIXTURES_DIR / answer)["id"]  # type: ignore[index]
    assert_sent_as_received(stack, body)
    COUNTS["SDK conversations through turngate (openai responses)"] += 1


def _call(call_id: str, arguments: str = '{"city":"Paris"}') -> dict[str, Any]:
    return {
        "type": "function_call",
        "call_id": call_id,
        "name": "get_weather",
        "arguments": arguments,
    }


def _output(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "sunny"}


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


RESPONSES_TABLE = [
    ("orphaned output", [_user("hi"), _output("call_7")], "orphan_result"),
    (
        "two outputs for one call",
        [_user("hi"), _call("call_1"), _output("call_1"), _output("call_1")],
        "duplicate_result",
    ),
    ("a call with no output yet", [_user("hi"), _call("call_1")], "missing_result"),
    (
        "duplicate call ids in one turn",
        [_user("hi"), _call("call_1"), _call("call_1"), _output("call_1")],
        "duplicate_call_id",
    ),
    (
        "an output separated from its call by a user message",
        [_user("hi"), _call("call_1"), _user("wait"), _output("call_1")],
        "misplaced_result",
    ),
    (
        "an output before its call",
        [_user("hi"), _output("call_1"), _call("call_1")],
        "orphan_result",
    ),
    (
        "truncated arguments",
        [_user("hi"), _call("call_1", '{"city": "Par'), _output("call_1")],
        "incomplete_arguments",
    ),
    ("an unknown item type", [_user("hi"), {"type": "hologram", "data": {}}], "unknown_kind"),
    (
        "one item id sent twice (continue #10200)",
        [
            _user("hi"),
            {**_call("call_1"), "id": "fc_1"},
            _output("call_1"),
            {**_call("call_2"), "id": "fc_1"},
            _output("call_2"),
        ],
        "responses_duplicate_item",
    ),
    (
        "a call's call_id sent as its item id (nodetool PR #4252)",
        [_user("hi"), {**_call("call_1"), "id": "call_1"}, _output("call_1")],
        "responses_item_id_prefix",
    ),
    (
        "an answer kept under an id of the client's own (codex #33176)",
        [
            _user("hi"),
            {
                "type": "message",
                "role": "assistant",
                "id": "019f629b-43ee-7a82-acb1-3071dbffbdad",
                "content": [{"type": "output_text", "text": "Hello."}],
            },
            _user("again"),
        ],
        "responses_item_id_prefix",
    ),
    (
        "an assistant turn sent back as input_text (a history converted with one part type)",
        [
            _user("hi"),
            {"role": "assistant", "content": [{"type": "input_text", "text": "Hello."}]},
            _user("again"),
        ],
        "responses_part_type",
    ),
    (
        "a tool's output returned as output_text (Codex CLI re-serialising an MCP result)",
        [
            _user("hi"),
            _call("call_1"),
            {
                "type": "function_call_output",
                "call_id": "call_1",
                "output": [{"type": "output_text", "text": "sunny"}],
            },
        ],
        "responses_part_type",
    ),
]


@requires_adapter("openai_responses")
@pytest.mark.parametrize(
    ("items", "rule"), [pytest.param(i, r, id=name) for name, i, r in RESPONSES_TABLE]
)
async def test_responses_invalid_sequences_raise_bad_request_and_send_nothing(
    client: Any, items: list[dict[str, Any]], rule: str
):
    tools = [
        {
            "type": "function",
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    with pytest.raises(openai.BadRequestError) as raised:
        await call(client.mode, client.responses.create, model="gpt-4o", input=items, tools=tools)
    assert raised.value.status_code == 400
    assert raised.value.code == rule
    assert rule in str(raised.value)
    assert client.stack.upstream.received == []
    COUNTS["SDK refusals with zero upstream sends (openai responses)"] += 1


@requires_adapter("openai_responses")
async def test_a_response_continued_from_a_response_and_a_conversation_is_refused(client: Any):
    """previous_response_id beside conversation: OpenAI holds the history either way and
    refuses the pair; turngate refuses it before sending, and either one alone goes up."""
    create = client.responses.create
    both = {"previous_response_id": "resp_1", "conversation": "conv_1"}
    with pytest.raises(openai.BadRequestError) as raised:
        await call(client.mode, create, model="gpt-4o", input="And tomorrow?", **both)
    assert raised.value.code == "responses_history_source"
    assert "'previous_response_id' or 'conversation'" in str(raised.value)
    assert client.stack.upstream.received == []
    answer = "openai-responses/pai-nonstream-after-function-output.json"
    client.stack.upstream.reply(Reply.fixture(answer))
    await call(client.mode, create, model="gpt-4o", input="And tomorrow?", conversation="conv_1")
    (sent,) = client.stack.upstream.received
    assert sent.json()["conversation"] == "conv_1"


async def test_a_streamed_audio_answer_reaches_the_sdk_and_is_the_next_history(stack: Stack):
    # gpt-4o-audio: the answer streams its audio (data, transcript) in ``delta.audio``; the
    # next request names that audio by id alone, as after a non-streamed answer.
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        body = {"id": "chatcmpl-audio", "object": "chat.completion.chunk", "created": 1}
        body |= {"model": "gpt-4o-audio-preview", "choices": [choice]}
        return b"data: " + orjson.dumps(body) + b"\n\n"

    frames = [
        chunk({"role": "assistant", "audio": {"id": "audio_abc", "transcript": "Hel"}}),
        chunk({"audio": {"data": "UklGRiQAAABXQVZF", "transcript": "lo."}}),
        chunk({"audio": {"expires_at": 1_900_000_000}}),
        chunk({}, "stop"),
    ]
    streamed = Reply(body=b"".join(frames) + b"data: [DONE]\n\n", content_type="text/event-stream")
    stack.upstream.replies(streamed, CHAT_ANSWER)
    headers = {"Turngate-Conversation-Id": "audio-1"}
    sdk = openai.AsyncOpenAI(
        api_key=OPENAI_KEY,
        base_url=stack.base("/openai/v1"),
        max_retries=0,
        default_headers=headers,
    )
    asked: dict[str, Any] = {
        "model": "gpt-4o-audio-preview",
        "modalities": ["text", "audio"],
        "audio": {"voice": "alloy", "format": "pcm16"},
    }
    question = {"role": "user", "content": "Say hello."}
    transcript, audio_id = "", None
    async with sdk:
        stream = await sdk.chat.completions.create(**asked, messages=[question], stream=True)
        async for piece in stream:
            audio = getattr(piece.choices[0].delta, "audio", None) if piece.choices else None
            if audio:
                transcript += audio.transcript or ""
                audio_id = audio.id or audio_id
        assert (transcript, audio_id) == ("Hello.", "audio_abc")
        history = [question, {"role": "assistant", "audio": {"id": audio_id}}]
        history.append({"role": "user", "content": "Again."})
        await sdk.chat.completions.create(**asked, messages=history)
    assert len(stack.upstream.received) == 2
