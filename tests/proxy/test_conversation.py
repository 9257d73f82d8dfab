"""Conversations through the proxy: the history must hold the turns turngate committed.

Recorded multi-turn traffic (a turn streamed, then the next request whose history holds it)
passes; half of a previewed answer, an edited turn, or a turn never committed is refused
with ``history_mismatch`` before anything is sent. The cancel endpoint starts a new
generation: what the old one still streams is quarantined, never relayed.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from tests.adapters import stream_faults as faults
from tests.adapters.test_stream_encoders import _is_native_error as is_native_error
from tests.fixtures_dir import COUNTS, FIXTURES_DIR, FIXTURES_PRESENT
from tests.proxy.conftest import StackFactory
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import CHAT_ANSWER, get, post
from tests.proxy.stack import OPENAI_KEY
from tests.proxy.stream_support import (
    TERMINATORS,
    StreamStack,
    recorded_request,
    stream_stacks,
)
from tests.proxy.stream_upstream import Script
from turngate.state.machine import DispatchState
from turngate.state.store import DEFAULT_OPERATION_TTL

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")

CHAT = "/openai/v1/chat/completions"
HEADER = "Turngate-Conversation-Id"

# (api, the first turn's stream, the next request's stream, does its history hold the first
# turn as the provider streamed it?)
RECORDED_PAIRS = [
    ("openai_chat", "openai-chat/pai-tool-call-then-text-turn1", "turn2", True),
    ("openai_responses", "openai-responses/pai-function-call-turn1", "turn2", True),
    ("gemini", "gemini/pai-function-call-thought-signature-turn1", "turn2", True),
    # The recorded history says "I'll check … "PotatoLand."" with straight quotes where the
    # provider streamed typographic ones: not the turn it was given.
    ("openai_responses", "openai-responses/pai-phase-commentary-turn1", "turn2", False),
    # Turn 2 of this recording was never sent through turngate: not a committed turn.
    ("gemini", "gemini/pai-function-call-turn1", "turn3", False),
]


@pytest.fixture
async def streams(aiohttp_server: Any, tmp_path: Path) -> AsyncIterator[Any]:
    async with stream_stacks(aiohttp_server, tmp_path) as make:
        yield make


async def conversation(url: str, key: str) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{url}/turngate/v1/conversations/{key}") as resp,
    ):
        assert resp.status == 200, await resp.text()
        found: dict[str, Any] = orjson.loads(await resp.read())
        return found


async def cancel(url: str, key: str) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/turngate/v1/conversations/{key}/cancel") as resp,
    ):
        assert resp.status == 200, await resp.text()
        found: dict[str, Any] = orjson.loads(await resp.read())
        return found


@pytest.mark.parametrize(("api", "first", "then", "holds"), RECORDED_PAIRS)
async def test_recorded_next_turns_are_checked_against_the_committed_one(
    streams: Any, api: str, first: str, then: str, holds: bool
) -> None:
    stack: StreamStack = await streams(sqlite=True)
    path = FIXTURES_DIR / f"{first}.sse"
    nxt = path.with_name(path.name.replace("turn1", then))
    stack.upstream.script(Script(path.read_bytes()), Script(nxt.read_bytes()))
    headers = {HEADER: f"conv-{api}-{then}"}
    one = await stack.post(api, recorded_request(path), headers)
    assert (one.status, one.broken) == (200, False)
    two = await stack.post(api, recorded_request(nxt), headers)
    shown = await conversation(stack.url, f"conv-{api}-{then}")
    if holds:
        assert (two.status, two.broken) == (200, False)
        assert len(stack.upstream.received) == 2
        assert shown["revision"] == 2
        assert [t["operationId"] for t in shown["turns"]] == [
            one.headers["Turngate-Operation-Id"],
            two.headers["Turngate-Operation-Id"],
        ]
        COUNTS["conversations: recorded next turns accepted"] += 1
    else:
        assert two.status == 400
        assert two.headers["Turngate-Rejection"] == "history_mismatch"
        assert len(stack.upstream.received) == 1  # nothing sent for the refused request
        assert shown["revision"] == 1
        COUNTS["conversations: recorded next turns refused (history_mismatch)"] += 1


def previewed_text(sse: bytes) -> str:
    """What an OpenAI Chat client has seen of the answer's text so far."""
    text = ""
    for frame in faults.split_frames(sse):
        data = frame.data
        if isinstance(data, dict):
            for choice in data.get("choices") or []:
                text += (choice.get("delta") or {}).get("content") or ""
    return text


