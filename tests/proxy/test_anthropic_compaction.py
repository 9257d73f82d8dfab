"""Anthropic server-side compaction (``context_management``, beta) under
Turngate-Conversation-Id.

When the context grows past its trigger, Claude's answer starts with a ``compaction`` block:
a summary (``content``, null when the compaction failed) that stands for everything before
it, and the application sends the block back unchanged. Streamed, the block comes whole in
one ``compaction_delta``. Such a block must not be refused as an unknown kind, and the next
history, which holds it, must match the committed turn.
"""

from __future__ import annotations

from typing import Any

import anthropic
import orjson
import pytest

from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import anthropic_sdk, claude_answer, claude_stream, get
from tests.proxy.stack import Stack

CONVERSATION = "anthropic-compacted-1"
MODEL = "claude-opus-4-6"
QUESTION = {"role": "user", "content": "Refactor the billing module, step by step."}
SUMMARY = "Summary: the billing module was split into invoices.py and payments.py."
BETAS = ["compact-2026-01-12"]
CONTEXT = {"edits": [{"type": "compact_20260112"}]}


def message(content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": "msg_compacted",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 180000, "output_tokens": 900},
    }


def compacted(summary: str | None, streamed: bool) -> Reply:
    blocks = [{"type": "compaction", "content": summary}, {"type": "text", "text": "Next: tests."}]
    return claude_stream(message(blocks)) if streamed else Reply.json(message(blocks))


def client(stack: Stack) -> anthropic.AsyncAnthropic:
    return anthropic_sdk(stack, **{"Turngate-Conversation-Id": CONVERSATION})


async def ask(sdk: anthropic.AsyncAnthropic, messages: list[Any], streamed: bool) -> Any:
    ask = {
        "model": MODEL,
        "max_tokens": 4096,
        "messages": messages,
        "betas": BETAS,
        "context_management": CONTEXT,
    }
    if not streamed:
        return await sdk.beta.messages.create(**ask)
    async with sdk.beta.messages.stream(**ask) as stream:
        return await stream.get_final_message()


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("summary", [SUMMARY, None], ids=["summary", "failed-compaction"])
async def test_a_compacted_answer_is_the_turn_the_next_history_holds(
    stack: Stack, streamed: bool, summary: str | None
):
    stack.upstream.replies(
        compacted(summary, streamed), claude_answer("Tests pass.", message_id="msg_2")
    )
    async with client(stack) as sdk:
        answer = await ask(sdk, [QUESTION], streamed)
        assert [block.type for block in answer.content] == ["compaction", "text"]
        sent_back = [block.model_dump(exclude_none=True) for block in answer.content]
        follow_up = [
            QUESTION,
            {"role": "assistant", "content": sent_back},
            {"role": "user", "content": "Now run the tests."},
        ]
        assert (await ask(sdk, follow_up, False)).content[0].text == "Tests pass."
    status, kept = await get(stack, f"/turngate/v1/conversations/{CONVERSATION}")
    assert (status, [t["revision"] for t in kept["turns"]]) == (200, [0, 1])
    assert len(stack.upstream.received) == 2
    # The block went up as the SDK sent it back.
    assert stack.upstream.received[1].json()["messages"][1]["content"][0] == sent_back[0]


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_a_turn_paused_after_its_compaction_goes_on(stack: Stack, streamed: bool):
    # pause_after_compaction: the answer stops (stop_reason "compaction") after the block;
    # the application sends it back last and Claude goes on with the same turn.
    paused = [{"type": "compaction", "content": SUMMARY}]
    first = claude_stream(message(paused)) if streamed else Reply.json(message(paused))
    if not streamed:
        first = Reply.json({**message(paused), "stop_reason": "compaction"})
    stack.upstream.replies(
        first,
        claude_answer("Next: tests.", message_id="msg_2"),
        claude_answer("Tests pass.", message_id="msg_3"),
    )
    async with client(stack) as sdk:
        answer = await ask(sdk, [QUESTION], streamed)
        history = [QUESTION, {"role": "assistant", "content": dump(answer)}]
        went_on = await ask(sdk, history, False)
        history.append({"role": "assistant", "content": dump(went_on)})
        history.append({"role": "user", "content": "Now run the tests."})
        assert (await ask(sdk, history, False)).content[0].text == "Tests pass."
    status, kept = await get(stack, f"/turngate/v1/conversations/{CONVERSATION}")
    # Three revisions: the compaction, what followed it, the answer after the tests.
    assert (status, [t["revision"] for t in kept["turns"]]) == (200, [0, 1, 2])
    assert len(stack.upstream.received) == 3


def dump(answer: Any) -> list[dict[str, Any]]:
    return [block.model_dump(exclude_none=True) for block in answer.content]


@pytest.mark.parametrize("conversation", [False, True], ids=["plain", "conversation"])
async def test_the_tool_runner_compacts_and_sends_the_block_first(stack: Stack, conversation: bool):
    # runner.compact_before_next_turn(): a compaction request (the `compaction` parameter)
    # answers with the block alone, which the next request sends first, as an assistant
    # message, in place of the messages it summarizes.
    use = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"module": "billing"}}
    answers = [
        {**message([use]), "id": "msg_1", "stop_reason": "tool_use"},
        {**message([{"type": "compaction", "content": SUMMARY}]), "id": "msg_2"},
        {**message([{"type": "text", "text": "Done."}]), "id": "msg_3"},
    ]
    answers[1]["stop_reason"] = "compaction"
    stack.upstream.replies(*(Reply.json(a) for a in answers))

    @anthropic.beta_async_tool
    async def lookup(module: str) -> str:
        """Read a module."""
        return f"{module}: 2,000 lines"

    headers = {"Turngate-Conversation-Id": CONVERSATION} if conversation else {}
    async with anthropic_sdk(stack, **headers) as sdk:
        runner = sdk.beta.messages.tool_runner(
            model=MODEL, max_tokens=1000, tools=[lookup], messages=[QUESTION]
        )
        stops = []
        async for reply in runner:
            stops.append(reply.stop_reason)
            if reply.stop_reason == "tool_use":
                runner.compact_before_next_turn()
    assert stops == ["tool_use", "compaction", "end_turn"]
    last = orjson.loads(stack.upstream.received[-1].body)
    assert last["messages"] == [
        {"role": "assistant", "content": [{"type": "compaction", "content": SUMMARY}]}
    ]
    if conversation:
        status, kept = await get(stack, f"/turngate/v1/conversations/{CONVERSATION}")
        assert status == 200
        assert [t["revision"] for t in kept["turns"]] == [0, 1, 2]
