"""A Responses item sent back without the reasoning item it came with.

OpenAI stores a reasoning model's answer as items: a reasoning item and the call (or
message) it led to. A later request that sends the call back by its id without that
reasoning item is refused: "Item 'fc_…' of type 'function_call' was provided without its
required 'reasoning' item: 'rs_…'." (cline #12242, continue #10018 / #10880, mastra #8738,
agency-swarm #367: an agent framework that keeps calls but drops reasoning). turngate
remembers which reasoning each item of an answer it relayed came after, and refuses such a
request before sending, naming both items.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.fixtures_dir import FIXTURES_DIR, FIXTURES_PRESENT, load_json
from tests.proxy.conftest import StackFactory, stack_on
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import kept_answer_reads, openai_sdk
from tests.proxy.stack import Stack
from tests.proxy.test_chained_conversations import TOOLS as CAPITAL_TOOLS

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")

STREAMED = "openai-responses/pai-reasoning-then-function-call.sse"
AFTER = "openai-responses/pai-nonstream-after-function-output.json"


def recorded_request() -> dict[str, Any]:
    body = load_json(FIXTURES_DIR / STREAMED.replace(".sse", ".request.json"))
    assert isinstance(body, dict)
    return body


async def first_answer(stack: Stack, sdk: openai.AsyncOpenAI) -> list[dict[str, Any]]:
    """The recorded reasoning-then-call answer, streamed through turngate: its output items."""
    stack.upstream.reply(Reply.fixture(STREAMED))
    body = recorded_request()
    stream = await sdk.responses.create(
        model=body["model"], input=body["input"], tools=body["tools"], stream=True
    )
    completed = [event async for event in stream if event.type == "response.completed"]
    return [item.model_dump(exclude_none=True) for item in completed[0].response.output]


def next_input(output: list[dict[str, Any]], *, keep_reasoning: bool) -> list[dict[str, Any]]:
    call = next(item for item in output if item["type"] == "function_call")
    items = [item for item in output if keep_reasoning or item["type"] != "reasoning"]
    result = {"type": "function_call_output", "call_id": call["call_id"], "output": "ok"}
    return [*recorded_request()["input"], *items, result]


async def send_back(
    sdk: openai.AsyncOpenAI, output: list[dict[str, Any]], *, keep_reasoning: bool, **extra: Any
) -> Any:
    """The next request of the loop: the answer's items (its reasoning kept or not) and the
    call's output."""
    return await sdk.responses.create(
        model="gpt-5",
        input=next_input(output, keep_reasoning=keep_reasoning),  # type: ignore[arg-type]
        tools=recorded_request()["tools"],
        **extra,
    )


async def test_a_call_sent_back_without_its_reasoning_is_refused_naming_both(stack: Stack):
    async with openai_sdk(stack) as sdk:
        output = await first_answer(stack, sdk)
        reasoning, call = output[0]["id"], output[1]["id"]
        assert (output[0]["type"], output[1]["type"]) == ("reasoning", "function_call")
        with pytest.raises(openai.BadRequestError) as caught:
            await send_back(sdk, output, keep_reasoning=False)
    assert caught.value.code == "responses_reasoning_missing"
    message = str(caught.value)
    assert f"Item '{call}' of type 'function_call' was provided without its required" in message
    assert f"'reasoning' item: '{reasoning}'" in message
    assert len(stack.upstream.received) == 1, "the refused request reached the provider"


async def test_the_same_call_with_its_reasoning_goes_up(stack: Stack):
    async with openai_sdk(stack) as sdk:
        output = await first_answer(stack, sdk)
        stack.upstream.reply(Reply.fixture(AFTER))
        await send_back(sdk, output, keep_reasoning=True)
    assert len(stack.upstream.received) == 2


async def test_unstored_items_are_left_to_the_provider(stack: Stack):
    # store: false keeps nothing on the provider's side to bind the call to its reasoning.
    async with openai_sdk(stack) as sdk:
        output = await first_answer(stack, sdk)
        stack.upstream.reply(Reply.fixture(AFTER))
        await send_back(sdk, output, keep_reasoning=False, store=False)
    assert len(stack.upstream.received) == 2


