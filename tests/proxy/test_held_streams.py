"""While turngate holds a tool call's arguments, the client is not left in silence.

A model writing a long tool call (a file's contents, a plan) streams argument pieces for as
long as it writes; turngate holds them until the call is whole, so the application would
read nothing for that time: an SDK with a read timeout shorter than the call (a 60 s
client writing a few thousand tokens of code) gives up, though the provider was streaming
all along. While it holds what the provider sends, turngate writes an empty line every few
seconds, which every SSE reader (openai, anthropic, google-genai) skips.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from tests.fixtures_dir import FIXTURES_DIR, FIXTURES_PRESENT, load_json
from tests.proxy.conftest import StackFactory
from tests.proxy.fake_upstream import Reply
from tests.proxy.stack import ANTHROPIC_KEY, OPENAI_KEY, Stack
from turngate.proxy import stream

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")

# A client's read timeout well above the keepalive's period (a loaded 2-core machine delays
# the first bytes by a good part of a second) and well under the time the calls are held.
CLIENT_TIMEOUT = 1.5
PACE = 0.075  # seconds between two events: each recording's tool calls take 3-4.5 s
KEEPALIVE = 0.2


@pytest.fixture(autouse=True)
def quick_keepalive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream, "KEEPALIVE_AFTER", KEEPALIVE)


def request_of(recording: str) -> dict[str, Any]:
    body = load_json(FIXTURES_DIR / recording.replace(".sse", ".request.json"))
    assert isinstance(body, dict)
    return body


@pytest.fixture
async def stack(make_stack: StackFactory) -> Stack:
    return await make_stack()


LONG_CALL = "openai-chat/pai-long-tool-args.sse"


async def long_call_names(stack: Stack) -> list[str]:
    """The tool calls' names an openai client with a 1 s read timeout reads of the recorded
    long call, paced over about 3 s."""
    stack.upstream.reply(Reply.fixture(LONG_CALL, pace=PACE))
    body = request_of(LONG_CALL)
    async with openai.AsyncOpenAI(
        api_key=OPENAI_KEY, base_url=stack.base("/openai/v1"), max_retries=0, timeout=CLIENT_TIMEOUT
    ) as sdk:
        stream_ = await sdk.chat.completions.create(
            model=body["model"], messages=body["messages"], tools=body["tools"], stream=True
        )
        return [
            call.function.name
            async for chunk in stream_
            for choice in chunk.choices
            for call in choice.delta.tool_calls or []
            if call.function and call.function.name
        ]


async def test_chat_a_long_tool_call_outlasts_the_clients_read_timeout(stack: Stack):
    assert await long_call_names(stack) == ["final_result"]


async def test_anthropic_a_long_tool_call_outlasts_the_clients_read_timeout(stack: Stack):
    recording = "anthropic/cc-parallel-2-tool-use-with-args.sse"
    stack.upstream.reply(Reply.fixture(recording, pace=PACE * 2))
    declared = {"type": "object", "properties": {"city": {"type": "string"}}}
    async with (
        anthropic.AsyncAnthropic(
            api_key=ANTHROPIC_KEY,
            base_url=stack.base("/anthropic"),
            max_retries=0,
            timeout=CLIENT_TIMEOUT,
        ) as sdk,
        sdk.messages.stream(
            model="claude-haiku-4-5",
            max_tokens=1024,
            messages=[{"role": "user", "content": "Read both files."}],
            tools=[{"name": "weather", "input_schema": declared}],
        ) as events,
    ):
        message = await events.get_final_message()
    assert [b.type for b in message.content].count("tool_use") == 2


async def test_a_shadowed_stream_is_the_providers_byte_for_byte(make_stack: StackFactory):
    # Shadow mode relays the provider's own bytes as they come, frames cut anywhere: nothing
    # may be written between them.
    stack = await make_stack(mode="shadow")
    stack.upstream.reply(Reply.fixture(LONG_CALL, pace=PACE))
    body = request_of(LONG_CALL)
    async with (
        aiohttp.ClientSession() as session,
        session.post(stack.base("/openai/v1/chat/completions"), json=body) as resp,
    ):
        received = await resp.read()
    assert received == (FIXTURES_DIR / LONG_CALL).read_bytes()


async def test_a_buffered_stream_is_not_left_in_silence_either(
    make_stack: StackFactory, tmp_path: Path
):
    # stream_text: buffer holds text too, and the response headers until the first commit.
    config = tmp_path / "turngate.yaml"
    config.write_text("version: 1\ndefaults:\n  stream_text: buffer\n")
    stack = await make_stack(config=str(config))
    assert await long_call_names(stack) == ["final_result"]
