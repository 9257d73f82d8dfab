"""OpenAI Responses background mode under Turngate-Conversation-Id.

``responses.create(background=True)`` answers at once with the response queued; the
application polls ``responses.retrieve`` until it is over, then goes on with the output in
its next request's input (or chains it by id). The turn is the one retrieved: the attempt
stays SENT, bound to the response's id, until the retrieval through turngate shows it over;
its calls are then checked as any answer's and the turn committed, so the next history
matches it. The recorded non-streamed function call (../shared/fixtures) is the response.
"""

from __future__ import annotations

import copy
from typing import Any

import openai
import orjson
import pytest

from tests.fixtures_dir import FIXTURES_DIR
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import get, openai_sdk, operation, states
from tests.proxy.policy_stack import start_policy_stack
from tests.proxy.stack import Stack
from turngate.proxy.app import SERVICES

REQUEST = "openai-responses/pai-nonstream-function-call.request.json"
ANSWER = "openai-responses/pai-nonstream-function-call.json"
NEXT = "openai-responses/pai-nonstream-after-function-output.request.json"
CONVERSATION = "bg-1"


def recorded(relative: str) -> dict[str, Any]:
    value = orjson.loads((FIXTURES_DIR / relative).read_bytes())
    assert isinstance(value, dict)
    return value


def response(status: str, **changes: Any) -> Reply:
    """The recorded response as a background one: still ``status``, or over."""
    body = {**copy.deepcopy(recorded(ANSWER)), "background": True, "status": status, **changes}
    if status in ("queued", "in_progress"):
        body["output"] = []
    return Reply.json(body)


def client(stack: Stack) -> openai.AsyncOpenAI:
    return openai_sdk(stack, **{"Turngate-Conversation-Id": CONVERSATION})


async def start(sdk: openai.AsyncOpenAI) -> Any:
    ask = {k: v for k, v in recorded(REQUEST).items() if k != "stream"}
    return await sdk.responses.create(**ask, background=True)


async def poll(sdk: openai.AsyncOpenAI, response_id: str) -> Any:
    while True:
        found = await sdk.responses.retrieve(response_id)
        if found.status not in ("queued", "in_progress"):
            return found


async def test_the_retrieved_turn_is_committed_and_the_next_history_holds_it(stack: Stack):
    stack.upstream.replies(
        response("queued"),
        response("in_progress"),
        response("completed"),
        Reply.fixture("openai-responses/pai-nonstream-after-function-output.json"),
    )
    async with client(stack) as sdk:
        queued = await start(sdk)
        assert queued.status == "queued"
        created = await sdk.responses.with_raw_response.retrieve(queued.id)
        assert created.parse().status == "in_progress"
        done = await poll(sdk, queued.id)
        assert [item.type for item in done.output] == ["function_call"]
        # The agent runs the tool and sends the whole history back.
        follow_up = {k: v for k, v in recorded(NEXT).items() if k != "stream"}
        await sdk.responses.create(**follow_up)
    assert len(stack.upstream.received) == 4
    status, kept = await get(stack, f"/turngate/v1/conversations/{CONVERSATION}")
    assert status == 200
    assert [t["revision"] for t in kept["turns"]] == [0, 1]
    first = await operation(stack, kept["turns"][0]["operationId"])
    assert states(first) == ["PREPARED", "DISPATCHING", "SENT", "SENT", "COMMITTED"]
    assert first["handle"] == queued.id


async def test_a_retrieved_call_that_cannot_be_committed_is_refused(stack: Stack):
    bad = copy.deepcopy(recorded(ANSWER)["output"])
    bad[0]["arguments"] = '{"country": 7}'  # the schema asks for a string
    stack.upstream.replies(response("queued"), *(response("completed", output=bad),) * 3)
    async with client(stack) as sdk:
        queued = await start(sdk)
        # With the SDK's own retries on: a retry of the refusal would get the calls through.
        with pytest.raises(openai.APIStatusError) as raised:
            await sdk.with_options(max_retries=2).responses.retrieve(queued.id)
        assert raised.value.status_code == 502
        assert "invalid_tool_call" in str(raised.value)
        assert len(stack.upstream.received) == 2
        # Retrieved again later: refused again.
        with pytest.raises(openai.APIStatusError) as again:
            await sdk.responses.retrieve(queued.id)
        assert "first retrieved" in str(again.value)
        # The call never ran, so it is no history: refused, nothing sent.
        follow_up = {k: v for k, v in recorded(NEXT).items() if k != "stream"}
        follow_up["input"][1]["arguments"] = '{"country": 7}'
        with pytest.raises(openai.BadRequestError) as refused:
            await sdk.responses.create(**follow_up)
    assert refused.value.response.headers["Turngate-Rejection"] == "history_mismatch"
    assert len(stack.upstream.received) == 3
    status, kept = await get(stack, f"/turngate/v1/conversations/{CONVERSATION}")
    assert (status, kept["turns"]) == (200, [])
    assert [o["state"] for o in kept["operations"]] == ["FAILED"]


