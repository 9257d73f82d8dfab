"""What a declared schema allows is what the provider allows: no valid call is refused.

A schema's ``format`` is an annotation, not a reason to refuse a tool call.

No provider checks string formats in what its model generates (outside OpenAI's strict
mode, which guarantees them itself), and a tool receiving ``"2025-03-14T09:30:00"`` for a
``date-time`` parses it fine. Refusing the answer for a timezone-less timestamp or a
scheme-less URL would break working agents with a 502, so turngate checks types,
required fields and enums, and not formats (the provider's own validation, where it
exists, is the authority on those). And Gemini's OpenAPI schemas mean ``nullable: true``
as "or null", which JSON Schema spells in the type.
"""

from __future__ import annotations

from typing import Any

import openai
import orjson
import pytest
from google import genai
from google.genai import types

from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import openai_sdk
from tests.proxy.sdk_support import GENAI_AIOHTTP_WARNING
from tests.proxy.stack import GEMINI_KEY, Stack

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


# As the Gemini docs write a declaration: OpenAPI types, an optional field ``nullable``.
GET_WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="The weather in a city.",
    parameters=types.Schema(
        type=types.Type.OBJECT,
        properties={
            "city": types.Schema(type=types.Type.STRING),
            "unit": types.Schema(type=types.Type.STRING, nullable=True, enum=["C", "F"]),
        },
        required=["city"],
    ),
)


@GENAI_AIOHTTP_WARNING
@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_gemini_nullable_fields_take_null(stack: Stack, streamed: bool):
    # ``{"type": "STRING", "nullable": true}``: a model's null there is a valid call.
    arguments = {"city": "Oslo", "unit": None}
    part = {"functionCall": {"name": "get_weather", "args": arguments}}
    chunk = {
        "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP"}],
        "modelVersion": "gemini-2.5-flash",
        "responseId": "nullable-1",
    }
    if streamed:
        stack.upstream.reply(
            Reply(
                body=b"data: " + orjson.dumps(chunk) + b"\r\n\r\n", content_type="text/event-stream"
            )
        )
    else:
        stack.upstream.reply(Reply.json(chunk))
    sdk = genai.Client(
        api_key=GEMINI_KEY,
        http_options=types.HttpOptions(base_url=stack.base("/gemini"), api_version="v1beta"),
    )
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[GET_WEATHER])])
    ask = {"model": "gemini-2.5-flash", "contents": "Weather in Oslo?", "config": config}
    if streamed:
        stream = await sdk.aio.models.generate_content_stream(**ask)
        calls = [c for piece in [c async for c in stream] for c in piece.function_calls or []]
    else:
        calls = (await sdk.aio.models.generate_content(**ask)).function_calls or []
    await sdk.aio.aclose()
    (call,) = calls
    assert call.args == arguments
    sent = stack.upstream.received[0].json()
    unit = sent["tools"][0]["functionDeclarations"][0]["parameters"]["properties"]["unit"]
    assert unit == {"type": "STRING", "nullable": True, "enum": ["C", "F"]}
