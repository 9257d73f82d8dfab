"""Streamed retrievals of background responses: ``responses.retrieve(id, stream=True,
starting_after=N)``, openai's documented way to resume a background stream the application
lost, and ``responses.stream(response_id=id)``, through turngate with the official SDK.

The recorded stream (../shared/fixtures: narration, then a ``get_capital`` call) is what
the fake upstream answers every streamed retrieval with, after its ``starting_after``. The
client must get the same commit boundary as on the stream that created the response (the
call whole and checked against the tools the response echoes, only events after its
cursor), and under a conversation id the retrieval settles the attempt its client left.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.adapters import stream_faults as faults
from tests.adapters.test_stream_encoders import relay
from tests.fixtures_dir import COUNTS, FIXTURES_DIR, FIXTURES_PRESENT
from tests.proxy.stream_support import StackFactory, StreamStack, stream_stacks
from tests.proxy.stream_upstream import Script
from turngate.adapters.relay import StreamRelay
from turngate.graph.turn import AssistantTurn
from turngate.proxy.retrieved_stream import after_cursor
from turngate.state.machine import DispatchState, Transition

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")

TURN1 = FIXTURES_DIR / "openai-responses" / "pai-phase-commentary-turn1.sse"
TURN2 = FIXTURES_DIR / "openai-responses" / "pai-phase-commentary-turn2.sse"
CONVERSATION = "retrieved-1"
ARGUMENTS = '{"country":"PotatoLand"}'


@pytest.fixture
async def stream_stack(aiohttp_server: Any, tmp_path: Path) -> AsyncIterator[StackFactory]:
    async with stream_stacks(aiohttp_server, tmp_path) as make:
        yield make


def recorded() -> bytes:
    return TURN1.read_bytes() if FIXTURES_PRESENT else b""


def request_of(path: Path) -> dict[str, Any]:
    body = orjson.loads(path.with_name(path.name.replace(".sse", ".request.json")).read_bytes())
    assert isinstance(body, dict)
    return body


def numbered(stream: bytes) -> list[dict[str, Any]]:
    return [
        f.data
        for f in faults.split_frames(stream)
        if isinstance(f.data, dict) and "sequence_number" in f.data
    ]


def handle_of(stream: bytes) -> str:
    handle = numbered(stream)[0]["response"]["id"]
    assert isinstance(handle, str)
    return handle


def turngate_stream() -> list[dict[str, Any]]:
    """The events a client reads on turngate's own stream of the recording."""
    out, outcome = relay("openai_responses", recorded())
    assert isinstance(outcome, AssistantTurn)
    return numbered(out)


def sdk(stack: StreamStack, conversation: bool) -> openai.AsyncOpenAI:
    headers = {"Turngate-Conversation-Id": CONVERSATION} if conversation else {}
    return openai.AsyncOpenAI(
        api_key="sk-test",
        base_url=stack.url + "/openai/v1",
        max_retries=0,
        default_headers=headers,
    )


async def events_of(stream: Any) -> list[Any]:
    return [event async for event in stream]


async def read_to_failure(stream: Any) -> tuple[list[Any], openai.APIError]:
    """The events a stream gave before the error it raised."""
    got: list[Any] = []
    try:
        async for event in stream:
            got.append(event)
    except openai.APIError as exc:
        return got, exc
    raise AssertionError("the stream ended without an error")


def call_delivered(events: list[Any]) -> bool:
    return any(e.type == "response.function_call_arguments.done" for e in events)


# --- without a conversation id: what the client reads -----------------------------------------


CURSORS = [None, *range(len(numbered(recorded())))] if FIXTURES_PRESENT else [None]


