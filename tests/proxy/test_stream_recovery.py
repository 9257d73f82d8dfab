"""After an upstream failure: one retry when no byte came, resume by handle for Responses
background streams, and a late stream from an attempt the store no longer holds live."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.adapters import stream_faults as faults
from tests.adapters.test_stream_encoders import EXPECTED_ERRORS, client_calls, relay, sdk_read
from tests.adapters.test_stream_encoders import _is_native_error as is_native_error
from tests.fixtures_dir import COUNTS, FIXTURES_DIR, FIXTURES_PRESENT, fixture_paths
from tests.proxy.stream_support import (
    ROUTES,
    TERMINATORS,
    StackFactory,
    StreamStack,
    recorded_request,
    stream_stacks,
)
from tests.proxy.stream_upstream import End, Script
from turngate.graph.assembler import StreamFailed
from turngate.graph.codec import digest_bytes
from turngate.graph.turn import AssistantTurn
from turngate.proxy.stream import NO_BYTE, RETRIED
from turngate.state.machine import DispatchState, Transition

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")

APIS = ["openai_chat", "openai_responses", "anthropic", "gemini"]
CONVERSATION = {"Turngate-Conversation-Id": "conv-recovery"}


@pytest.fixture
async def stream_stack(aiohttp_server: Any, tmp_path: Path) -> AsyncIterator[StackFactory]:
    async with stream_stacks(aiohttp_server, tmp_path) as make:
        yield make


def tool_stream(api: str) -> Path:
    folder = faults.FOLDERS[api]
    paths = [p for p in fixture_paths(f"{folder}/*.sse") if p.with_suffix("").name]
    return next(
        p
        for p in paths
        if faults.has_tool_call(api, p.read_bytes())
        and p.with_name(p.name.removesuffix(".sse") + ".request.json").is_file()
    )


def clean_relay(api: str, data: bytes, generation: int = 1) -> bytes:
    out, outcome = relay(api, data)
    assert isinstance(outcome, AssistantTurn)
    return out.replace(b" g1.b", f" g{generation}.b".encode())


# --- retry once from the manifest bytes -------------------------------------------------------


@pytest.mark.parametrize("end", ["fin", "rst", "clean"])
@pytest.mark.parametrize("conversation", [True, False], ids=["conversation", "no-conversation"])
@pytest.mark.parametrize("api", APIS)
async def test_a_stream_closed_before_its_first_byte_is_retried_once(
    stream_stack: StackFactory, api: str, conversation: bool, end: End
) -> None:
    path = tool_stream(api)
    data = path.read_bytes()
    stack = await stream_stack(sqlite=True)
    stack.upstream.script(Script(data, cut=0, end=end), Script(data))
    run = await stack.post(api, recorded_request(path), CONVERSATION if conversation else {})
    first, second = await stack.store.records()
    assert (run.status, run.broken) == (200, False)
    # The client sees one clean stream: the retry's, with the retry's headers.
    generation = 2
    assert run.body == clean_relay(api, data, generation)
    assert run.headers["Turngate-Operation-Id"] == second.operation_id
    assert run.headers["Turngate-Attempt"] == str(second.manifest.attempt)
    assert (first.state, first.history[-1].detail) == (DispatchState.FAILED, RETRIED)
    assert second.state is DispatchState.COMMITTED
    # The same bytes went up twice, each attempt with its own idempotency key.
    posts = stack.upstream.received
    assert len(posts) == 2
    assert posts[0].body == posts[1].body
    assert (
        first.manifest.request_digest
        == second.manifest.request_digest
        == digest_bytes(posts[0].body)
    )
    keys = [p.headers["Idempotency-Key"] for p in posts]
    assert keys == [first.manifest.idempotency_key, second.manifest.idempotency_key]
    assert keys[0] != keys[1]
    if conversation:
        assert (first.manifest.attempt, second.manifest.attempt) == (1, 2)
        assert first.manifest.conversation_id == second.manifest.conversation_id
    COUNTS["proxy recovery: streams retried once and committed"] += 1


@pytest.mark.parametrize("sqlite", [True, False], ids=["sqlite", "memory"])
@pytest.mark.parametrize("api", APIS)
async def test_an_idempotency_key_follows_the_retry_that_answered(
    stream_stack: StackFactory, api: str, sqlite: bool
) -> None:
    # The first attempt closed before its first byte and the retry committed: the client's
    # key must now name the retry, so sending the request again replays its answer instead
    # of asking the provider a second time.
    path = tool_stream(api)
    data = path.read_bytes()
    stack = await stream_stack(sqlite=sqlite)
    stack.upstream.script(Script(data, cut=0, end="fin"), Script(data))
    key = {"Idempotency-Key": f"order-{api}"}
    run = await stack.post(api, recorded_request(path), key)
    assert (run.status, run.broken) == (200, False)
    again = await stack.post(api, recorded_request(path), key)
    assert (again.status, again.broken) == (200, False)
    assert again.headers["Turngate-Replay"] == "1"
    assert again.headers["Turngate-Operation-Id"] == run.headers["Turngate-Operation-Id"]
    assert again.body == run.body
    assert len(stack.upstream.received) == 2


@pytest.mark.parametrize("api", APIS)
async def test_only_one_retry(stream_stack: StackFactory, api: str) -> None:
    path = tool_stream(api)
    stack = await stream_stack()
    stack.upstream.default = Script(path.read_bytes(), cut=0, end="fin")
    run = await stack.post(api, recorded_request(path), CONVERSATION)
    records = await stack.store.records()
    assert len(stack.upstream.received) == 2
    assert [(r.state, r.history[-1].detail) for r in records] == [
        (DispatchState.FAILED, RETRIED),
        (DispatchState.FAILED, NO_BYTE),
    ]
    assert run.broken
    assert is_native_error(api, run.body)
    assert isinstance(sdk_read(api, run.body, aborted=True).error, EXPECTED_ERRORS[api])
    # FAILED, not UNKNOWN: the client may send the revision again.
    stack.upstream.default = Script(path.read_bytes())
    again = await stack.post(api, recorded_request(path), CONVERSATION)
    assert (again.status, again.broken) == (200, False)


@pytest.mark.parametrize("api", APIS)
async def test_no_retry_once_a_byte_came(stream_stack: StackFactory, api: str) -> None:
    path = tool_stream(api)
    stack = await stream_stack()
    stack.upstream.default = Script(path.read_bytes(), cut=20, end="fin")
    run = await stack.post(api, recorded_request(path), CONVERSATION)
    (record,) = await stack.store.records()
    assert len(stack.upstream.received) == 1
    assert run.broken
    assert is_native_error(api, run.body)
    # Nothing the provider runs, no tool call delivered: the cut attempt is over, and the
    # client's own retry of the revision is sent at once.
    assert record.state is DispatchState.FAILED
    stack.upstream.default = Script(path.read_bytes())
    again = await stack.post(api, recorded_request(path), CONVERSATION)
    assert (again.status, again.broken) == (200, False)
    assert len(stack.upstream.received) == 2


@pytest.mark.parametrize("api", ["openai_responses", "anthropic", "gemini"])
async def test_a_stream_cut_with_a_provider_run_tool_blocks_its_revision(
    stream_stack: StackFactory, api: str
) -> None:
    path = tool_stream(api)
    body = _with_hosted_tool(api, recorded_request(path))
    stack = await stream_stack()
    stack.upstream.default = Script(path.read_bytes(), cut=20, end="fin")
    run = await stack.post(api, body, CONVERSATION)
    (record,) = await stack.store.records()
    assert run.broken
    # The provider may have run its tool: unknown until the attempt is known to be over.
    assert record.state is DispatchState.UNKNOWN
    blocked = await stack.post(api, body, CONVERSATION)
    assert blocked.status == 409
    assert blocked.headers["Turngate-Rejection"] == "dispatch_conflict"


def _with_hosted_tool(api: str, body: dict[str, Any]) -> dict[str, Any]:
    hosted: dict[str, Any] = {
        "openai_responses": {"type": "web_search"},
        "anthropic": {"type": "web_search_20250305", "name": "web_search"},
        "gemini": {"codeExecution": {}},
    }
    return {**body, "tools": [*body.get("tools", []), hosted[api]]}


@pytest.mark.parametrize(
    "why",
    [
        "openai_responses hosted tool",
        "anthropic hosted tool",
        "gemini hosted tool",
        "openai_responses background",
        "openai_responses provider conversation",
    ],
)
async def test_no_retry_when_the_provider_may_act_before_its_first_byte(
    stream_stack: StackFactory, why: str
) -> None:
    api = why.split(maxsplit=1)[0]
    path = tool_stream(api)
    body = recorded_request(path)
    if why.endswith("hosted tool"):
        body = _with_hosted_tool(api, body)
    elif why.endswith("background"):
        body = {**body, "background": True}
    else:
        body = {**body, "conversation": "conv_provider"}
    stack = await stream_stack()
    stack.upstream.default = Script(path.read_bytes(), cut=0, end="fin")
    run = await stack.post(api, body)
    (record,) = await stack.store.records()
    assert len(stack.upstream.received) == 1
    assert record.state is DispatchState.UNKNOWN
    assert run.broken


# --- resume by handle (OpenAI Responses background streams) -----------------------------------

RESUMABLE = [
    pytest.param(p, id=p.name)
    for p in fixture_paths("openai-responses/*.sse")
    if b'"sequence_number"' in p.read_bytes()
    and isinstance(relay("openai_responses", p.read_bytes())[1], AssistantTurn)
]


def _background(path: Path) -> dict[str, Any]:
    return {**recorded_request(path), "background": True, "stream": True, "store": True}


@pytest.mark.parametrize("end", ["fin", "rst", "clean"])
@pytest.mark.parametrize("where", ["a third in", "mid-arguments", "before the terminator"])
@pytest.mark.parametrize("path", RESUMABLE)
async def test_a_dropped_background_stream_is_resumed_invisibly(
    stream_stack: StackFactory, path: Path, where: str, end: End
) -> None:
    data = path.read_bytes()
    ends = faults.frame_ends(data)
    if where == "a third in":
        cut = (ends[len(ends) // 3] + ends[len(ends) // 3 + 1]) // 2
    elif where == "before the terminator":
        cut = ends[-2]
    else:
        marker = data.find(b"response.function_call_arguments.delta")
        if marker < 0:
            pytest.skip("no streamed arguments")
        cut = marker + 40
    stack = await stream_stack()
    stack.upstream.script(Script(data, cut=cut, end=end))
    stack.upstream.resume_from = data
    # The server resumes from a little before the cursor: turngate drops what it had.
    stack.upstream.replay = 3
    run = await stack.post("openai_responses", _background(path))
    (record,) = await stack.store.records()
    assert (run.status, run.broken) == (200, False)
    assert run.body == clean_relay("openai_responses", data)
    assert record.state is DispatchState.COMMITTED
    post, *gets = stack.upstream.received
    assert len(gets) >= 1
    handle = record.handle
    assert handle is not None
    for get in gets:
        assert get.method == "GET"
        assert get.path_qs.startswith(f"/v1/responses/{handle}?stream=true&starting_after=")
        assert get.headers["Authorization"] == post.headers["Authorization"]
    COUNTS["proxy recovery: background streams resumed invisibly"] += 1


async def test_a_drop_that_came_with_the_bytes_before_it_is_resumed(
    stream_stack: StackFactory,
) -> None:
    """aiohttp raises a dropped connection before it hands out what it had buffered of the
    body. A proxy busy while both arrive (here the store's STREAM write takes a while) must
    still read those bytes: they hold the handle a resume needs."""
    path = RESUMABLE[0].values[0]
    assert isinstance(path, Path)
    data = path.read_bytes()
    stack = await stream_stack()
    stack.store.slow = {Transition.STREAM: 0.3}
    stack.upstream.script(Script(data, cut=len(data) // 2, end="fin"))
    stack.upstream.resume_from = data
    run = await stack.post("openai_responses", _background(path))
    (record,) = await stack.store.records()
    assert (run.status, run.broken) == (200, False)
    assert run.body == clean_relay("openai_responses", data)
    assert [r.method for r in stack.upstream.received] == ["POST", "GET"]
    assert record.state is DispatchState.COMMITTED


@pytest.mark.parametrize("status", [404, 500])
async def test_a_failed_resume_ends_in_the_error_event(
    stream_stack: StackFactory, status: int
) -> None:
    path = RESUMABLE[0].values[0]
    assert isinstance(path, Path)
    data = path.read_bytes()
    stack = await stream_stack()
    stack.upstream.script(Script(data, cut=len(data) // 2, end="fin"))
    stack.upstream.resume_from = data
    stack.upstream.resume_status = status
    run = await stack.post("openai_responses", _background(path))
    (record,) = await stack.store.records()
    assert [r.method for r in stack.upstream.received] == ["POST", "GET"]
    assert run.broken
    assert is_native_error("openai_responses", run.body)
    reading = sdk_read("openai_responses", run.body, aborted=True)
    assert isinstance(reading.error, EXPECTED_ERRORS["openai_responses"])
    # The background response may still finish upstream: its outcome is unknown.
    assert record.state is DispatchState.UNKNOWN


async def test_a_foreground_stream_is_not_resumed(stream_stack: StackFactory) -> None:
    path = RESUMABLE[0].values[0]
    assert isinstance(path, Path)
    data = path.read_bytes()
    stack = await stream_stack()
    stack.upstream.script(Script(data, cut=len(data) // 2, end="fin"))
    stack.upstream.resume_from = data
    run = await stack.post("openai_responses", recorded_request(path))
    assert [r.method for r in stack.upstream.received] == ["POST"]
    assert run.broken


# --- a late stream from an attempt the store no longer holds live -----------------------------


@pytest.mark.parametrize("api", APIS)
async def test_a_late_stream_from_a_taken_over_attempt_never_commits(
    stream_stack: StackFactory, api: str
) -> None:
    """Attempt 1 stalls after its first frame; a restarted replica's recovery makes it
    UNKNOWN, an operator settles it, and attempt 2 of the same revision streams and commits.
    Then attempt 1's stream arrives, late: none of its blocks is committed or relayed as
    committed, its client gets the API's error event, and the revision has one canonical
    turn."""
    path = tool_stream(api)
    data = path.read_bytes()
    stack = await stream_stack(sqlite=True)
    gate = asyncio.Event()
    first_frame = faults.frame_ends(data)[0]
    stack.upstream.script(Script(data, gate_at=first_frame, gate=gate), Script(data))
    late = asyncio.create_task(stack.post(api, recorded_request(path), CONVERSATION))
    while not stack.store.claimed or len(stack.upstream.received) < 1:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    (first_id,) = stack.store.claimed
    await stack.store.recover(now=1.0)
    await stack.store.transition(first_id, Transition.SETTLE, now=2.0, detail="operator")
    fresh = await stack.post(api, recorded_request(path), CONVERSATION)
    assert (fresh.status, fresh.broken) == (200, False)
    gate.set()
    run = await late
    first, second = await stack.store.records()
    assert (first.state, second.state) == (DispatchState.FAILED, DispatchState.COMMITTED)
    assert run.broken
    assert is_native_error(api, run.body)
    # Only what was committed before the takeover reached the client; nothing late.
    before, _ = relay(api, data[:first_frame])
    assert client_calls(api, run.body).calls == client_calls(api, before).calls
    terminator = TERMINATORS.get(api)
    assert terminator is None or terminator not in run.body
    assert isinstance(sdk_read(api, run.body, aborted=True).error, EXPECTED_ERRORS[api])
    (entry,) = await stack.store.read_log("quarantine", limit=10)
    assert entry["operationId"] == first_id
    COUNTS["proxy recovery: late streams of taken-over attempts quarantined"] += 1


async def test_a_commit_the_store_refuses_never_shows_the_end(stream_stack: StackFactory) -> None:
    path = tool_stream("anthropic")
    stack = await stream_stack()
    stack.store.refuse = {Transition.COMMIT}
    stack.upstream.default = Script(path.read_bytes())
    run = await stack.post("anthropic", recorded_request(path))
    assert run.broken
    assert b"message_stop" not in run.body
    assert is_native_error("anthropic", run.body)
    (record,) = await stack.store.records()
    assert record.state is DispatchState.STREAMING  # what the store last accepted


def _tool_frame_end(data: bytes, index: int) -> int:
    """Where the frame that starts the Chat tool call ``index`` ends."""
    marker = b'"tool_calls":[{"index":%d,"id"' % index
    return next(
        e
        for e, f in zip(faults.frame_ends(data), faults.split_frames(data), strict=True)
        if marker in f.raw
    )


@pytest.mark.parametrize(
    ("leave_at", "hosted", "state"),
    [
        ("first frame", False, DispatchState.FAILED),
        ("a tool call delivered", False, DispatchState.UNKNOWN),
        ("first frame", True, DispatchState.UNKNOWN),
    ],
    ids=["nothing-delivered", "call-delivered", "provider-run-tool"],
)
async def test_a_client_that_leaves_mid_stream(
    stream_stack: StackFactory, leave_at: str, hosted: bool, state: DispatchState
) -> None:
    """turngate closes the upstream when its client leaves, which ends the generation. The
    attempt is over (FAILED: the client's next request for the revision is sent at once)
    unless a tool call had reached the client, who may be running it, or the provider may
    have run a tool of its own: then UNKNOWN, the revision held until its deadline."""
    api = "openai_responses" if hosted else "openai_chat"
    path = (
        tool_stream(api)
        if hosted
        else FIXTURES_DIR / "openai-chat" / "pai-parallel-2-tool-calls.sse"
    )
    data = path.read_bytes()
    stack = await stream_stack()
    gate = asyncio.Event()
    # The second call's first frame commits the first: the client has it whole.
    at = faults.frame_ends(data)[0] if leave_at == "first frame" else _tool_frame_end(data, 1)
    stack.upstream.default = Script(data, gate_at=at, gate=gate)
    request = recorded_request(path)
    if hosted:
        request["tools"] = [*request.get("tools", []), {"type": "web_search"}]
    url = stack.url + ROUTES[api]
    headers = {"Content-Type": "application/json", **CONVERSATION}
    delivered = b'"tool_calls":[{"index":0'
    async with stack.client.post(url, data=orjson.dumps(request), headers=headers) as r:
        seen = await r.content.readany()
        while leave_at != "first frame" and delivered not in seen:
            seen += await r.content.readany()
        operation = r.headers["Turngate-Operation-Id"]
    gate.set()
    for _ in range(100):
        record = await stack.store.get(operation)
        assert record is not None
        if record.state is not DispatchState.STREAMING:
            break
        await asyncio.sleep(0.02)
    assert record.state is state
    assert record.history[-1].detail is not None
    assert record.history[-1].detail.startswith("c")  # "client disconnected", or cancelled
    stack.upstream.default = Script(data)
    again = await stack.post(api, request, CONVERSATION)
    if state is DispatchState.FAILED:
        assert (again.status, again.broken) == (200, False)
        assert len(stack.upstream.received) == 2
    else:
        assert again.status == 409
        assert len(stack.upstream.received) == 1


async def test_shadow_mode_relays_the_upstream_unchanged(stream_stack: StackFactory) -> None:
    path = tool_stream("openai_chat")
    data = path.read_bytes()
    stack = await stream_stack(mode="shadow")
    stack.upstream.default = Script(data)
    run = await stack.post("openai_chat", recorded_request(path))
    assert run.body == data
    stack.upstream.default = Script(data, cut=len(data) // 2, end="fin")
    cut = await stack.post("openai_chat", recorded_request(path))
    assert cut.body == data[: len(data) // 2]
    assert cut.broken
    states = [r.state for r in await stack.store.records()]
    assert states == [DispatchState.COMMITTED, DispatchState.UNKNOWN]
    _, outcome = relay("openai_chat", data[: len(data) // 2])
    assert isinstance(outcome, StreamFailed)


async def _read_around_a_gate(
    stack: StreamStack, api: str, body: dict[str, Any], gate: asyncio.Event
) -> tuple[bytes, bytes]:
    """What the client had received while the upstream stalled, and in the end."""
    received = bytearray()

    async def client() -> None:
        headers = {"Content-Type": "application/json"}
        async with stack.client.post(stack.url + ROUTES[api], json=body, headers=headers) as r:
            async for chunk in r.content.iter_any():
                received.extend(chunk)

    reader = asyncio.create_task(client())
    while not stack.upstream.received:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)
    before = bytes(received)
    gate.set()
    await reader
    return before, bytes(received)


@pytest.mark.parametrize("stream_text", ["preview", "buffer"])
async def test_buffered_text_reaches_the_client_only_with_its_commit(
    stream_stack: StackFactory, stream_text: str
) -> None:
    path = next(p for p in fixture_paths("anthropic/*text-only.sse"))
    data = path.read_bytes()
    middle = data.index(b"text_delta")
    stack = await stream_stack(policy={"defaults": {"stream_text": stream_text}})
    gate = asyncio.Event()
    stack.upstream.default = Script(data, gate_at=middle, gate=gate)
    before, after = await _read_around_a_gate(stack, "anthropic", recorded_request(path), gate)
    assert after == clean_relay("anthropic", data)
    if stream_text == "preview":
        assert b"message_start" in before
    else:
        assert before == b""
    (record,) = await stack.store.records()
    assert record.state is DispatchState.COMMITTED


async def test_events_after_the_terminator_are_quarantined_with_their_reason(
    stream_stack: StackFactory,
) -> None:
    path = tool_stream("openai_chat")
    data = path.read_bytes()
    first_frame = data[: data.index(b"\n\n") + 2]
    stack = await stream_stack()
    stack.upstream.default = Script(data + first_frame)
    run = await stack.post("openai_chat", recorded_request(path))
    assert not run.broken
    assert run.body.endswith(b"data: [DONE]\n\n")
    (entry,) = await stack.store.read_log("quarantine", limit=10)
    assert entry["reason"] == "event after the stream's terminator"
    assert entry["events"] >= 1
