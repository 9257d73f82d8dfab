"""The official SDKs retry every 409 twice on their own, a second or so apart, unless the
answer says ``x-should-retry``. turngate says so on each conflict: a conflict that stands is
raised at once, after one request; one that waiting ends is retried by the SDK itself, which
then gets the committed answer replayed."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import anthropic
import openai
import pytest

from tests.proxy.helpers import CHAT_ANSWER, claude_answer
from tests.proxy.stack import ANTHROPIC_KEY, OPENAI_KEY, Stack
from turngate.proxy import conflicts

HI = [{"role": "user", "content": "Hi"}]
OTHER = [{"role": "user", "content": "Something else"}]
CLAUDE_ANSWER = claude_answer("hello", "msg_retry")


def posts(stack: Stack) -> int:
    """Requests that reached turngate (the SDK's retries included)."""
    return len(stack.client_bodies)


@pytest.mark.parametrize(
    "headers",
    [{"Turngate-Conversation-Id": "conv-retries"}, {"Idempotency-Key": "order-7"}],
    ids=["committed-revision", "reused-key"],
)
async def test_openai_raises_a_standing_conflict_at_once(
    make_stack: Any, headers: dict[str, str]
) -> None:
    stack: Stack = await make_stack(record_bodies=True)
    stack.upstream.reply(CHAT_ANSWER)
    # The SDK's defaults: two retries of a 409.
    async with openai.AsyncOpenAI(api_key=OPENAI_KEY, base_url=stack.base("/openai/v1")) as sdk:
        await sdk.chat.completions.create(model="gpt-4o", messages=HI, extra_headers=headers)
        before = posts(stack)
        started = time.monotonic()
        with pytest.raises(openai.ConflictError) as raised:
            await sdk.chat.completions.create(model="gpt-4o", messages=OTHER, extra_headers=headers)
        took = time.monotonic() - started
    assert raised.value.response.headers["x-should-retry"] == "false"
    assert "Retry-After" not in raised.value.response.headers
    # Without the header: three requests and about two seconds (1.3-2.0 s measured).
    assert posts(stack) - before == 1
    assert took < 0.5
    assert len(stack.upstream.received) == 1


async def test_anthropic_raises_a_committed_revision_conflict_at_once(make_stack: Any) -> None:
    stack: Stack = await make_stack(record_bodies=True)
    stack.upstream.reply(CLAUDE_ANSWER)
    conversation = {"Turngate-Conversation-Id": "conv-claude"}
    async with anthropic.AsyncAnthropic(
        api_key=ANTHROPIC_KEY, base_url=stack.base("/anthropic"), default_headers=conversation
    ) as sdk:
        await sdk.messages.create(model="claude-haiku-4-5", max_tokens=64, messages=HI)
        before = posts(stack)
        with pytest.raises(anthropic.ConflictError) as raised:
            await sdk.messages.create(model="claude-haiku-4-5", max_tokens=64, messages=OTHER)
    assert raised.value.response.headers["x-should-retry"] == "false"
    assert posts(stack) - before == 1
    assert len(stack.upstream.received) == 1


async def test_the_sdks_own_retry_of_an_in_flight_request_gets_the_answer_replayed(
    make_stack: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The retry waits for the first attempt at most this long, then gets 409 Retry-After: 1.
    monkeypatch.setattr(conflicts, "JOIN_WAIT", 0.2)
    stack: Stack = await make_stack(record_bodies=True)
    stack.upstream.reply(dataclasses.replace(CHAT_ANSWER, delay=0.8))
    key = {"Idempotency-Key": "slow-order"}
    async with openai.AsyncOpenAI(api_key=OPENAI_KEY, base_url=stack.base("/openai/v1")) as sdk:
        first = sdk.chat.completions.create(model="gpt-4o", messages=HI, extra_headers=key)
        task = asyncio.ensure_future(first)
        await asyncio.wait_for(stack.upstream.got_request.wait(), 5)
        # The same request again while the first is in flight: 409, Retry-After: 1, retry.
        again = await sdk.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=HI, extra_headers=key
        )
        answer = await task
    assert again.headers["Turngate-Replay"] == "1"
    assert again.parse().model_dump() == answer.model_dump()
    assert again.retries_taken == 1
    assert posts(stack) == 3
    assert len(stack.upstream.received) == 1


@pytest.mark.parametrize("hosted", [True, False], ids=["web-search", "functions-only"])
async def test_a_lost_answer_is_not_resent_by_the_sdk_when_the_provider_runs_tools(
    make_stack: Any, hosted: bool
) -> None:
    """The answer broke off after the bytes were out: the provider may have acted on them.
    With a provider-run tool (web search, code, MCP) the SDK's retry would run it again."""
    stack: Stack = await make_stack()
    stack.upstream.reply(dataclasses.replace(CHAT_ANSWER, drop_after=10, linger=0.05))
    tools: list[Any] = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
    if hosted:
        tools.append({"type": "web_search"})
    async with openai.AsyncOpenAI(api_key=OPENAI_KEY, base_url=stack.base("/openai/v1")) as sdk:
        with pytest.raises(openai.InternalServerError) as raised:
            await sdk.responses.create(model="gpt-4o", input="Today's news?", tools=tools)
    assert raised.value.status_code == 502
    headers = raised.value.response.headers
    if hosted:
        assert headers["x-should-retry"] == "false"
        assert len(stack.upstream.received) == 1
    else:
        # Only the client's own tools: a retry runs nothing twice, and the SDK retries.
        assert "x-should-retry" not in headers
        assert len(stack.upstream.received) == 3