@pytest.mark.parametrize("sqlite", [False, True], ids=["memory", "sqlite"])
async def test_half_of_a_previewed_answer_is_not_history(streams: Any, sqlite: bool) -> None:
    path = FIXTURES_DIR / "openai-chat/pai-text-only.sse"
    data = path.read_bytes()
    text_frames = [
        e
        for e, f in zip(faults.frame_ends(data), faults.split_frames(data), strict=True)
        if previewed_text(f.raw)
    ]
    cut = text_frames[len(text_frames) // 2]
    stack: StreamStack = await streams(sqlite=sqlite)
    # Ends cleanly but short of its terminator: the previews were relayed, the turn never came.
    stack.upstream.script(Script(data, cut=cut, end="clean"))
    headers = {HEADER: "conv-preview"}
    first = recorded_request(path)
    broken = await stack.post("openai_chat", first, headers)
    assert broken.broken
    half = previewed_text(broken.body)
    assert 0 < len(half) < len(previewed_text(data))
    (record,) = await stack.store.records()
    # Over (nothing the provider runs, no tool call delivered), never committed.
    assert record.state is DispatchState.FAILED

    messages = [*first["messages"], {"role": "assistant", "content": half}]
    messages.append({"role": "user", "content": "Go on."})
    async with openai.AsyncOpenAI(
        api_key=OPENAI_KEY,
        base_url=stack.url + "/openai/v1",
        max_retries=0,
        default_headers=headers,
    ) as client:
        with pytest.raises(openai.BadRequestError) as raised:
            await client.chat.completions.create(model=first["model"], messages=messages)
    assert raised.value.code == "history_mismatch"
    assert "assistant turn 0 (messages[" in raised.value.message
    assert "never committed" in raised.value.message
    assert len(stack.upstream.received) == 1
    COUNTS["conversations: half-previewed answers refused as history"] += 1


async def test_an_sdk_conversation_goes_on_and_an_edited_turn_is_refused(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(state="memory://")
    stack.upstream.reply(CHAT_ANSWER)
    headers = {HEADER: "conv-sdk"}
    async with openai.AsyncOpenAI(
        api_key=OPENAI_KEY,
        base_url=stack.base("/openai/v1"),
        max_retries=0,
        default_headers=headers,
    ) as client:
        messages: list[Any] = [{"role": "user", "content": "Hi"}]
        first = await client.chat.completions.create(model="gpt-4o", messages=messages)
        messages.append(first.choices[0].message.model_dump(exclude_none=True))
        messages.append({"role": "user", "content": "And?"})
        second = await client.chat.completions.create(model="gpt-4o", messages=messages)
        assert second.choices[0].message.content == "hello"
        edited = [*messages[:1], {"role": "assistant", "content": "HELLO"}, *messages[2:]]
        with pytest.raises(openai.BadRequestError) as raised:
            await client.chat.completions.create(model="gpt-4o", messages=edited)
    assert raised.value.code == "history_mismatch"
    assert "differs from the turn committed for revision 0" in raised.value.message
    assert len(stack.upstream.received) == 2
    shown = await conversation(stack.url, "conv-sdk")
    assert (shown["revision"], shown["cancelGeneration"]) == (2, 0)
    assert [op["state"] for op in shown["operations"]] == ["COMMITTED", "COMMITTED"]


async def test_the_first_request_adopts_the_turns_it_brings(make_stack: StackFactory) -> None:
    stack = await make_stack()
    stack.upstream.reply(CHAT_ANSWER)
    headers = {HEADER: "conv-adopt", "Authorization": f"Bearer {OPENAI_KEY}"}
    example = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "3+3?"},
    ]
    status, _h, _b = await post(stack, CHAT, {"model": "gpt-4o", "messages": example}, headers)
    assert status == 200
    shown = await conversation(stack.url, "conv-adopt")
    assert shown["revision"] == 2
    assert shown["turns"][0]["operationId"] is None  # adopted, not committed
    answered = [
        *example,
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "ok"},
    ]
    status, _h, _b = await post(stack, CHAT, {"model": "gpt-4o", "messages": answered}, headers)
    assert status == 200
    changed = [{**m, "content": "5"} if m["content"] == "4" else m for m in answered]
    status, headers_out, _b = await post(
        stack, CHAT, {"model": "gpt-4o", "messages": changed}, headers
    )
    assert (status, headers_out["Turngate-Rejection"]) == (400, "history_mismatch")
    assert len(stack.upstream.received) == 2


