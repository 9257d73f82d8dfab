"""Crash recovery in process: an UNKNOWN attempt blocks its revision until it is known to be
over (its deadline, or its Responses handle queried), a recovered turn becomes canonical and
is replayed, and a handle answered for another response is refused and quarantined."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer

from tests.adapters import stream_faults as faults
from tests.adapters.test_stream_encoders import sdk_read
from tests.clock import Clock
from tests.fixtures_dir import COUNTS, FIXTURES_PRESENT
from tests.proxy.stream_support import RecordingStore, StreamStack, recorded_request
from tests.proxy.stream_upstream import Script, ScriptedUpstream
from tests.proxy.test_stream_recovery import tool_stream
from turngate.graph.model import ApiName
from turngate.proxy.app import SERVICES, create_app
from turngate.proxy.recovery import recover_once
from turngate.proxy.upstream import UpstreamTimeouts
from turngate.settings import Settings
from turngate.state.machine import DispatchState, Transition
from turngate.state.sqlite import SQLiteStore
from turngate.state.store import OperationRecord

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")

S = DispatchState
DEADLINE = 120.0
CONVERSATION = {"Turngate-Conversation-Id": "conv-unknown"}


@dataclasses.dataclass
class Timed:
    stack: StreamStack
    clock: Clock
    app: Any


@pytest.fixture
async def timed(aiohttp_server: Any, tmp_path: Path) -> AsyncIterator[Callable[[], Any]]:
    sessions: list[aiohttp.ClientSession] = []

    async def make() -> Timed:
        upstream = ScriptedUpstream()
        upstream_server: TestServer = await aiohttp_server(upstream.app(), access_log=None)
        base = f"http://127.0.0.1:{upstream_server.port}"
        store = RecordingStore(SQLiteStore(tmp_path / "state.db"))
        clock = Clock(1_800_000_000.0)
        settings = Settings(
            upstream_openai=base,
            upstream_anthropic=base,
            upstream_gemini=base,
            unknown_deadline=DEADLINE,
        )
        app = create_app(
            settings,
            store=store,
            clock=clock,
            credential_secret="s",
            timeouts=UpstreamTimeouts(connect=2.0, read=5.0),
        )
        server: TestServer = await aiohttp_server(app, access_log=None)
        client = aiohttp.ClientSession()
        sessions.append(client)
        url = f"http://127.0.0.1:{server.port}"
        return Timed(StreamStack(url, base, upstream, store, client), clock, app)

    yield make
    for session in sessions:
        await session.close()


async def unknown_record(stack: StreamStack) -> OperationRecord:
    """The one attempt, once UNKNOWN: the client may see its stream break before the LOSE
    behind it is written."""
    for _ in range(500):
        (record,) = await stack.store.records()
        if record.state is S.UNKNOWN:
            return record
        await asyncio.sleep(0.01)
    raise AssertionError(f"the attempt stayed {record.state}: {record.history}")


def cut_after_bytes(data: bytes) -> Script:
    """The stream stops after its first two frames, short of its end: bytes reached the
    client (an attempt that declares a provider-run tool is then UNKNOWN)."""
    return Script(data, cut=faults.frame_ends(data)[1], end="clean")


def cut_after_a_tool_call(api: ApiName, data: bytes) -> Script:
    """The stream stops right after its first tool call reached the client, which may be
    running it: the attempt's outcome is UNKNOWN."""
    return Script(data, cut=faults.first_tool_call_end(api, data), end="clean")


@pytest.mark.parametrize("api", ["openai_chat", "anthropic"])
async def test_an_unknown_attempt_blocks_its_revision_until_its_deadline(
    timed: Callable[[], Any], api: ApiName
) -> None:
    run: Timed = await timed()
    stack, clock = run.stack, run.clock
    path = tool_stream(api)
    data = path.read_bytes()
    stack.upstream.script(cut_after_a_tool_call(api, data), Script(data))
    broken = await stack.post(api, recorded_request(path), CONVERSATION)
    assert broken.broken
    await unknown_record(stack)

    clock.now += 20
    blocked = await stack.post(api, recorded_request(path), CONVERSATION)
    assert (blocked.status, blocked.headers["Turngate-Rejection"]) == (409, "dispatch_conflict")
    assert blocked.headers["Retry-After"] == str(int(DEADLINE - 20))
    # Longer than the SDKs wait: their own retry, a second later, could only be refused.
    assert blocked.headers["x-should-retry"] == "false"
    clock.now += 50
    blocked = await stack.post(api, recorded_request(path), CONVERSATION)
    assert (blocked.headers["Retry-After"], blocked.headers["x-should-retry"]) == ("50", "true")
    assert len(stack.upstream.received) == 1  # no new generation before the old one is over

    clock.now += DEADLINE
    fresh = await stack.post(api, recorded_request(path), CONVERSATION)
    assert (fresh.status, fresh.broken) == (200, False)
    first, second = await stack.store.records()
    assert (first.state, second.state) == (S.FAILED, S.COMMITTED)
    assert first.history[-1].transition is Transition.SETTLE
    assert "deadline passed" in (first.history[-1].detail or "")
    assert second.manifest.attempt == 2
    conversation = await stack.store.conversation("conv-unknown")
    # The turns its history brought (adopted), then attempt 2's: one for the revision.
    assert conversation.revision == first.manifest.conversation_revision + 1
    assert conversation.turns[-1].operation_id == second.operation_id
    assert first.operation_id not in [t.operation_id for t in conversation.turns]
    COUNTS["recovery: UNKNOWN attempts held until their deadline"] += 1