@pytest.mark.parametrize("outcome", ["failed", "cancelled"])
async def test_a_response_that_ended_without_its_turn_frees_the_revision(
    stack: Stack, outcome: str
):
    stack.upstream.replies(response("queued"), response(outcome), response("queued"))
    async with client(stack) as sdk:
        queued = await start(sdk)
        over = await poll(sdk, queued.id)
        assert over.status == outcome
        again = await start(sdk)  # the same revision, asked again
    assert again.status == "queued"
    status, kept = await get(stack, f"/turngate/v1/conversations/{CONVERSATION}")
    assert status == 200
    assert [(o["attempt"], o["state"]) for o in kept["operations"]] == [(1, "FAILED"), (2, "SENT")]


async def test_an_incomplete_response_is_the_turn_the_agent_goes_on_from(stack: Stack):
    # Cut at max_output_tokens: the client keeps the partial text and asks it to go on, as it
    # would after a non-streamed answer cut the same way (committed as its turn).
    partial = {"type": "message", "id": "msg_1", "role": "assistant", "status": "incomplete"}
    partial["content"] = [
        {"type": "output_text", "text": "The capital of Potato", "annotations": []}
    ]
    cut = {"incomplete_details": {"reason": "max_output_tokens"}, "output": [partial]}
    stack.upstream.replies(response("queued"), response("incomplete", **cut), response("queued"))
    async with client(stack) as sdk:
        queued = await start(sdk)
        over = await poll(sdk, queued.id)
        assert over.output_text == "The capital of Potato"
        history = [
            *recorded(REQUEST)["input"],
            {"role": "assistant", "content": over.output_text},
            {"role": "user", "content": "Go on."},
        ]
        again = await sdk.responses.create(model="gpt-4o", input=history, background=True)
    assert again.status == "queued"
    assert len(stack.upstream.received) == 3
    status, kept = await get(stack, f"/turngate/v1/conversations/{CONVERSATION}")
    assert status == 200
    assert [t["revision"] for t in kept["turns"]] == [0]
    assert [o["state"] for o in kept["operations"]] == ["COMMITTED", "SENT"]


async def test_after_a_restart_the_retrieval_still_commits_the_turn(stack: Stack):
    stack.upstream.replies(response("queued"), response("completed"))
    async with client(stack) as sdk:
        queued = await start(sdk)
        # What the next start does with an attempt left in flight.
        [lost] = await stack.store.recover(now=stack.app[SERVICES].clock())
        assert (lost.state, lost.handle) == ("UNKNOWN", queued.id)
        done = await poll(sdk, queued.id)
    assert done.status == "completed"
    record = await operation(stack, lost.operation_id)
    assert states(record)[-2:] == ["UNKNOWN", "COMMITTED"]
    assert record["history"][-1]["transition"] == "recover"


async def test_an_answer_that_says_no_status_is_committed_as_it_comes(stack: Stack):
    # An OpenAI-compatible server may leave out ``status``: its answer is the turn.
    answer = {k: v for k, v in recorded(ANSWER).items() if k != "status"}
    stack.upstream.replies(Reply.json(answer))
    async with client(stack) as sdk:
        ask = {k: v for k, v in recorded(REQUEST).items() if k != "stream"}
        await sdk.responses.create(**ask)
    status, kept = await get(stack, f"/turngate/v1/conversations/{CONVERSATION}")
    assert status == 200
    assert [o["state"] for o in kept["operations"]] == ["COMMITTED"]
    assert [t["revision"] for t in kept["turns"]] == [0]


async def test_a_cancelled_response_frees_the_revision(stack: Stack):
    stack.upstream.replies(response("queued"), response("cancelled"), response("queued"))
    async with client(stack) as sdk:
        queued = await start(sdk)
        cancelled = await sdk.responses.cancel(queued.id)
        assert cancelled.status == "cancelled"
        again = await start(sdk)
    assert again.status == "queued"
    assert stack.upstream.received[1].method == "POST"
    assert stack.upstream.received[1].path_qs == f"/v1/responses/{queued.id}/cancel"
    status, kept = await get(stack, f"/turngate/v1/conversations/{CONVERSATION}")
    assert status == 200
    assert [(o["attempt"], o["state"]) for o in kept["operations"]] == [(1, "FAILED"), (2, "SENT")]


async def test_a_chained_request_continues_the_retrieved_response(stack: Stack):
    stack.upstream.replies(
        response("queued"),
        response("completed"),
        Reply.fixture("openai-responses/pai-nonstream-after-function-output.json"),
    )
    async with client(stack) as sdk:
        queued = await start(sdk)
        await poll(sdk, queued.id)
        output = {"type": "function_call_output", "output": "Potato City"}
        output["call_id"] = recorded(ANSWER)["output"][0]["call_id"]
        await sdk.responses.create(model="gpt-4o", previous_response_id=queued.id, input=[output])
    status, kept = await get(stack, f"/turngate/v1/conversations/{CONVERSATION}")
    assert (status, [t["revision"] for t in kept["turns"]]) == (200, [0, 1])