async def test_a_committed_revision_whose_answer_is_not_kept_is_not_sent_again(
    make_stack: StackFactory,
) -> None:
    """A revision with its canonical turn in this generation and no operation left to replay
    it (a turn adopted from the first request's history, or one whose operation outlived
    --operation-ttl) is refused before anything is sent: the provider would answer a turn
    that can never be committed, and a tool it calls would run twice."""
    stack = await make_stack()
    stack.upstream.reply(CHAT_ANSWER)
    headers = {HEADER: "conv-old-turn", "Authorization": f"Bearer {OPENAI_KEY}"}
    first = [{"role": "user", "content": "2+2?"}]
    example = [*first, {"role": "assistant", "content": "4"}, {"role": "user", "content": "3+3?"}]
    assert (await post(stack, CHAT, {"model": "gpt-4o", "messages": example}, headers))[0] == 200
    status, out, body = await post(stack, CHAT, {"model": "gpt-4o", "messages": first}, headers)
    assert (status, out["Turngate-Rejection"]) == (409, "dispatch_conflict")
    assert b"no longer) kept for replay" in body
    assert len(stack.upstream.received) == 1
    shown = await conversation(stack.url, "conv-old-turn")
    assert [op["state"] for op in shown["operations"]] == ["COMMITTED"]


async def test_a_revision_whose_operation_was_pruned_is_not_sent_again(
    make_stack: StackFactory,
) -> None:
    # Answers kept as long as operations: what the prune takes is the operation alone.
    ttl = DEFAULT_OPERATION_TTL
    stack = await make_stack(operation_ttl=ttl, replay_ttl=ttl)
    stack.upstream.reply(CHAT_ANSWER)
    headers = {HEADER: "conv-pruned-turn", "Authorization": f"Bearer {OPENAI_KEY}"}
    first = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]}
    status, out, _b = await post(stack, CHAT, first, headers)
    assert status == 200
    turn = {"role": "assistant", "content": "hello"}
    second = {**first, "messages": [*first["messages"], turn, {"role": "user", "content": "?"}]}
    assert (await post(stack, CHAT, second, headers))[0] == 200
    old, young = await stack.store.conversation_operations("conv-pruned-turn", limit=5)
    # The first operation outlives the TTL; the second, and so the conversation, do not.
    await stack.store.prune(now=(old.history[0].at + young.history[0].at) / 2 + ttl)
    assert await stack.store.get(old.operation_id) is None
    assert await stack.store.get(young.operation_id) is not None
    assert old.operation_id == out["Turngate-Operation-Id"]

    status, refused, _b = await post(stack, CHAT, first, headers)
    assert (status, refused["Turngate-Rejection"]) == (409, "dispatch_conflict")
    status, replayed, _b = await post(stack, CHAT, second, headers)
    assert (status, replayed.get("Turngate-Replay")) == (200, "1")
    assert len(stack.upstream.received) == 2