@pytest.mark.parametrize("after", CURSORS, ids=lambda a: "absent" if a is None else f"after-{a}")
async def test_a_resumed_retrieval_reads_on_from_its_cursor(
    stream_stack: StackFactory, after: int | None
) -> None:
    stack = await stream_stack()
    stack.upstream.resume_from = recorded()
    handle = handle_of(recorded())
    async with sdk(stack, conversation=False) as client:
        extra = {} if after is None else {"starting_after": after}
        got = await events_of(await client.responses.retrieve(handle, stream=True, **extra))
    expected = [e for e in turngate_stream() if after is None or e["sequence_number"] > after]
    assert [(e.type, e.sequence_number) for e in got] == [
        (e["type"], e["sequence_number"]) for e in expected
    ]
    calls = [e for e in got if e.type == "response.function_call_arguments.delta"]
    # The call comes whole, in one delta, or not at all (the client saw it already).
    assert [c.delta for c in calls] in ([ARGUMENTS], [])
    (get,) = stack.upstream.received
    # The relay reads the whole stream, whatever the client's cursor.
    assert get.method == "GET"
    assert "starting_after" not in get.path_qs
    COUNTS["streamed retrievals: resumed from a cursor"] += 1


@pytest.mark.parametrize("marks", ["comments", "events"])
async def test_a_resumed_retrieval_marks_no_block_its_client_saw(
    stream_stack: StackFactory, marks: str
) -> None:
    stack = await stream_stack()
    stack.upstream.resume_from = recorded()
    events = numbered(recorded())
    # The client saw the narration committed: its marks came with it.
    after = next(
        e["sequence_number"]
        for e in events
        if e["type"] == "response.output_item.done" and e["item"]["type"] == "message"
    )
    url = f"{stack.url}/openai/v1/responses/{handle_of(recorded())}"
    query = {"stream": "true", "starting_after": str(after)}
    headers = {"Authorization": "Bearer k", "Turngate-Stream-Marks": marks}
    async with stack.client.get(url, params=query, headers=headers) as r:
        body = await r.read()
    # It opens with the first event after the cursor: no mark about the narration before it.
    first = faults.split_frames(body)[0].data
    assert isinstance(first, dict)
    assert first.get("sequence_number", -1) > after
    # The call's own marks come with it.
    marked = b"turngate commit" if marks == "comments" else b"event: turngate.commit"
    assert marked in body


async def test_a_retrieved_call_against_the_echoed_schema_is_refused(
    stream_stack: StackFactory,
) -> None:
    stack = await stream_stack()
    # The response says its tool takes an integer: the streamed string breaks the schema.
    stack.upstream.resume_from = recorded().replace(
        b'"country":{"type":"string"}', b'"country":{"type":"integer"}'
    )
    handle = handle_of(recorded())
    async with sdk(stack, conversation=False) as client:
        stream = await client.responses.retrieve(handle, stream=True, starting_after=3)
        got, error = await read_to_failure(stream)
    assert error.code == "schema_violation"
    assert "breaks its schema" in str(error)
    assert got
    assert all(e.sequence_number > 3 for e in got)
    assert not call_delivered(got)
    assert all(e.type != "response.completed" for e in got)


async def test_a_retrieval_under_shadow_is_relayed_as_asked(stream_stack: StackFactory) -> None:
    stack = await stream_stack(mode="shadow")
    stack.upstream.resume_from = recorded().replace(
        b'"country":{"type":"string"}', b'"country":{"type":"integer"}'
    )
    handle = handle_of(recorded())
    async with sdk(stack, conversation=False) as client:
        got = await events_of(
            await client.responses.retrieve(handle, stream=True, starting_after=3)
        )
    assert [e.sequence_number for e in got] == [
        e["sequence_number"] for e in numbered(recorded()) if e["sequence_number"] > 3
    ]
    # Read once to choose the policy, then relayed as the client asked it.
    assert ["starting_after=3" in r.path_qs for r in stack.upstream.received] == [
        False,
        True,
    ]


@pytest.mark.parametrize(
    ("query", "status"),
    [("stream=true&starting_after=3", 404), ("stream=true&starting_after=soon", 400)],
    ids=["gone", "a cursor that is no number"],
)
async def test_what_the_provider_refuses_comes_back_as_it_said_it(
    stream_stack: StackFactory, query: str, status: int
) -> None:
    stack = await stream_stack()
    said = b'{"error": {"message": "no", "type": "invalid_request_error"}}'
    stack.upstream.retrievals.append(Script(said, status=status, sse=False))
    url = f"{stack.url}/openai/v1/responses/{handle_of(recorded())}?{query}"
    async with stack.client.get(url, headers={"Authorization": "Bearer k"}) as r:
        assert (r.status, await r.read()) == (status, said)
    (asked,) = stack.upstream.received
    # A cursor the provider must judge goes up as the client sent it.
    assert ("soon" in asked.path_qs) is (status == 400)


