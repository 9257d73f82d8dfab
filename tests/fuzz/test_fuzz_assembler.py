"""The stream assembler and each API's stream encoder under fuzzing: made-up canonical event
sequences (well-formed turns broken a little, or events in any order) with final native
objects taken from the recordings. Only typed turngate errors may escape."""

from __future__ import annotations

import functools
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fixtures_dir import COUNTS
from tests.fuzz import caught, drive_assembler
from tests.fuzz.strategies import (
    FUZZ,
    deep_arguments,
    frame_payloads,
    json_objects,
    json_values,
    marks,
    mutate_once,
    response_seeds,
    tool_names,
    tool_schemas,
    valid_text,
    walk,
)
from turngate.adapters import API_NAMES
from turngate.graph.assembler import MAX_NESTING
from turngate.graph.events import (
    ArgsDelta,
    BlockKind,
    BlockStart,
    BlockStop,
    CitationDelta,
    Native,
    OpaqueDelta,
    ReasoningDelta,
    ResponseStart,
    SignatureDelta,
    StreamDone,
    StreamError,
    StreamEvent,
    TextDelta,
    TurnEnd,
    UsageEvent,
)
from turngate.graph.model import ApiName
from turngate.graph.turn import Usage


@functools.cache
def native_objects(api: ApiName) -> tuple[dict[str, Any], ...]:
    """Every object inside ``api``'s recorded responses and stream frames: the raw material
    of the final native objects (blocks, items, parts) a BlockStop carries."""
    trees = response_seeds(api) + frame_payloads(api)
    found = {orjson.dumps(n): n for t in trees for n in walk(t) if isinstance(n, dict)}
    return tuple(found.values()) or ({},)


KINDS: tuple[BlockKind, ...] = (
    "text",
    "refusal",
    "reasoning",
    "tool_call",
    "server_tool",
    "unknown",
)
indexes = st.integers(0, 3) | st.sampled_from((-1, 2**63 - 1))
seqs = st.none() | st.integers(-1, 5)
# Decoders give an event its frame's bytes (or b"" for a sibling's) far more than None.
frame_bytes = st.binary(min_size=1, max_size=16)
raws = frame_bytes | frame_bytes | frame_bytes | st.just(b"") | st.none()
short = st.none() | st.deferred(tool_names)
arguments = (
    st.sampled_from(("{}", '{"city":"Paris"}', '{"city":', "[]", "", "null"))
    | deep_arguments
    | valid_text
)


@st.composite
def finals(draw: st.DrawFn, api: ApiName) -> dict[str, Any] | None:
    if draw(st.integers(0, 3)) == 0:
        return None
    native: dict[str, Any] = draw(st.sampled_from(native_objects(api)))
    if draw(st.booleans()):
        return native
    # No deeper than a decoder hands over: frame_json refuses frames nested past MAX_NESTING.
    mutated: dict[str, Any] = mutate_once(
        draw, native, native_objects(api), max_depth=MAX_NESTING - 8
    )
    return mutated


def events(api: ApiName) -> st.SearchStrategy[StreamEvent]:
    final = finals(api)
    return st.one_of(
        st.builds(ResponseStart, handle=short, model=short, native=final, seq=seqs, raw=raws),
        st.builds(
            BlockStart,
            index=indexes,
            kind=st.sampled_from(KINDS),
            call_id=short,
            name=short,
            native_type=short,
            native_index=st.none() | indexes,
            tool_type=st.sampled_from(("function", "custom")),
            phase=st.sampled_from(("call", "result")),
            payload=short,
            redacted=st.booleans(),
            attrs=json_objects(),
            seq=seqs,
            raw=raws,
        ),
        st.builds(TextDelta, index=indexes, text=valid_text, seq=seqs, raw=raws),
        st.builds(ArgsDelta, index=indexes, fragment=arguments, seq=seqs, raw=raws),
        st.builds(ReasoningDelta, index=indexes, text=valid_text, seq=seqs, raw=raws),
        st.builds(SignatureDelta, index=indexes, signature=valid_text, seq=seqs, raw=raws),
        st.builds(CitationDelta, index=indexes, citation=json_values, seq=seqs, raw=raws),
        st.builds(OpaqueDelta, index=indexes, native=json_objects(), seq=seqs, raw=raws),
        st.builds(
            BlockStop,
            index=indexes,
            final=final,
            arguments=st.none() | arguments,
            payload=short,
            attrs=json_objects(),
            seq=seqs,
            raw=raws,
        ),
        st.builds(TurnEnd, stop_reason=valid_text, native=final, seq=seqs, raw=raws),
        st.builds(
            UsageEvent,
            usage=st.builds(Usage, st.none() | st.integers(0), st.none() | st.integers(0)),
            native=final,
            seq=seqs,
            raw=raws,
        ),
        st.builds(StreamDone, seq=seqs, raw=raws),
        st.builds(StreamError, message=valid_text, native=final, seq=seqs, raw=raws),
        st.builds(Native, name=valid_text, index=st.none() | indexes, seq=seqs, raw=raws),
    )


@st.composite
def _plausible(draw: st.DrawFn, api: ApiName) -> list[StreamEvent]:
    """A well-formed turn (start, blocks, stop reason, terminator) with made-up content,
    then a few events dropped, repeated or slipped in, so the checks past the state
    machine (builders, argument and schema checks) are reached."""
    out: list[StreamEvent] = [ResponseStart(handle="h", model="m", raw=draw(raws))]
    for index in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(KINDS))
        out.append(BlockStart(index, kind, call_id=draw(short), name=draw(short), raw=draw(raws)))
        for _ in range(draw(st.integers(0, 3))):
            if kind in ("tool_call", "server_tool"):
                out.append(ArgsDelta(index, draw(arguments), raw=draw(raws)))
            elif kind == "reasoning":
                out.append(ReasoningDelta(index, draw(valid_text), raw=draw(raws)))
            else:
                out.append(TextDelta(index, draw(valid_text), raw=draw(raws)))
        stop_arguments = draw(st.none() | arguments)
        out.append(BlockStop(index, final=draw(finals(api)), arguments=stop_arguments))
    out += [TurnEnd(draw(valid_text)), StreamDone(raw=draw(raws))]
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(out) - 1))
        op = draw(st.sampled_from(("drop", "repeat", "insert")))
        if op == "drop":
            del out[at]
        elif op == "repeat":
            out.insert(at, out[at])
        else:
            out.insert(at, draw(events(api)))
    return out


def event_lists(api: ApiName) -> st.SearchStrategy[list[StreamEvent]]:
    return _plausible(api) | st.lists(events(api), max_size=12)


@pytest.mark.parametrize("api", API_NAMES)
@FUZZ
@given(data=st.data())
def test_assembler_and_encoder_raise_only_typed_errors(api: ApiName, data: st.DataObject) -> None:
    sequence = data.draw(event_lists(api), label="events")
    style = data.draw(marks, label="marks")
    tools = data.draw(tool_schemas, label="tools")
    outcome = caught(lambda: drive_assembler(api, sequence, marks=style, tools=tools))
    COUNTS["fuzz assembler examples"] += 1
    COUNTS[f"fuzz assembler outcome {outcome.split(':')[0]}"] += 1