async def test_cancel_lets_a_revision_be_answered_again(make_stack: StackFactory) -> None:
    stack = await make_stack()
    headers = {HEADER: "conv-cancel", "Authorization": f"Bearer {OPENAI_KEY}"}
    question = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]}
    assert (await get(stack, "/turngate/v1/conversations/conv-cancel"))[0] == 404
    stack.upstream.reply(CHAT_ANSWER)
    assert (await post(stack, CHAT, question, headers))[0] == 200
    shown = await cancel(stack.url, "conv-cancel")
    assert (shown["revision"], shown["cancelGeneration"]) == (1, 1)

    redone = orjson.loads(CHAT_ANSWER.body)
    redone["choices"][0]["message"]["content"] = "bonjour"
    stack.upstream.reply(Reply.json(redone))
    status, out, _b = await post(stack, CHAT, question, headers)
    assert status == 200
    assert "Turngate-Replay" not in out  # a new generation: answered again, not replayed
    after = await conversation(stack.url, "conv-cancel")
    assert [t["cancelGeneration"] for t in after["turns"]] == [1]
    assert after["turns"][0]["operationId"] == out["Turngate-Operation-Id"]

    def then(answer: str) -> dict[str, Any]:
        turn = {"role": "assistant", "content": answer}
        return {
            **question,
            "messages": [*question["messages"], turn, {"role": "user", "content": "?"}],
        }

    status, out, _b = await post(stack, CHAT, then("hello"), headers)
    assert (status, out["Turngate-Rejection"]) == (400, "history_mismatch")
    assert (await post(stack, CHAT, then("bonjour"), headers))[0] == 200
    assert len(stack.upstream.received) == 3


@pytest.mark.parametrize("api", ["openai_chat", "anthropic"])
async def test_a_cancelled_generation_streams_nothing_more_to_its_client(
    streams: Any, api: str
) -> None:
    """The old generation's stream arrives after a new generation started: its blocks go to
    the quarantine log, its client gets the API's error event, one canonical turn stays."""
    folder = faults.FOLDERS[api]
    path = next(
        p
        for p in sorted((FIXTURES_DIR / folder).glob("*.sse"))
        if faults.has_tool_call(api, p.read_bytes())
        and p.with_name(p.name.removesuffix(".sse") + ".request.json").is_file()
    )
    data = path.read_bytes()
    stack: StreamStack = await streams()
    gate = asyncio.Event()
    first_frame = faults.frame_ends(data)[0]
    stack.upstream.script(Script(data, gate_at=first_frame, gate=gate), Script(data))
    headers = {HEADER: f"conv-cancel-{api}"}
    late = asyncio.create_task(stack.post(api, recorded_request(path), headers))
    while len(stack.upstream.received) < 1 or not stack.store.claimed:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    shown = await cancel(stack.url, f"conv-cancel-{api}")
    assert [op["state"] for op in shown["operations"]] == ["CANCELLED"]

    fresh = await stack.post(api, recorded_request(path), headers)
    assert (fresh.status, fresh.broken) == (200, False)
    gate.set()
    run = await late
    assert run.broken
    assert is_native_error(api, run.body)
    terminator = TERMINATORS.get(api)
    assert terminator is not None
    assert terminator not in run.body
    first, second = await stack.store.records()
    assert (first.state, second.state) == (DispatchState.CANCELLED, DispatchState.COMMITTED)
    logged = await stack.store.read_log("quarantine", limit=10)
    assert [e["operationId"] for e in logged] == [first.operation_id]
    after = await conversation(stack.url, f"conv-cancel-{api}")
    # The turns its history brought (adopted), then the new generation's: one for the revision.
    assert after["revision"] == first.manifest.conversation_revision + 1
    assert after["turns"][-1]["operationId"] == second.operation_id
    assert first.operation_id not in [t["operationId"] for t in after["turns"]]
    COUNTS["conversations: cancelled generations quarantined"] += 1


async def test_a_non_streamed_answer_of_a_cancelled_generation_is_not_delivered(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    stack.upstream.reply(dataclasses.replace(CHAT_ANSWER, delay=1.5))
    headers = {HEADER: "conv-cancel-body", "Authorization": f"Bearer {OPENAI_KEY}"}
    question = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]}
    late = asyncio.create_task(post(stack, CHAT, question, headers))
    await asyncio.wait_for(stack.upstream.got_request.wait(), 5)
    await cancel(stack.url, "conv-cancel-body")
    status, out, body = await late
    assert (status, out["Turngate-Rejection"]) == (409, "attempt_superseded")
    assert b"hello" not in body
    (entry,) = await stack.store.read_log("quarantine", limit=5)
    assert (entry["operationId"], entry["blocks"]) == (out["Turngate-Operation-Id"], ["text"])
    assert (await conversation(stack.url, "conv-cancel-body"))["turns"] == []
    # The next generation answers the revision.
    status, out, body = await post(stack, CHAT, question, headers)
    assert (status, orjson.loads(body)["choices"][0]["message"]["content"]) == (200, "hello")
