"""A conversation whose history the provider keeps: Responses ``previous_response_id``.

With ``previous_response_id`` a request carries only what follows that response (the call's
output, the next question); the turns before it are the provider's. Under
``Turngate-Conversation-Id`` such a request continues the conversation at the revision after
the response it names, which must be a turn turngate committed for this conversation: a
response whose stream broke (its id seen, its turn never committed) cannot be continued,
exactly as its preview text could not be sent back as history.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from tests.fixtures_dir import FIXTURES_DIR, FIXTURES_PRESENT, load_json
from tests.proxy.conftest import StackFactory, stack_on
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import get, openai_sdk
from tests.proxy.stack import Stack

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")

CALLS = "openai-responses/pai-nonstream-function-call.json"
AFTER = "openai-responses/pai-nonstream-after-function-output.json"
TOOLS: Any = [
    {
        "type": "function",
        "name": "get_capital",
        "parameters": {
            "type": "object",
            "properties": {"country": {"type": "string"}},
            "required": ["country"],
            "additionalProperties": False,
        },
        "strict": True,
    }
]


def text_answer(response_id: str, text: str) -> Reply:
    answer = load_json(FIXTURES_DIR / AFTER)
    assert isinstance(answer, dict)
    answer["id"] = response_id
    answer["output"][0]["content"][0]["text"] = text
    return Reply.json(answer)


async def ask_capital(stack: Stack, sdk: Any, **extra: Any) -> tuple[Any, dict[str, Any]]:
    """A request whose recorded answer calls get_capital; and the output answering it."""
    stack.upstream.reply(Reply.fixture(CALLS))
    first = await sdk.responses.create(
        model="gpt-4o", input="Capital of PotatoLand?", tools=TOOLS, **extra
    )
    (call,) = first.output
    return first, {"type": "function_call_output", "call_id": call.call_id, "output": "Mashville"}


def chained(previous: Any, item: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "previous_response_id": previous.id, "input": item, "tools": TOOLS}


async def test_each_chained_request_is_the_next_revision(stack: Stack):
    async with openai_sdk(stack, **{"Turngate-Conversation-Id": "chain-1"}) as sdk:
        first, output = await ask_capital(stack, sdk)
        stack.upstream.reply(Reply.fixture(AFTER))
        second = await sdk.responses.create(**chained(first, [output]))
        stack.upstream.reply(text_answer("resp_third", "It is famous for its potatoes."))
        third = await sdk.responses.create(**chained(second, "What is it famous for?"))
    assert third.output_text == "It is famous for its potatoes."
    assert len(stack.upstream.received) == 3
    status, record = await get(stack, "/turngate/v1/conversations/chain-1")
    assert status == 200
    assert record["revision"] == 3
    assert [t["revision"] for t in record["turns"]] == [0, 1, 2]


async def test_a_response_never_committed_cannot_be_continued(stack: Stack):
    async with openai_sdk(stack, **{"Turngate-Conversation-Id": "chain-2"}) as sdk:
        await ask_capital(stack, sdk)
        with pytest.raises(openai.BadRequestError) as raised:
            # e.g. the id of a response whose stream broke: seen, never committed
            await sdk.responses.create(
                model="gpt-4o", previous_response_id="resp_broken_stream", input="And then?"
            )
    assert raised.value.response.headers["Turngate-Rejection"] == "history_mismatch"
    assert "resp_broken_stream" in str(raised.value)
    assert len(stack.upstream.received) == 1


async def test_a_retried_chained_request_is_replayed(stack: Stack):
    async with openai_sdk(stack, **{"Turngate-Conversation-Id": "chain-3"}) as sdk:
        first, output = await ask_capital(stack, sdk)
        stack.upstream.reply(Reply.fixture(AFTER))
        second = await sdk.responses.with_raw_response.create(**chained(first, [output]))
        again = await sdk.responses.with_raw_response.create(**chained(first, [output]))
    assert again.headers["Turngate-Replay"] == "1"
    assert again.parse().id == second.parse().id
    assert len(stack.upstream.received) == 2


async def test_a_conversation_first_seen_chained_starts_there(stack: Stack):
    # Begun before turngate: the response it continues is not one turngate knows.
    async with openai_sdk(stack, **{"Turngate-Conversation-Id": "chain-4"}) as sdk:
        first, output = await ask_capital(stack, sdk, previous_response_id="resp_before_turngate")
        stack.upstream.reply(Reply.fixture(AFTER))
        await sdk.responses.create(**chained(first, [output]))
    status, record = await get(stack, "/turngate/v1/conversations/chain-4")
    assert status == 200
    assert [t["revision"] for t in record["turns"]] == [0, 1]


async def test_a_provider_conversation_object_is_refused_under_a_conversation_id(stack: Stack):
    async with openai_sdk(stack, **{"Turngate-Conversation-Id": "chain-5"}) as sdk:
        with pytest.raises(openai.BadRequestError) as raised:
            await sdk.responses.create(model="gpt-4o", conversation="conv_689667905b", input="Hi")
        # Without the header it is an ordinary request.
        stack.upstream.reply(Reply.fixture(AFTER))
        plain = openai_sdk(stack)
        await plain.responses.create(model="gpt-4o", conversation="conv_689667905b", input="Hi")
        await plain.close()
    assert "previous_response_id" in str(raised.value)
    assert len(stack.upstream.received) == 1


async def test_a_streamed_response_is_continued_by_its_id(stack: Stack):
    recording = "openai-responses/pai-function-call-turn1"
    request = load_json(FIXTURES_DIR / (recording + ".request.json"))
    assert isinstance(request, dict)
    async with openai_sdk(stack, **{"Turngate-Conversation-Id": "chain-6"}) as sdk:
        stack.upstream.reply(Reply.fixture(recording + ".sse"))
        stream = await sdk.responses.create(**{**request, "stream": True})
        events = [event async for event in stream]
        response = events[-1].response  # type: ignore[union-attr]
        (call,) = [item for item in response.output if item.type == "function_call"]
        output = {"type": "function_call_output", "call_id": call.call_id, "output": "done"}
        stack.upstream.reply(Reply.fixture(AFTER))
        await sdk.responses.create(
            model=request["model"], previous_response_id=response.id, input=[output]
        )
    status, record = await get(stack, "/turngate/v1/conversations/chain-6")
    assert (status, [t["revision"] for t in record["turns"]]) == (200, [0, 1])


def with_second_call(response: dict[str, Any]) -> dict[str, Any]:
    """The recorded answer calling get_capital twice, in parallel."""
    (call,) = response["output"]
    second = {**call, "id": "fc_second", "call_id": "call_second"}
    second["arguments"] = '{"country": "Spain"}'
    return {**response, "output": [call, second]}


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("conversation", [False, True], ids=["plain", "conversation"])
async def test_a_chained_request_must_answer_every_call_it_follows(
    stack: Stack, conversation: bool, streamed: bool
):
    headers = {"Turngate-Conversation-Id": "chain-7"} if conversation else {}
    async with openai_sdk(stack, **headers) as sdk:
        if streamed:
            recording = "openai-responses/pai-function-call-turn1"
            request = load_json(FIXTURES_DIR / (recording + ".request.json"))
            assert isinstance(request, dict)
            stack.upstream.reply(Reply.fixture(recording + ".sse"))
            stream = await sdk.responses.create(**{**request, "stream": True})
            first = [event async for event in stream][-1].response
        else:
            first, _ = await ask_capital(stack, sdk)
        (call,) = [item for item in first.output if item.type == "function_call"]
        # The agent lost the output (a crash, a dropped deferred result) and goes on.
        with pytest.raises(openai.BadRequestError) as refused:
            await sdk.responses.create(**chained(first, "And its population?"))
        assert refused.value.response.headers["Turngate-Rejection"] == "missing_result"
        assert call.call_id in str(refused.value)
        assert len(stack.upstream.received) == 1
        # With the output, the same request goes.
        output = {"type": "function_call_output", "call_id": call.call_id, "output": "Mashville"}
        stack.upstream.reply(Reply.fixture(AFTER))
        asked = {"role": "user", "content": "And its population?"}
        await sdk.responses.create(**chained(first, [output, asked]))
    assert len(stack.upstream.received) == 2


async def test_each_parallel_call_needs_its_output(stack: Stack):
    answer = load_json(FIXTURES_DIR / CALLS)
    assert isinstance(answer, dict)
    stack.upstream.reply(Reply.json(with_second_call(answer)))
    async with openai_sdk(stack) as sdk:
        first = await sdk.responses.create(model="gpt-4o", input="Capitals?", tools=TOOLS)
        one = {"type": "function_call_output", "call_id": first.output[0].call_id, "output": "x"}
        with pytest.raises(openai.BadRequestError) as refused:
            await sdk.responses.create(**chained(first, [one]))
    assert "call_second" in str(refused.value)
    assert first.output[0].call_id not in str(refused.value)
    assert len(stack.upstream.received) == 1


@pytest.mark.parametrize("store", ["sqlite", "redis"])
async def test_another_replica_refuses_a_chained_request_without_the_outputs(
    make_stack: StackFactory, tmp_path: Path, store: str
):
    # Two replicas sharing conversations: the second never saw the first's answer, but
    # the store kept it for replay.
    one = await stack_on(store, make_stack, tmp_path)
    other = await stack_on(store, make_stack, tmp_path)
    headers = {"Turngate-Conversation-Id": "chain-8"}
    async with openai_sdk(one, **headers) as sdk:
        first, output = await ask_capital(one, sdk)
    async with openai_sdk(other, **headers) as sdk:
        with pytest.raises(openai.BadRequestError) as refused:
            await sdk.responses.create(**chained(first, "And its population?"))
        assert refused.value.response.headers["Turngate-Rejection"] == "missing_result"
        assert other.upstream.received == []
        other.upstream.reply(Reply.fixture(AFTER))
        await sdk.responses.create(**chained(first, [output]))
    assert len(other.upstream.received) == 1


async def test_another_caller_naming_the_reply_learns_nothing_of_its_calls(stack: Stack):
    async with openai_sdk(stack) as sdk:
        first, _ = await ask_capital(stack, sdk)
    # Another credential, the same response id: not this caller's reply to judge.
    other = openai.AsyncOpenAI(
        api_key="sk-another-caller", base_url=stack.base("/openai/v1"), max_retries=0
    )
    stack.upstream.reply(Reply.fixture(AFTER))
    async with other:
        await other.responses.create(**chained(first, "And its population?"))
    assert len(stack.upstream.received) == 2
