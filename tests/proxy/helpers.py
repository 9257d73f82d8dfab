"""Small helpers shared by the proxy tests."""

from __future__ import annotations

from typing import Any

import aiohttp
import anthropic
import openai
import orjson

from tests.proxy.fake_upstream import Reply
from tests.proxy.stack import ANTHROPIC_KEY, OPENAI_KEY, Stack

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