async def test_the_background_task_settles_what_passed_its_deadline(
    timed: Callable[[], Any],
) -> None:
    run: Timed = await timed()
    stack, clock = run.stack, run.clock
    path = tool_stream("openai_chat")
    stack.upstream.script(cut_after_a_tool_call("openai_chat", path.read_bytes()))
    await stack.post("openai_chat", recorded_request(path), CONVERSATION)
    await unknown_record(stack)
    services = run.app[SERVICES]
    assert await recover_once(services) == 0
    clock.now += DEADLINE + 1
    assert await recover_once(services) == 1
    (record,) = await stack.store.records()
    assert record.state is S.FAILED
    assert await stack.store.unknown_operations(limit=5) == []


# --- OpenAI Responses: query the bound handle --------------------------------------------------


def background_request(path: Path) -> dict[str, Any]:
    return {**recorded_request(path), "background": True, "store": True}


def final_response(data: bytes, **changes: Any) -> bytes:
    """The completed Response object a GET of the handle answers: the stream's own last one."""
    for frame in reversed(faults.split_frames(data)):
        if isinstance(frame.data, dict) and frame.data.get("type") == "response.completed":
            return orjson.dumps({**frame.data["response"], **changes})
    raise AssertionError("no response.completed in the recording")


async def unknown_responses_attempt(run: Timed) -> tuple[Path, bytes, str]:
    path = tool_stream("openai_responses")
    data = path.read_bytes()
    stack = run.stack
    stack.upstream.resume_from = data
    stack.upstream.resume_status = 500  # the stream cannot be resumed: left UNKNOWN
    stack.upstream.script(cut_after_bytes(data))
    broken = await stack.post("openai_responses", background_request(path), CONVERSATION)
    assert broken.broken
    record = await unknown_record(stack)
    assert record.handle is not None
    return path, data, record.handle


async def test_a_completed_handle_is_recovered_and_replayed_as_a_stream(
    timed: Callable[[], Any],
) -> None:
    run: Timed = await timed()
    stack = run.stack
    path, data, handle = await unknown_responses_attempt(run)
    stack.upstream.script(Script(final_response(data), sse=False))
    retry = await stack.post("openai_responses", background_request(path), CONVERSATION)
    assert (retry.status, retry.broken, retry.headers["Turngate-Replay"]) == (200, False, "1")
    read, recorded = sdk_read("openai_responses", retry.body), sdk_read("openai_responses", data)
    assert read.error is None
    assert (read.text, read.calls) == (recorded.text, recorded.calls)
    (record,) = await stack.store.records()
    assert (record.state, record.history[-1].transition) == (S.COMMITTED, Transition.RECOVER)
    query = stack.upstream.received[-1]
    assert (query.method, query.path_qs) == ("GET", f"/v1/responses/{handle}")
    assert query.headers["Authorization"] == "Bearer k"  # the retry's own credential
    assert [r.method for r in stack.upstream.received].count("POST") == 1
    conversation = await stack.store.conversation("conv-unknown")
    assert [t.operation_id for t in conversation.turns] == [record.operation_id]
    # Recovered once: the next retry is a plain replay, no query.
    asked = len(stack.upstream.received)
    again = await stack.post("openai_responses", background_request(path), CONVERSATION)
    assert again.body == retry.body
    assert len(stack.upstream.received) == asked
    COUNTS["recovery: Responses handles recovered and replayed"] += 1


@pytest.mark.parametrize(("status", "outcome"), [("in_progress", 409), ("failed", 200)])
async def test_a_handle_still_running_blocks_and_a_failed_one_settles(
    timed: Callable[[], Any], status: str, outcome: int
) -> None:
    run: Timed = await timed()
    stack = run.stack
    path, data, _handle = await unknown_responses_attempt(run)
    stack.upstream.script(Script(final_response(data, status=status), sse=False), Script(data))
    retry = await stack.post("openai_responses", background_request(path), CONVERSATION)
    assert retry.status == outcome
    records = await stack.store.records()
    if status == "in_progress":
        assert [r.state for r in records] == [S.UNKNOWN]
    else:
        assert [r.state for r in records] == [S.FAILED, S.COMMITTED]
        assert "the provider says the response is failed" in (records[0].history[-1].detail or "")


async def test_a_handle_answered_for_another_response_is_refused_and_quarantined(
    timed: Callable[[], Any],
) -> None:
    run: Timed = await timed()
    stack = run.stack
    path, data, handle = await unknown_responses_attempt(run)
    stack.upstream.script(Script(final_response(data, id="resp_of_another_operation"), sse=False))
    retry = await stack.post("openai_responses", background_request(path), CONVERSATION)
    assert (retry.status, retry.headers["Turngate-Rejection"]) == (409, "handle_not_bound")
    assert b"resp_of_another_operation" not in retry.body
    (record,) = await stack.store.records()
    assert record.state is S.UNKNOWN
    (entry,) = await stack.store.read_log("quarantine", limit=5)
    assert (entry["operationId"], entry["handle"]) == (
        record.operation_id,
        "resp_of_another_operation",
    )
    conversation = await stack.store.conversation("conv-unknown")
    assert conversation is not None
    assert conversation.turns == ()
    assert handle != "resp_of_another_operation"
