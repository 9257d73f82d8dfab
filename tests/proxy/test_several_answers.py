"""Requests for several alternative answers (Chat ``n``, Gemini ``candidateCount``) through
the official SDKs. turngate commits one assistant turn per request: a stream of several is
refused before it is sent (it used to be sent, then broken off), and a whole answer whose
other alternatives call tools is never delivered, as only the first would have been checked.
Several alternatives of text only still pass."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from google import genai
from google.genai import errors, types

from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import WEATHER, openai_sdk
from tests.proxy.sdk_support import GENAI_AIOHTTP_WARNING
from tests.proxy.stack import GEMINI_KEY, Stack

QUESTION = [{"role": "user", "content": "Weather in Paris?"}]
HALF_CALL = {
    "id": "call_2",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Par'},
}


def chat_answer(*messages: dict[str, Any]) -> Reply:
    choices = [
        {"index": i, "finish_reason": "stop", "message": {"role": "assistant", **m}}
        for i, m in enumerate(messages)
    ]
    return Reply.json(
        {"id": "chatcmpl-n", "object": "chat.completion", "model": "gpt-4o", "choices": choices}
    )


async def test_a_chat_stream_of_two_choices_is_refused_before_it_is_sent(make_stack: Any) -> None:
    stack: Stack = await make_stack()
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as raised:
            await client.chat.completions.create(
                model="gpt-4o", messages=QUESTION, n=2, stream=True
            )  # type: ignore[arg-type]
    assert raised.value.code == "unsupported_in_target"
    assert "n=2" in raised.value.message
    assert stack.upstream.received == []


async def test_a_second_choice_with_a_tool_call_is_never_delivered(make_stack: Any) -> None:
    stack: Stack = await make_stack()
    stack.upstream.reply(
        chat_answer({"content": "Sunny."}, {"content": None, "tool_calls": [HALF_CALL]})
    )
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.APIStatusError) as raised:
            await client.chat.completions.create(
                model="gpt-4o",
                messages=QUESTION,  # type: ignore[arg-type]
                n=2,
                tools=[{"type": "function", "function": WEATHER}],  # type: ignore[list-item]
            )
    assert raised.value.status_code == 502
    assert raised.value.response.headers["Turngate-Rejection"] == "unsupported_in_target"
    assert "get_weather" not in raised.value.response.text


async def test_two_choices_of_text_still_pass(make_stack: Any) -> None:
    stack: Stack = await make_stack()
    stack.upstream.reply(chat_answer({"content": "Sunny."}, {"content": "Warm."}))
    async with openai_sdk(stack) as client:
        answer = await client.chat.completions.create(model="gpt-4o", messages=QUESTION, n=2)  # type: ignore[arg-type]
    assert [c.message.content for c in answer.choices] == ["Sunny.", "Warm."]


async def read_stream(client: genai.Client) -> None:
    stream = await client.aio.models.generate_content_stream(
        model="gemini-2.5-flash",
        contents="Weather in Paris?",
        config=types.GenerateContentConfig(candidate_count=2),
    )
    async for _chunk in stream:
        pass


def gemini(stack: Stack) -> genai.Client:
    return genai.Client(
        api_key=GEMINI_KEY,
        http_options=types.HttpOptions(base_url=stack.base("/gemini"), api_version="v1beta"),
    )


@GENAI_AIOHTTP_WARNING
async def test_a_gemini_stream_of_two_candidates_is_refused_before_it_is_sent(
    make_stack: Any,
) -> None:
    stack: Stack = await make_stack()
    client = gemini(stack)
    try:
        with pytest.raises(errors.ClientError) as raised:
            await read_stream(client)
    finally:
        await client.aio.aclose()
    assert raised.value.code == 400
    assert "candidateCount=2" in str(raised.value)
    assert stack.upstream.received == []


@GENAI_AIOHTTP_WARNING
async def test_a_second_gemini_candidate_calling_a_function_is_never_delivered(
    make_stack: Any,
) -> None:
    stack: Stack = await make_stack()
    call = {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}
    stack.upstream.reply(
        Reply.json(
            {
                "candidates": [
                    {"index": 0, "content": {"role": "model", "parts": [{"text": "Sunny."}]}},
                    {"index": 1, "content": {"role": "model", "parts": [call]}},
                ]
            }
        )
    )
    client = gemini(stack)
    try:
        with pytest.raises(errors.ServerError) as raised:
            await client.aio.models.generate_content(
                model="gemini-2.5-flash",
                contents="Weather in Paris?",
                config=types.GenerateContentConfig(candidate_count=2),
            )
    finally:
        await client.aio.aclose()
    assert raised.value.code == 502
    assert "several candidates with function calls" in str(raised.value)