# --- under a conversation id: the attempt the client left ------------------------------------


async def left_mid_stream(stack: StreamStack, client: openai.AsyncOpenAI) -> tuple[str, int]:
    """A background stream whose client reads the narration and leaves before the call: the
    attempt is UNKNOWN (the response runs on upstream). Its handle and the client's cursor."""
    data = recorded()
    frames = faults.split_frames(data)
    ends = faults.frame_ends(data)
    narrated = next(
        k
        for k, f in enumerate(frames)
        if isinstance(f.data, dict)
        and f.data.get("type") == "response.output_item.done"
        and f.data["item"]["type"] == "message"
    )
    gate = asyncio.Event()
    stack.upstream.script(Script(data, gate_at=ends[narrated], gate=gate))
    ask = {**request_of(TURN1), "background": True, "store": True}
    stream = await client.responses.create(**ask)
    cursor = -1
    async for event in stream:
        cursor = event.sequence_number
        if event.type == "response.output_item.done" and event.item.type == "message":
            break
    await stream.close()
    gate.set()
    assert await settled(stack, DispatchState.STREAMING) is DispatchState.UNKNOWN
    return handle_of(data), cursor


async def settled(stack: StreamStack, was: DispatchState = DispatchState.UNKNOWN) -> DispatchState:
    """The state of the conversation's one attempt once it left ``was`` (or after 2 s)."""
    (operation,) = stack.store.claimed
    for _ in range(200):
        record = await stack.store.get(operation)
        assert record is not None
        if record.state is not was:
            break
        await asyncio.sleep(0.01)
    return record.state


@pytest.mark.parametrize("how", ["retrieve", "stream helper"])
@pytest.mark.parametrize("sqlite", [False, True], ids=["memory", "sqlite"])
async def test_resuming_a_left_background_stream_commits_its_turn(
    stream_stack: StackFactory, how: str, sqlite: bool
) -> None:
    stack = await stream_stack(sqlite=sqlite)
    stack.upstream.resume_from = recorded()
    async with sdk(stack, conversation=True) as client:
        handle, cursor = await left_mid_stream(stack, client)
        if how == "retrieve":
            got = await events_of(
                await client.responses.retrieve(handle, stream=True, starting_after=cursor)
            )
            assert got
            assert all(e.sequence_number > cursor for e in got)
            assert got[-1].type == "response.completed"
            done = [e for e in got if e.type == "response.function_call_arguments.done"]
            assert [e.arguments for e in done] == [ARGUMENTS]
            final = got[-1].response
        else:
            async with client.responses.stream(response_id=handle, starting_after=cursor) as s:
                final = await s.get_final_response()
        call = final.output[-1]
        assert (call.type, call.arguments) == ("function_call", ARGUMENTS)
        # The agent runs the call and goes on, the output in its history, as openai's
        # examples do: the history holds the turn it retrieved.
        ask = request_of(TURN1)
        ask["input"] = [
            *ask["input"],
            *final.output,
            {"type": "function_call_output", "call_id": call.call_id, "output": "Potato City"},
        ]
        stack.upstream.script(Script(TURN2.read_bytes()))
        follow_up = await events_of(await client.responses.create(**ask))
    assert follow_up[-1].type == "response.completed"
    first, second = await stack.store.records()
    assert (first.state, second.state) == (DispatchState.COMMITTED, DispatchState.COMMITTED)
    assert [h.state for h in first.history][-2:] == [DispatchState.UNKNOWN, DispatchState.COMMITTED]
    COUNTS["streamed retrievals: left background streams committed"] += 1


