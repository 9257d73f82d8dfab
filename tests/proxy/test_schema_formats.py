"""A declared schema's ``format`` is an annotation, not a reason to refuse a tool call.

No provider checks string formats in what its model generates (outside OpenAI's strict
mode, which guarantees them itself), and a tool receiving ``"2025-03-14T09:30:00"`` for a
``date-time`` parses it fine. Refusing the answer for a timezone-less timestamp or a
scheme-less URL would break working agents with a 502, so turngate checks types,
required fields and enums, and not formats (the provider's own validation, where it
exists, is the authority on those).
"""

from __future__ import annotations

from typing import Any

import openai
import orjson
import pytest

from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import openai_sdk
from tests.proxy.stack import Stack

BOOK = {
    "name": "book_meeting",
    "parameters": {
        "type": "object",
        "properties": {
            "start": {"type": "string", "format": "date-time"},
            "link": {"type": "string", "format": "uri"},
            "host": {"type": "string", "format": "email"},
            "room": {"type": "integer"},
        },
        "required": ["start", "room"],
    },
}
# What models write for such fields: none of these is RFC 3339, a URI or an address.
LOOSE = {
    "start": "2025-03-14T09:30:00",
    "link": "meet.example.com/r/7",
    "host": "ops team",
    "room": 4,
}
MESSAGES = [{"role": "user", "content": "Book room 4 at 9:30 tomorrow."}]


def answer(arguments: dict[str, Any], streamed: bool) -> Reply:
    call = {"id": "call_book", "type": "function", "function": {"name": "book_meeting"}}
    text = orjson.dumps(arguments).decode()
    if not streamed:
        call["function"]["arguments"] = text  # type: ignore[index]
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        choice = {"index": 0, "finish_reason": "tool_calls", "message": message}
        return Reply.json(
            {
                "id": "chatcmpl-f",
                "object": "chat.completion",
                "model": "gpt-4o",
                "choices": [choice],
            }
        )
    head = {**call, "index": 0, "function": {"name": "book_meeting", "arguments": ""}}
    chunks = [{"tool_calls": [head]}]
    chunks += [
        {"tool_calls": [{"index": 0, "function": {"arguments": text[i : i + 7]}}]}
        for i in range(0, len(text), 7)
    ]
    events = [
        {
            "id": "chatcmpl-f",
            "object": "chat.completion.chunk",
            "model": "gpt-4o",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
        }
        for delta in chunks
    ]
    events.append(
        {
            "id": "chatcmpl-f",
            "object": "chat.completion.chunk",
            "model": "gpt-4o",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
        }
    )
    body = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    return Reply(body=body, content_type="text/event-stream")


async def tool_call_arguments(stack: Stack, streamed: bool) -> str:
    """The arguments of the one tool call the application gets, streamed or whole."""
    tools: Any = [{"type": "function", "function": BOOK}]
    async with openai_sdk(stack) as sdk:
        if not streamed:
            result = await sdk.chat.completions.create(
                model="gpt-4o", messages=MESSAGES, tools=tools
            )
            (call,) = result.choices[0].message.tool_calls or []
            return call.function.arguments  # type: ignore[union-attr]
        stream = await sdk.chat.completions.create(
            model="gpt-4o", messages=MESSAGES, tools=tools, stream=True
        )
        return "".join(
            [
                call.function.arguments
                async for chunk in stream
                for call in chunk.choices[0].delta.tool_calls or []
                if call.function and call.function.arguments
            ]
        )


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_loose_formats_reach_the_application(stack: Stack, streamed: bool):
    stack.upstream.reply(answer(LOOSE, streamed))
    assert orjson.loads(await tool_call_arguments(stack, streamed)) == LOOSE


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_the_rest_of_the_schema_is_still_enforced(stack: Stack, streamed: bool):
    stack.upstream.reply(answer({**LOOSE, "room": "four"}, streamed))
    with pytest.raises(openai.APIError) as raised:
        await tool_call_arguments(stack, streamed)
    assert "data.room must be integer" in str(raised.value)