async def test_another_credential_learns_nothing_of_the_answer(stack: Stack):
    async with openai_sdk(stack) as sdk:
        output = await first_answer(stack, sdk)
    stack.upstream.reply(Reply.fixture(AFTER))
    other = openai.AsyncOpenAI(
        api_key="sk-another-key", base_url=stack.base("/openai/v1"), max_retries=0
    )
    async with other:
        await send_back(other, output, keep_reasoning=False)
    assert len(stack.upstream.received) == 2


async def test_a_whole_answer_binds_its_items_too(stack: Stack):
    # Not streamed: a call the answer put right after its reasoning.
    answer = load_json(FIXTURES_DIR / "openai-responses/pai-nonstream-function-call.json")
    assert isinstance(answer, dict)
    answer = copy.deepcopy(answer)
    reasoning = {"type": "reasoning", "id": "rs_whole_1", "summary": []}
    answer["output"].insert(0, reasoning)
    stack.upstream.reply(Reply.json(answer))
    async with openai_sdk(stack) as sdk:
        first = await sdk.responses.create(
            model="gpt-5", input="Capital of PotatoLand?", tools=CAPITAL_TOOLS
        )
        call = first.output[1].model_dump(exclude_none=True)
        result = {"type": "function_call_output", "call_id": call["call_id"], "output": "x"}
        with pytest.raises(openai.BadRequestError) as caught:
            await sdk.responses.create(
                model="gpt-5",
                input=[{"role": "user", "content": "Capital of PotatoLand?"}, call, result],  # type: ignore[list-item]
                tools=CAPITAL_TOOLS,
            )
    assert caught.value.code == "responses_reasoning_missing"
    assert "rs_whole_1" in str(caught.value)
    assert len(stack.upstream.received) == 1


@pytest.mark.parametrize("store", ["sqlite", "redis"])
async def test_another_replica_refuses_the_call_without_its_reasoning(
    make_stack: StackFactory, tmp_path: Path, store: str
):
    # Two replicas sharing conversations: the second never relayed the answer, but the
    # store kept it for replay, and with it which reasoning each item came after.
    one = await stack_on(store, make_stack, tmp_path)
    other = await stack_on(store, make_stack, tmp_path)
    headers = {"Turngate-Conversation-Id": "reasoning-9"}
    async with openai_sdk(one, **headers) as sdk:
        output = await first_answer(one, sdk)
    async with openai_sdk(other, **headers) as sdk:
        with pytest.raises(openai.BadRequestError) as refused:
            await send_back(sdk, output, keep_reasoning=False)
        assert refused.value.response.headers["Turngate-Rejection"] == "responses_reasoning_missing"
        assert other.upstream.received == []
        other.upstream.reply(Reply.fixture(AFTER))
        await send_back(sdk, output, keep_reasoning=True)
    assert len(other.upstream.received) == 1


async def test_an_item_of_no_kept_answer_goes_up_and_is_looked_up_once(
    make_stack: StackFactory, tmp_path: Path
):
    one = await stack_on("sqlite", make_stack, tmp_path)
    other = await stack_on("sqlite", make_stack, tmp_path)
    headers = {"Turngate-Conversation-Id": "reasoning-10"}
    async with openai_sdk(one, **headers) as sdk:
        output = await first_answer(one, sdk)
    # An item id the kept answer does not hold (an older answer's, say): not judged.
    renamed = [
        {**item, "id": "fc_older"} if item["type"] == "function_call" else item for item in output
    ]
    reads = kept_answer_reads(other)
    other.upstream.reply(Reply.fixture(AFTER))
    async with openai_sdk(other, **headers) as sdk:
        first = await send_back(sdk, renamed, keep_reasoning=False)
        again = await send_back(sdk, renamed, keep_reasoning=False)  # a retry: replayed
    assert len(other.upstream.received) == 1
    assert again.id == first.id
    assert len(reads) == 1