# --- retrievals that name no conversation -------------------------------------------------


def _bad_call() -> list[dict[str, Any]]:
    output = copy.deepcopy(recorded(ANSWER)["output"])
    output[0]["arguments"] = '{"country": 7}'  # the schema asks for a string
    return output


async def test_without_a_conversation_a_retrieved_call_that_cannot_be_committed_is_refused(
    stack: Stack,
):
    stack.upstream.replies(response("queued"), *(response("completed", output=_bad_call()),) * 4)
    async with openai_sdk(stack) as sdk:
        queued = await start(sdk)
        # The SDK's own retries on: the refusal says not to retry, and none is made.
        with pytest.raises(openai.APIStatusError) as raised:
            await sdk.with_options(max_retries=2).responses.retrieve(queued.id)
        assert raised.value.status_code == 502
        assert raised.value.response.headers["Turngate-Rejection"] == "invalid_tool_call"
        assert "country" in str(raised.value)
        assert len(stack.upstream.received) == 2
        # Nothing recorded it: it is checked, and refused, again.
        with pytest.raises(openai.APIStatusError):
            await sdk.responses.retrieve(queued.id)


async def test_without_a_conversation_a_retrieved_turn_that_passes_comes_unchanged(
    stack: Stack,
):
    done = response("completed")
    stack.upstream.replies(response("queued"), done)
    async with openai_sdk(stack) as sdk:
        queued = await start(sdk)
        raw = await sdk.responses.with_raw_response.retrieve(queued.id)
    assert raw.http_response.content == done.body
    assert [item.type for item in raw.parse().output] == ["function_call"]


@pytest.mark.parametrize("conversation", [False, True], ids=["plain", "conversation"])
async def test_a_request_chained_to_a_retrieved_call_must_answer_it(
    stack: Stack, conversation: bool
):
    stack.upstream.replies(response("queued"), response("completed"))
    async with client(stack) if conversation else openai_sdk(stack) as sdk:
        queued = await start(sdk)
        await poll(sdk, queued.id)
        # The agent lost the call's output and goes on without it: never sent.
        with pytest.raises(openai.BadRequestError) as refused:
            await sdk.responses.create(
                model="gpt-4o", previous_response_id=queued.id, input="And then?"
            )
    assert refused.value.response.headers["Turngate-Rejection"] == "missing_result"
    assert recorded(ANSWER)["output"][0]["call_id"] in str(refused.value)
    assert len(stack.upstream.received) == 2


async def test_without_a_conversation_an_incomplete_response_with_a_cut_call_is_refused(
    stack: Stack,
):
    output = copy.deepcopy(recorded(ANSWER)["output"])
    cut = {**output[0], "id": "fc_2", "call_id": "call_2", "arguments": '{"country": "Pot'}
    cut["status"] = "incomplete"
    reason = {"incomplete_details": {"reason": "max_output_tokens"}}
    stack.upstream.replies(
        response("queued"), response("incomplete", output=[*output, cut], **reason)
    )
    async with openai_sdk(stack) as sdk:
        queued = await start(sdk)
        with pytest.raises(openai.APIStatusError) as raised:
            await sdk.responses.retrieve(queued.id)
    assert raised.value.status_code == 502
    assert "call_2" in str(raised.value)


async def test_a_call_to_a_tool_the_echo_does_not_name_is_checked_as_an_object(stack: Stack):
    # A response echoes the request's tools, not those a client-run tool search loaded in its
    # history: such a call is no proof of an undeclared tool.
    loaded = [{**recorded(ANSWER)["output"][0], "name": "lookup_population"}]
    broken = [{**loaded[0], "arguments": '{"country": "Pota'}]
    stack.upstream.replies(
        response("queued"),
        response("completed", output=loaded),
        response("completed", output=broken),
    )
    async with openai_sdk(stack) as sdk:
        queued = await start(sdk)
        found = await sdk.responses.retrieve(queued.id)
        assert [item.name for item in found.output] == ["lookup_population"]
        with pytest.raises(openai.APIStatusError) as raised:
            await sdk.responses.retrieve(queued.id)
    assert raised.value.status_code == 502


async def test_a_shadowed_route_relays_the_retrieval_unchanged(aiohttp_server: Any):
    stack = await start_policy_stack(aiohttp_server, policy={"defaults": {"mode": "shadow"}})
    bad = response("completed", output=_bad_call())
    stack.upstream.replies(response("queued"), bad)
    async with openai_sdk(stack) as sdk:
        queued = await start(sdk)
        raw = await sdk.responses.with_raw_response.retrieve(queued.id)
    assert raw.http_response.content == bad.body