async def test_a_client_leaving_while_the_handle_is_bound_leaves_it_bound(
    stream_stack: StackFactory,
) -> None:
    # The store takes its time over the bind, and the client leaves meanwhile (its handler
    # cancelled): the bind must still land, or no retrieval could commit the turn.
    stack = await stream_stack()
    stack.store.slow[Transition.BIND] = 0.3
    stack.upstream.resume_from = recorded()
    async with sdk(stack, conversation=True) as client:
        handle, cursor = await left_mid_stream(stack, client)
        (operation,) = stack.store.claimed
        record = await stack.store.get(operation)
        assert record is not None
        assert (record.state, record.handle) == (DispatchState.UNKNOWN, handle)
        stack.store.slow.clear()
        async with client.responses.stream(response_id=handle, starting_after=cursor) as s:
            await s.get_final_response()
    (record,) = [await stack.store.get(operation)]
    assert record is not None
    assert record.state is DispatchState.COMMITTED


async def test_a_refused_retrieved_turn_fails_its_attempt_and_stays_refused(
    stream_stack: StackFactory,
) -> None:
    stack = await stream_stack(sqlite=True)
    stack.upstream.resume_from = recorded()
    async with sdk(stack, conversation=True) as client:
        handle, cursor = await left_mid_stream(stack, client)
        # The provider's call breaks the schema this time (a bad replica, say).
        stack.upstream.resume_from = recorded().replace(
            b'"country":{"type":"string"}', b'"country":{"type":"integer"}'
        )
        stream = await client.responses.retrieve(handle, stream=True, starting_after=cursor)
        got, _ = await read_to_failure(stream)
        assert not call_delivered(got)
        # Recorded once the error event has left, the connection aborted.
        assert await settled(stack) is DispatchState.FAILED
        # Every later retrieval is refused before anything is asked of the provider.
        asked = len(stack.upstream.received)
        with pytest.raises(openai.APIStatusError) as again:
            await client.responses.retrieve(handle, stream=True)
        assert again.value.status_code == 502
        assert "first retrieved" in str(again.value)
        assert len(stack.upstream.received) == asked


async def test_a_retrieval_cut_short_leaves_the_attempt_for_the_next(
    stream_stack: StackFactory,
) -> None:
    stack = await stream_stack()
    stack.upstream.resume_from = recorded()
    async with sdk(stack, conversation=True) as client:
        handle, cursor = await left_mid_stream(stack, client)
        data = recorded()
        # The retrieval breaks before its end, and so does the relay's own resume of it.
        cut = faults.frame_ends(data)[-3]
        stack.upstream.retrievals.extend(Script(data, cut=cut, end="rst") for _ in range(4))
        with pytest.raises(openai.APIError):
            await events_of(
                await client.responses.retrieve(handle, stream=True, starting_after=cursor)
            )
        (record,) = await stack.store.records()
        assert record.state is DispatchState.UNKNOWN
        got = await events_of(
            await client.responses.retrieve(handle, stream=True, starting_after=cursor)
        )
    assert got[-1].type == "response.completed"
    (record,) = await stack.store.records()
    assert record.state is DispatchState.COMMITTED


# --- the cursor, however the stream is cut ----------------------------------------------------


def resumed(pieces: list[bytes], after: int) -> bytes:
    """What a client resuming after ``after`` gets when the upstream sends ``pieces``."""
    relay = StreamRelay("openai_responses", tools=None)
    out, passed = bytearray(), False
    for piece in pieces:
        written = relay.feed(piece)
        if not passed:
            written, passed = after_cursor(written, after)
        out += written
    tail, outcome = relay.finish()
    assert isinstance(outcome, AssistantTurn)
    out += tail if passed else after_cursor(tail, after)[0]
    return bytes(out)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_resume_gets_the_same_events_however_the_stream_is_cut(data: st.DataObject) -> None:
    stream = recorded()
    last = numbered(stream)[-1]["sequence_number"]
    after = data.draw(st.integers(min_value=0, max_value=last), label="after")
    cuts = sorted(
        data.draw(
            st.sets(st.integers(min_value=1, max_value=len(stream) - 1), max_size=16),
            label="cuts",
        )
    )
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    got = numbered(resumed(pieces, after))
    expected = [e for e in turngate_stream() if e["sequence_number"] > after]
    assert [(e["type"], e["sequence_number"]) for e in got] == [
        (e["type"], e["sequence_number"]) for e in expected
    ]
