"""Deprecated function calling (``functions``, ``function_call``, ``role: function``) through
the openai SDK: turngate does not model it, so it refuses it before sending anything, and an
answer that carries a ``function_call`` anyway (some OpenAI-compatible servers answer so) is
never delivered, whole or half. Shadow mode sends it, and a stream of several choices,
unchanged, and records what enforcing would have refused."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import CHAT_ANSWER as CHAT_TEXT
from tests.proxy.helpers import WEATHER, openai_sdk
from tests.proxy.policy_stack import shadow_records
from tests.proxy.stack import Stack

QUESTION = [{"role": "user", "content": "Weather in Paris?"}]


async def test_functions_are_refused_before_anything_is_sent(make_stack: Any) -> None:
    stack: Stack = await make_stack()
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as raised:
            await client.chat.completions.create(
                model="gpt-4o",
                messages=QUESTION,  # type: ignore[arg-type]
                functions=[WEATHER],  # type: ignore[list-item]
            )
    assert raised.value.code == "unknown_kind"
    assert "declare the same functions as 'tools'" in raised.value.message
    assert stack.upstream.received == []


@pytest.mark.parametrize("arguments", ['{"city": "Par', '{"city": "Paris"}'], ids=["half", "whole"])
async def test_an_answer_with_a_function_call_is_never_delivered(
    make_stack: Any, arguments: str
) -> None:
    stack: Stack = await make_stack()
    message = {"role": "assistant", "content": None}
    message["function_call"] = {"name": "get_weather", "arguments": arguments}  # type: ignore[assignment]
    choice = {"index": 0, "finish_reason": "function_call", "message": message}
    answer = {"id": "chatcmpl-legacy", "object": "chat.completion", "model": "gpt-4o"}
    stack.upstream.reply(Reply.json({**answer, "choices": [choice]}))
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.APIStatusError) as raised:
            await client.chat.completions.create(
                model="gpt-4o",
                messages=QUESTION,  # type: ignore[arg-type]
                tools=[{"type": "function", "function": WEATHER}],  # type: ignore[list-item]
            )
    assert raised.value.status_code == 502
    assert raised.value.response.headers["Turngate-Rejection"] == "unknown_kind"
    assert "get_weather" not in raised.value.response.text
    assert len(stack.upstream.received) == 1


async def test_shadow_mode_sends_both_unchanged_and_records_what_enforcing_would_refuse(
    make_stack: Any,
) -> None:
    stack: Stack = await make_stack(mode="shadow")
    stack.upstream.reply(CHAT_TEXT)
    async with openai_sdk(stack) as client:
        answer = await client.chat.completions.create(
            model="gpt-4o",
            messages=QUESTION,  # type: ignore[arg-type]
            functions=[WEATHER],  # type: ignore[list-item]
        )
        assert answer.choices[0].message.content == "hello"
        stack.upstream.reply(Reply.fixture("openai-chat/pai-text-only.sse"))
        chunks = await client.chat.completions.create(
            model="gpt-4o",
            messages=QUESTION,  # type: ignore[arg-type]
            n=2,
            stream=True,
        )
        assert [c async for c in chunks]
    assert [r.json().get("functions", r.json().get("n")) for r in stack.upstream.received] == [
        [WEATHER],
        2,
    ]
    rules = [record["rules"] for record in await shadow_records(stack)]
    assert rules == [["unsupported_in_target"], ["unknown_kind"]]
