"""The official SDKs' own agent loops through turngate, under a conversation id.

Each SDK can run the tool loop itself: openai's ``ResponsesToolRunner`` (streamed, with
eager execution of a call as soon as its item is done), google-genai's automatic function
calling in a chat, and anthropic's tool runner (threaded: tests/proxy/
test_anthropic_threads.py). Each tool runs once, every request of the loop goes through,
and the conversation keeps one canonical turn per revision. The recorded OpenAI exchange
comes from ../shared/fixtures.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from google.genai import types
from openai.lib.responses_tool_runner import AsyncRegisteredFunction, AsyncResponsesToolRunner

from tests.fixtures_dir import FIXTURES_DIR
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import genai_sdk, get, openai_sdk
from tests.proxy.sdk_support import GENAI_AIOHTTP_WARNING
from tests.proxy.stack import Stack

CONVERSATION = "loop-1"


async def revisions(stack: Stack) -> list[int]:
    status, kept = await get(stack, f"/turngate/v1/conversations/{CONVERSATION}")
    assert status == 200
    return [turn["revision"] for turn in kept["turns"]]


@pytest.mark.parametrize("eager", [False, True], ids=["after", "eager"])
async def test_the_openai_responses_tool_runner(stack: Stack, eager: bool):
    stack.upstream.replies(
        Reply.fixture("openai-responses/pai-function-call-turn1.sse"),
        Reply.fixture("openai-responses/pai-function-call-turn2.sse"),
    )
    asked = orjson.loads(
        (FIXTURES_DIR / "openai-responses/pai-function-call-turn1.request.json").read_bytes()
    )
    ran: list[dict[str, object]] = []

    async def get_capital(arguments: dict[str, object]) -> str:
        ran.append(arguments)
        return "Paris"

    runner = AsyncResponsesToolRunner(
        functions=[AsyncRegisteredFunction(asked["tools"][0], get_capital)]
    )
    async with openai_sdk(stack, **{"Turngate-Conversation-Id": CONVERSATION}) as sdk:
        params: Any = {"model": "gpt-4o", "input": asked["input"]}
        final = await runner.run(sdk, params, stream=True, eager=eager)
    assert final.output_text == "The capital of France is Paris."
    assert ran == [{"country": "France"}]
    assert len(stack.upstream.received) == 2
    assert await revisions(stack) == [0, 1]


@GENAI_AIOHTTP_WARNING
async def test_google_genai_automatic_function_calling_in_a_chat(stack: Stack):
    def answer(part: dict[str, Any]) -> Reply:
        content = {"role": "model", "parts": [part]}
        return Reply.json({"candidates": [{"content": content, "finishReason": "STOP"}]})

    call = {"functionCall": {"name": "get_capital", "args": {"country": "France"}}}
    stack.upstream.replies(
        answer({**call, "thoughtSignature": "c2lnbmF0dXJl"}),
        answer({"text": "Paris."}),
        answer({"text": "You are welcome."}),
    )
    ran: list[str] = []

    def get_capital(country: str) -> str:
        """The capital of a country."""
        ran.append(country)
        return "Paris"

    sdk = genai_sdk(stack, **{"Turngate-Conversation-Id": CONVERSATION})
    config = types.GenerateContentConfig(tools=[get_capital])
    chat = sdk.aio.chats.create(model="gemini-3-flash", config=config)
    assert (await chat.send_message("Capital of France?")).text == "Paris."
    assert (await chat.send_message("Thanks")).text == "You are welcome."
    assert ran == ["France"]
    assert await revisions(stack) == [0, 1, 2]
