"""Signed thinking sent back changed, to a replica that did not relay it.

Anthropic refuses a request whose latest assistant message holds a thinking block changed
since the answer ("`thinking` or `redacted_thinking` blocks in the latest assistant message
cannot be modified"). turngate remembers each signed block it relays; replicas that share
conversations (a store kept the answer for replay) judge it too, as does one process after
a restart. A signature no kept answer holds goes up, and is sought once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import pytest

from tests.fixtures_dir import FIXTURES_PRESENT
from tests.proxy.conftest import StackFactory, stack_on
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import anthropic_sdk, claude_answer, kept_answer_reads
from tests.proxy.stack import Stack

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")

CLAUDE = "claude-haiku-4-5-20251001"
ASK: Any = {"role": "user", "content": "Which version is fixed? Then joke about it."}
COMMON: Any = {
    "model": CLAUDE,
    "max_tokens": 2048,
    "tools": [{"name": "fixed_version", "input_schema": {"type": "object"}}],
    "thinking": {"type": "enabled", "budget_tokens": 1024},
}


async def thinking_turn(stack: Stack, headers: dict[str, str]) -> list[dict[str, Any]]:
    """The recorded thinking-then-call answer, streamed through ``stack``: its blocks."""
    stack.upstream.reply(Reply.fixture("anthropic/lla-thinking-then-tool-use.sse"))
    async with (
        anthropic_sdk(stack, **headers) as client,
        client.messages.stream(**COMMON, messages=[ASK]) as stream,
    ):
        answer = await stream.get_final_message()
    return [block.model_dump(exclude_none=True) for block in answer.content]


def next_messages(turn: list[dict[str, Any]], thinking: str | None = None) -> list[Any]:
    """The turn sent back (its thinking replaced by ``thinking``), then the call's result."""
    blocks = [
        {**block, "thinking": thinking} if thinking and block["type"] == "thinking" else block
        for block in turn
    ]
    call = next(block for block in turn if block["type"] == "tool_use")
    result = {"type": "tool_result", "tool_use_id": call["id"], "content": "4.2.1"}
    return [ASK, {"role": "assistant", "content": blocks}, {"role": "user", "content": [result]}]


@pytest.mark.parametrize("store", ["sqlite", "redis"])
async def test_another_replica_refuses_thinking_changed_since_the_answer(
    make_stack: StackFactory, tmp_path: Path, store: str
):
    one = await stack_on(store, make_stack, tmp_path)
    other = await stack_on(store, make_stack, tmp_path)
    headers = {"Turngate-Conversation-Id": "thinking-1"}
    turn = await thinking_turn(one, headers)
    trimmed = next(b for b in turn if b["type"] == "thinking")["thinking"].strip()[:40]
    async with anthropic_sdk(other, **headers) as client:
        with pytest.raises(anthropic.BadRequestError) as refused:
            await client.messages.create(**COMMON, messages=next_messages(turn, trimmed))
        assert refused.value.response.headers["Turngate-Rejection"] == "anthropic_thinking_modified"
        assert "carries the signature of a block turngate relayed" in str(refused.value)
        assert other.upstream.received == []
        other.upstream.reply(claude_answer("4.2.1: a fix so small it needs glasses."))
        await client.messages.create(**COMMON, messages=next_messages(turn))
    assert len(other.upstream.received) == 1


async def test_thinking_of_no_kept_answer_goes_up_and_is_sought_once(
    make_stack: StackFactory, tmp_path: Path
):
    one = await stack_on("sqlite", make_stack, tmp_path)
    other = await stack_on("sqlite", make_stack, tmp_path)
    headers = {"Turngate-Conversation-Id": "thinking-2"}
    turn = await thinking_turn(one, headers)
    # A signature the kept answer does not hold (an older turn's, say): not judged.
    older = [
        {**block, "signature": "EqQBCgIYAhIM" + "older" * 20}
        if block["type"] == "thinking"
        else block
        for block in turn
    ]
    reads = kept_answer_reads(other)
    other.upstream.reply(claude_answer("first"))
    async with anthropic_sdk(other, **headers) as client:
        sent = next_messages(older, "changed")
        first = await client.messages.create(**COMMON, messages=sent)
        again = await client.messages.create(**COMMON, messages=sent)  # a retry: replayed
    assert len(other.upstream.received) == 1
    assert again.id == first.id
    assert len(reads) == 1
