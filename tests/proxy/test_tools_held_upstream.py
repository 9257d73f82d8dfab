"""Requests whose tools or history the provider holds: Gemini's ``cachedContent``, a stored
OpenAI Responses ``prompt``.

Gemini refuses a request that names a cache and also sets ``tools``, ``toolConfig`` or
``systemInstruction``: an agent that caches its function declarations sends none, and its
cache may end with the model's function call that the request's first content answers.
turngate sees only what the request carries, so it judges only that: a call to a tool the
request cannot show is checked as one JSON object, not refused as undeclared, and a first
function response answers the cache, not nothing. A stored Responses prompt carries its own
tools (as the Assistants it replaces did), so the same holds for calls answering one.
"""

from __future__ import annotations

from typing import Any

import openai
import orjson
import pytest
from google import genai
from google.genai import errors, types

from tests.fixtures_dir import FIXTURES_PRESENT
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import genai_sdk, openai_sdk
from tests.proxy.sdk_support import GENAI_AIOHTTP_WARNING
from tests.proxy.stack import Stack

pytestmark = [GENAI_AIOHTTP_WARNING]

CACHE = "cachedContents/agent-tools-7f3a"
CALL = {"functionCall": {"name": "lookup_order", "args": {"order_id": "A-77"}}}


def gemini_answer(*parts: dict[str, Any], streamed: bool) -> Reply:
    chunk = {
        "candidates": [
            {"content": {"role": "model", "parts": list(parts)}, "finishReason": "STOP"}
        ],
        "modelVersion": "gemini-2.5-flash",
        "responseId": "cached-1",
    }
    if streamed:
        return Reply(
            body=b"data: " + orjson.dumps(chunk) + b"\r\n\r\n", content_type="text/event-stream"
        )
    return Reply.json(chunk)


def sdk_for(stack: Stack) -> genai.Client:
    return genai_sdk(stack)


async def generate(
    sdk: genai.Client, contents: Any, streamed: bool, **config: Any
) -> tuple[list[types.FunctionCall], str]:
    """The function calls and the text the application gets, from all chunks of a stream."""
    ask = {
        "model": "gemini-2.5-flash",
        "contents": contents,
        "config": types.GenerateContentConfig(**config),
    }
    if streamed:
        stream = await sdk.aio.models.generate_content_stream(**ask)
        chunks = [chunk async for chunk in stream]
    else:
        chunks = [await sdk.aio.models.generate_content(**ask)]
    calls = [call for chunk in chunks for call in chunk.function_calls or []]
    return calls, "".join(chunk.text or "" for chunk in chunks)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_a_call_to_a_cached_tool_reaches_the_application(stack: Stack, streamed: bool):
    stack.upstream.reply(gemini_answer(CALL, streamed=streamed))
    sdk = sdk_for(stack)
    calls, _text = await generate(sdk, "Where is order A-77?", streamed, cached_content=CACHE)
    await sdk.aio.aclose()
    (call,) = calls
    assert (call.name, call.args) == ("lookup_order", {"order_id": "A-77"})
    assert stack.upstream.received[0].json()["cachedContent"] == CACHE


async def test_without_a_cache_an_undeclared_tool_is_still_refused(stack: Stack):
    stack.upstream.reply(gemini_answer(CALL, streamed=False))
    sdk = sdk_for(stack)
    with pytest.raises(errors.ServerError) as raised:
        await generate(sdk, "Where is order A-77?", False)
    await sdk.aio.aclose()
    assert raised.value.code == 502
    assert "a tool not declared" in str(raised.value)


async def test_a_response_to_the_caches_last_call_is_sent(stack: Stack):
    # The cache holds the user's question and the model's call; the request answers it.
    stack.upstream.reply(gemini_answer({"text": "Order A-77 ships tomorrow."}, streamed=False))
    sdk = sdk_for(stack)
    response = {"functionResponse": {"name": "lookup_order", "response": {"eta": "tomorrow"}}}
    _calls, text = await generate(
        sdk, [{"role": "user", "parts": [response]}], False, cached_content=CACHE
    )
    await sdk.aio.aclose()
    assert text == "Order A-77 ships tomorrow."
    (received,) = stack.upstream.received
    assert received.json()["contents"] == [{"role": "user", "parts": [response]}]


async def test_without_a_cache_that_response_answers_nothing(stack: Stack):
    sdk = sdk_for(stack)
    response = {"functionResponse": {"name": "lookup_order", "response": {"eta": "tomorrow"}}}
    with pytest.raises(errors.ClientError) as raised:
        await generate(sdk, [{"role": "user", "parts": [response]}], False)
    await sdk.aio.aclose()
    assert raised.value.code == 400
    assert stack.upstream.received == []


@pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")
@pytest.mark.parametrize("stored_prompt", [True, False], ids=["stored-prompt", "no-prompt"])
async def test_a_call_to_a_stored_prompts_tool(stack: Stack, stored_prompt: bool):
    # The recorded answer calls get_capital; this request declares no tools of its own.
    stack.upstream.reply(Reply.fixture("openai-responses/pai-nonstream-function-call.json"))
    extra = {"prompt": {"id": "pmpt_capitals", "version": "3"}} if stored_prompt else {}
    async with openai_sdk(stack) as sdk:
        ask = sdk.responses.create(model="gpt-4o", input="Capital of PotatoLand?", **extra)
        if not stored_prompt:
            with pytest.raises(openai.InternalServerError) as raised:
                await ask
            assert "a tool not declared" in str(raised.value)
            return
        answer = await ask
    (call,) = answer.output
    assert (call.type, call.name) == ("function_call", "get_capital")
