"""A fault-injecting upstream behind the real proxy socket, replaying every recorded stream.

Faults: the connection cut at every frame boundary of each tool-call stream and inside each
frame that carries tool arguments (every byte offset is covered at the pure level, in
tests/adapters/test_stream_encoders.py); each delta sent twice; the first two blocks
swapped; a tool call's stop removed; the terminator removed; the connection dropped in
the middle of the arguments, closed (every byte delivered) or reset. Over all of it, read
from the bytes the client received: no partial tool call, every broken run ends with the
API's own error event and an aborted connection that makes the official SDK raise, and an
operation is COMMITTED exactly when the upstream's terminal event came (a later case shows
the converse: the commit is recorded before the client sees the end).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.adapters import stream_faults as faults
from tests.adapters.test_stream_encoders import EXPECTED_ERRORS, client_calls, relay, sdk_read
from tests.adapters.test_stream_encoders import _is_native_error as is_native_error
from tests.fixtures_dir import COUNTS, FIXTURES_PRESENT
from tests.proxy.stream_support import (
    TERMINATORS,
    ClientRun,
    StackFactory,
    StreamStack,
    api_of,
    recorded_request,
    stream_stacks,
    streams,
)
from tests.proxy.stream_upstream import End, Script
from turngate.graph.assembler import StreamFailed
from turngate.graph.turn import AssistantTurn
from turngate.state.machine import DispatchState

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")


@pytest.fixture
async def stream_stack(aiohttp_server: Any, tmp_path: Path) -> AsyncIterator[StackFactory]:
    async with stream_stacks(aiohttp_server, tmp_path) as make:
        yield make


@dataclass
class Tally:
    runs: int = 0
    broken: int = 0
    committed: int = 0
    sdk_raised: int = 0
    whole_calls: int = 0
    seen: set[bytes] = field(default_factory=set)

    def report(self, fault: str) -> None:
        COUNTS[f"proxy faults: {fault}"] += self.runs
        COUNTS["proxy faults: broken runs (error event, connection aborted)"] += self.broken
        COUNTS["proxy faults: distinct broken client streams, official SDK raised"] += (
            self.sdk_raised
        )
        COUNTS["proxy faults: whole tool calls delivered"] += self.whole_calls
        COUNTS["proxy faults: runs COMMITTED (terminal event present)"] += self.committed


def has_terminal_event(api: str, sent: bytes, end: End) -> bool:
    """Whether the upstream's terminal event reached turngate (Gemini: its clean end)."""
    frames = faults.split_frames(sent)
    complete = [f for f in frames if f.raw.endswith((b"\n\n", b"\r\n\r\n"))]
    arrived = any(faults.is_terminator(api, f) for f in complete)
    return arrived and (api != "gemini" or end == "clean")


async def run_fault(
    stack: StreamStack,
    path: Path,
    script: Script,
    original_calls: list[tuple[str, Any]],
    tally: Tally,
    label: str,
) -> ClientRun:
    """One faulty upstream through the proxy, with every client-side invariant checked."""
    api = api_of(path)
    await stack.store.forget()
    stack.upstream.default = script
    run = await stack.post(api, recorded_request(path))
    sent = script.body if script.cut is None else script.body[: script.cut]
    records = await stack.store.records()
    assert records, f"{label}: no operation"
    calls = client_calls(api, run.body)
    COUNTS["proxy faults: partial tool calls reaching the client"] += calls.partial
    assert calls.partial == 0, f"{label}: a partial tool call reached the client"
    assert calls.fragmented == 0, f"{label}: a tool call reached the client in pieces"
    assert all(c in original_calls for c in calls.calls), f"{label}: a call not in the stream"
    tally.runs += 1
    tally.whole_calls += calls.whole
    committed = [r for r in records if r.state is DispatchState.COMMITTED]
    _, pure = relay(api, sent)
    canonical = isinstance(pure, AssistantTurn)
    if api == "gemini" and script.end != "clean":
        canonical = False  # Gemini's end is the connection's clean close
    if committed:
        # Never COMMITTED without the terminal event, and the client saw the end.
        assert has_terminal_event(api, sent, script.end), f"{label}: committed without its end"
        assert len(committed) == 1
        assert canonical, f"{label}: committed what the relay does not hold canonical"
        assert not run.broken, f"{label}: committed but the client's stream broke"
        terminator = TERMINATORS.get(api)
        assert terminator is None or run.body.count(terminator) == 1
        tally.committed += 1
        return run
    assert not canonical, f"{label}: a canonical turn was not committed"
    assert {r.state for r in records} <= {DispatchState.FAILED, DispatchState.UNKNOWN}
    tally.broken += 1
    assert run.status == 200
    assert run.broken, f"{label}: a failed stream ended cleanly"
    assert is_native_error(api, run.body), f"{label}: no native error event at the end"
    terminator = TERMINATORS.get(api)
    assert terminator is None or terminator not in run.body, f"{label}: terminator after failure"
    digest = hashlib.sha256(run.body).digest()
    if digest not in tally.seen:
        tally.seen.add(digest)
        reading = sdk_read(api, run.body, aborted=True)
        assert isinstance(reading.error, EXPECTED_ERRORS[api]), (label, reading.error)
        tally.sdk_raised += 1
    return run


