"""Compacted OpenAI Responses conversations under Turngate-Conversation-Id.

A compaction item stands for the conversation before it: server-side compaction
(``context_management``) puts one before the model's reply, and ``responses.compact``
returns the user messages and one compaction item to send instead of the history. OpenAI's
guide says a client may then drop every item before the latest compaction. So a compacted
history shows the conversation's latest turns only; the compaction is opaque and the
provider's (compared as reasoning is: not at all), and a compaction alone is no turn.
The recorded plain answer (../shared/fixtures) is the reply each time.
"""

from __future__ import annotations

import copy
from typing import Any

import openai
import orjson
import pytest

from tests.fixtures_dir import FIXTURES_DIR
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import get, openai_sdk
from tests.proxy.stack import Stack

ANSWER = "openai-responses/pai-nonstream-after-function-output.json"
CONVERSATION = "compacted-1"
COMPACTION = {"type": "compaction", "id": "cmp_01", "encrypted_content": "gAAAAB-opaque-1"}


def recorded() -> dict[str, Any]:
    value = orjson.loads((FIXTURES_DIR / ANSWER).read_bytes())
    assert isinstance(value, dict)
    return value


def said(text: str, *, compacted: bool = False) -> Reply:
    body = copy.deepcopy(recorded())
    body["output"][0]["content"][0]["text"] = text
    # Each answer is its own item, as OpenAI issues them: an id sent twice is refused.
    body["output"][0]["id"] = f"msg_{text}"
    if compacted:
        body["output"].insert(0, COMPACTION)
    return Reply.json(body)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def items(response: Any) -> list[dict[str, Any]]:
    # The SDK types a compacted window's user messages as output messages: it warns.
    return [item.model_dump(exclude_none=True, warnings=False) for item in response.output]


def client(stack: Stack) -> openai.AsyncOpenAI:
    return openai_sdk(stack, **{"Turngate-Conversation-Id": CONVERSATION})


async def create(sdk: openai.AsyncOpenAI, history: list[Any]) -> Any:
    return await sdk.responses.create(model="gpt-5", input=history, store=False)


async def revisions(stack: Stack) -> list[int]:
    status, kept = await get(stack, f"/turngate/v1/conversations/{CONVERSATION}")
    assert status == 200
    return [turn["revision"] for turn in kept["turns"]]


@pytest.mark.parametrize("dropped", [False, True], ids=["kept-whole", "dropped-before"])
async def test_a_history_compacted_on_the_server_goes_on(stack: Stack, dropped: bool):
    stack.upstream.replies(said("A1"), said("A2", compacted=True), said("A3"))
    async with client(stack) as sdk:
        history = [user("Q1")]
        history += items(await create(sdk, history))
        history.append(user("Q2"))
        second = await create(sdk, history)
        assert [item.type for item in second.output] == ["compaction", "message"]
        history += items(second)
        if dropped:  # what OpenAI's guide allows: nothing before the latest compaction
            history = history[history.index(items(second)[0]) :]
        history.append(user("Q3"))
        await create(sdk, history)
    assert await revisions(stack) == [0, 1, 2]
    assert len(stack.upstream.received) == 3


async def test_a_history_compacted_by_the_compact_endpoint_goes_on(stack: Stack):
    compacted = {
        "id": "resp_compact_1",
        "object": "response.compaction",
        "created_at": 1761323550,
        "output": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Q1"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Q2"}]},
            COMPACTION,
        ],
        "usage": {"input_tokens": 900, "output_tokens": 80, "total_tokens": 980},
    }
    stack.upstream.replies(said("A1"), said("A2"), Reply.json(compacted), said("A3"))
    async with client(stack) as sdk:
        history = [user("Q1")]
        history += items(await create(sdk, history))
        history.append(user("Q2"))
        history += items(await create(sdk, history))
        window = await sdk.responses.compact(model="gpt-5", input=history)
        history = [*items(window), user("Q3")]
        await create(sdk, history)
    assert await revisions(stack) == [0, 1, 2]
    assert stack.upstream.received[2].path_qs == "/v1/responses/compact"


async def test_a_compacted_history_whose_turns_are_not_the_committed_ones_is_refused(
    stack: Stack,
):
    stack.upstream.replies(said("A1"), said("A2", compacted=True))
    async with client(stack) as sdk:
        history = [user("Q1")]
        history += items(await create(sdk, history))
        history.append(user("Q2"))
        second = items(await create(sdk, history))
        second[1]["content"][0]["text"] = "A2, edited"
        with pytest.raises(openai.BadRequestError) as raised:
            await create(sdk, [*second, user("Q3")])
    assert raised.value.response.headers["Turngate-Rejection"] == "history_mismatch"
    assert len(stack.upstream.received) == 2
