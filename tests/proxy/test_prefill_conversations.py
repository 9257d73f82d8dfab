"""An Anthropic prefill under Turngate-Conversation-Id.

A request may end with an assistant message that Claude continues (``{`` to get JSON): it is
the start of the answer, not an answered turn. The revision does not count it, and the turn
committed for the revision is the prefill and its continuation together, which is what the
application sends back next (one assistant message, or the two as it had them).
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from tests.proxy.helpers import claude_answer, get
from tests.proxy.stack import ANTHROPIC_KEY, Stack

QUESTION = {"role": "user", "content": "The invoice as JSON, please."}
CONTINUATION = '"total": 1240, "currency": "EUR"}'


def client(stack: Stack) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        api_key=ANTHROPIC_KEY,
        base_url=stack.base("/anthropic"),
        max_retries=0,
        default_headers={"Turngate-Conversation-Id": "prefill-1"},
    )


async def ask(sdk: anthropic.AsyncAnthropic, messages: list[dict[str, Any]]) -> str:
    answer = await sdk.messages.create(model="claude-haiku-4-5", max_tokens=256, messages=messages)  # type: ignore[arg-type]
    return answer.content[0].text  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "sent_back",
    [
        [{"role": "assistant", "content": "{" + CONTINUATION}],
        [{"role": "assistant", "content": "{"}, {"role": "assistant", "content": CONTINUATION}],
    ],
    ids=["as-one-message", "as-two-messages"],
)
async def test_a_prefilled_answer_is_the_turn_sent_back(stack: Stack, sent_back: list[Any]):
    async with client(stack) as sdk:
        stack.upstream.reply(claude_answer(CONTINUATION))
        assert await ask(sdk, [QUESTION, {"role": "assistant", "content": "{"}]) == CONTINUATION
        stack.upstream.reply(claude_answer("Glad to help.", message_id="msg_2"))
        follow_up = [QUESTION, *sent_back, {"role": "user", "content": "Thanks!"}]
        assert await ask(sdk, follow_up) == "Glad to help."
        # A later prefill in the same conversation, after a committed turn.
        stack.upstream.reply(claude_answer('"paid": true}', message_id="msg_3"))
        prefilled = [*follow_up, {"role": "assistant", "content": "Glad to help."}]
        prefilled += [{"role": "user", "content": "Paid?"}, {"role": "assistant", "content": "{"}]
        assert await ask(sdk, prefilled) == '"paid": true}'
    status, record = await get(stack, "/turngate/v1/conversations/prefill-1")
    assert status == 200
    assert [t["revision"] for t in record["turns"]] == [0, 1, 2]
    assert len(stack.upstream.received) == 3


async def test_a_prefill_is_not_a_history_to_check(stack: Stack):
    # Another text than the answer's start: still only the start of the answer.
    async with client(stack) as sdk:
        stack.upstream.reply(claude_answer(CONTINUATION))
        await ask(sdk, [QUESTION, {"role": "assistant", "content": "{"}])
        stack.upstream.reply(claude_answer("ok", message_id="msg_2"))
        with pytest.raises(anthropic.BadRequestError) as raised:
            # The answer sent back edited: refused, as any edited turn is.
            await ask(
                sdk,
                [
                    QUESTION,
                    {"role": "assistant", "content": "{}"},
                    {"role": "user", "content": "?"},
                ],
            )
    assert raised.value.response.headers["Turngate-Rejection"] == "history_mismatch"


async def test_a_paused_turn_sent_back_to_go_on_is_a_committed_turn(stack: Stack):
    # stop_reason pause_turn: the application sends the turn back as it is, last, for Claude
    # to go on. That message is the committed turn 0, not a prefill: the request answers 1.
    async with client(stack) as sdk:
        stack.upstream.reply(claude_answer("Let me search for that."))
        paused = await ask(sdk, [QUESTION])
        stack.upstream.reply(claude_answer(" Found it: 1,240 EUR.", message_id="msg_2"))
        await ask(sdk, [QUESTION, {"role": "assistant", "content": paused}])
    status, record = await get(stack, "/turngate/v1/conversations/prefill-1")
    assert (status, [t["revision"] for t in record["turns"]]) == (200, [0, 1])


@pytest.mark.parametrize("empty", ["", []], ids=["empty-text", "no-blocks"])
async def test_an_empty_prefill_is_no_turn_either(stack: Stack, empty: Any):
    async with client(stack) as sdk:
        stack.upstream.reply(claude_answer("Here it is."))
        await ask(sdk, [QUESTION, {"role": "assistant", "content": empty}])
        stack.upstream.reply(claude_answer("You are welcome.", message_id="msg_2"))
        follow_up = [QUESTION, {"role": "assistant", "content": "Here it is."}]
        assert await ask(sdk, [*follow_up, {"role": "user", "content": "Thanks"}]) == (
            "You are welcome."
        )
    assert len(stack.upstream.received) == 2