def original_calls(api: str, data: bytes) -> list[tuple[str, Any]]:
    out, _ = relay(api, data)
    return client_calls(api, out).calls


def argument_frames(api: str, data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each frame that carries tool-call arguments."""
    marker = {
        "openai_chat": b'"arguments":"',
        "anthropic": b'"partial_json":"',
        "openai_responses": b"function_call_arguments.delta",
        "gemini": b'"functionCall"',
    }[api]
    spans, at = [], 0
    for frame in faults.split_frames(data):
        if marker in frame.raw:
            spans.append((at, at + len(frame.raw)))
        at += len(frame.raw)
    return spans


@pytest.mark.parametrize("path", streams(tools_only=True))
async def test_cut_at_every_frame_boundary_and_inside_arguments(
    stream_stack: StackFactory, path: Path
) -> None:
    api, data = api_of(path), path.read_bytes()
    stack = await stream_stack()
    calls = original_calls(api, data)
    ends = faults.frame_ends(data)
    offsets = {0, *ends[:-1]}
    inside = {(start + end) // 2 for start, end in argument_frames(api, data)}
    tally = Tally()
    for offset in sorted(offsets | inside):
        script = Script(data, cut=offset, end="fin")
        run = await run_fault(stack, path, script, calls, tally, f"cut at {offset}")
        assert run.broken or api != "gemini"
    COUNTS["proxy faults: cut offsets inside argument frames"] += len(inside - offsets)
    tally.report("connection cut (every frame boundary, inside arguments)")


def _each_fault(api: str, data: bytes) -> list[tuple[str, Script | None]]:
    def clean(body: bytes | None) -> Script | None:
        return None if body is None else Script(body)

    cut = faults.cut_mid_arguments(api, data)
    return [
        ("each delta duplicated", clean(faults.duplicate_deltas(api, data))),
        ("blocks reordered", clean(faults.reorder_blocks(api, data))),
        ("tool stop removed", clean(faults.drop_tool_stop(api, data))),
        ("terminator removed", clean(faults.drop_terminator(api, data))),
        ("dropped mid-arguments", None if cut is None else Script(cut, end="fin")),
        ("reset mid-arguments", None if cut is None else Script(cut, end="rst")),
    ]


@pytest.mark.parametrize("path", streams())
async def test_faulty_upstreams_never_deliver_a_partial_call(
    stream_stack: StackFactory, path: Path
) -> None:
    api, data = api_of(path), path.read_bytes()
    stack = await stream_stack()
    calls = original_calls(api, data)
    _, clean = relay(api, data)
    for fault, script in _each_fault(api, data):
        if script is None:
            continue
        tally = Tally()
        run = await run_fault(stack, path, script, calls, tally, fault)
        if fault in ("tool stop removed", "terminator removed") or "mid-arguments" in fault:
            assert run.broken, fault
        if fault == "each delta duplicated" and b'"sequence_number"' in data:
            # Numbered events: duplicates are dropped and the turn goes through unchanged.
            assert run.broken == isinstance(clean, StreamFailed)
        tally.report(fault)
