"""Small helpers shared by the proxy tests."""

from __future__ import annotations

from typing import Any

import aiohttp
import anthropic
import openai
import orjson
from google import genai
from google.genai import types

from tests.proxy.fake_upstream import Reply
from tests.proxy.stack import ANTHROPIC_KEY, GEMINI_KEY, OPENAI_KEY, Stack

JSON = {"Content-Type": "application/json"}

# A minimal valid Chat completion, for tests about everything but the answer.
CHAT_ANSWER = Reply.json(
    {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "hello"},
            }
        ],
    }
)

# A function the Chat tests declare (``{"type": "function", "function": WEATHER}``).
WEATHER = {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def openai_sdk(stack: Stack, **headers: str) -> openai.AsyncOpenAI:
    """The async openai SDK aimed at ``stack``, with no retries of its own: what a test sees
    is what turngate answered."""
    return openai.AsyncOpenAI(
        api_key=OPENAI_KEY,
        base_url=stack.base("/openai/v1"),
        max_retries=0,
        default_headers=headers or None,
    )


def genai_sdk(stack: Stack, **headers: str) -> genai.Client:
    """The google-genai client aimed at ``stack`` (Gemini API, v1beta). Keep a reference to
    it while it is used: a collected client closes its connection pool."""
    options = types.HttpOptions(
        base_url=stack.base("/gemini"), api_version="v1beta", headers=headers or None
    )
    return genai.Client(api_key=GEMINI_KEY, http_options=options)


async def genai_raw(
    stack: Stack, body: dict[str, Any], *, model: str = "gemini-2.5-flash", ask: str = "Hi"
) -> None:
    """A google-genai call asking ``ask`` with ``body`` merged into what it sends
    (``extra_body``): the fields its own types refuse, as REST clients and proxies send them."""
    raw = types.HttpOptions(extra_body=body)
    client = genai_sdk(stack)
    try:
        await client.aio.models.generate_content(
            model=model, contents=ask, config=types.GenerateContentConfig(http_options=raw)
        )
    finally:
        await client.aio.aclose()


def anthropic_sdk(stack: Stack, **headers: str) -> anthropic.AsyncAnthropic:
    """The async anthropic SDK aimed at ``stack``, with no retries of its own."""
    return anthropic.AsyncAnthropic(
        api_key=ANTHROPIC_KEY,
        base_url=stack.base("/anthropic"),
        max_retries=0,
        default_headers=headers or None,
    )


def claude_answer(text: str, message_id: str = "msg_test") -> Reply:
    """A minimal valid Anthropic Messages answer: one text block."""
    return Reply.json(
        {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": "claude-haiku-4-5-20251001",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 40, "output_tokens": 6},
        }
    )


def claude_stream(message: dict[str, Any]) -> Reply:
    """A Messages answer (its non-streamed form) streamed as Anthropic does: text in a
    ``text_delta``, a call's input in one ``input_json_delta``, a compaction whole in one
    ``compaction_delta``, any other block whole in its ``content_block_start``."""
    start = {**message, "content": [], "stop_reason": None}
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for index, block in enumerate(message["content"]):
        opened, delta = block, None
        if block["type"] == "text":
            opened, delta = {**block, "text": ""}, {"type": "text_delta", "text": block["text"]}
        elif block["type"] == "tool_use":
            partial = orjson.dumps(block["input"]).decode()
            opened = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": partial}
        elif block["type"] == "compaction":
            opened = {"type": "compaction"}
            delta = {"type": "compaction_delta", "content": block["content"]}
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": opened},
            )
        )
        if delta is not None:
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    usage = {"output_tokens": message["usage"]["output_tokens"]}
    events += [
        ("message_delta", {"type": "message_delta", "delta": stop, "usage": usage}),
        ("message_stop", {"type": "message_stop"}),
    ]
    body = b"".join(
        b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
        for name, data in events
    )
    return Reply(body=body, content_type="text/event-stream")


async def post(
    stack: Stack,
    path: str,
    body: bytes | dict[str, Any],
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    all_headers = {**JSON, **(headers or {})}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            stack.url + path, data=data, headers=all_headers, allow_redirects=False
        ) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.read()


async def get(stack: Stack, path: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(stack.url + path) as resp:
        return resp.status, orjson.loads(await resp.read())


async def operation(stack: Stack, operation_id: str) -> dict[str, Any]:
    status, record = await get(stack, f"/turngate/v1/operations/{operation_id}")
    assert status == 200, record
    assert isinstance(record, dict)
    return record


def states(record: dict[str, Any]) -> list[str]:
    return [change["state"] for change in record["history"]]


def kept_answer_reads(stack: Stack) -> list[str]:
    """The operations whose kept answer ``stack`` reads from its store from now on (the
    replies memory's fallback for what this process did not relay), in order."""
    from turngate.proxy.app import SERVICES

    replies = stack.app[SERVICES].replies
    read = replies._kept_turn
    reads: list[str] = []

    async def counted(store: Any, api: Any, anchor: str, *args: Any, **kwargs: Any) -> Any:
        reads.append(anchor)
        return await read(store, api, anchor, *args, **kwargs)

    replies._kept_turn = counted  # type: ignore[method-assign]
    return reads
