"""Streams under fuzzing: broken recordings through the SSE decoder, each API's stream
decoder, and the whole relay (assembler and encoder included); made-up event sequences
through the assembler. Only typed turngate errors may escape."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fixtures_dir import COUNTS
from tests.fuzz import caught, drive_decoder, drive_relay, drive_sse
from tests.fuzz.strategies import FUZZ, cuts, marks, mutated_stream, relay_steps, tool_schemas
from turngate.adapters import API_NAMES
from turngate.graph.model import ApiName

limits = st.sampled_from((1024, 16384, 65536))


@FUZZ
@given(data=st.data())
def test_sse_decoder_raises_only_typed_errors(data: st.DataObject) -> None:
    api = data.draw(st.sampled_from(API_NAMES), label="api")
    max_line = data.draw(limits, label="max_line")
    max_frame = max_line * data.draw(st.sampled_from((1, 2, 4)), label="frame factor")
    stream = data.draw(mutated_stream(api, giant=max_line), label="stream")
    pieces = data.draw(cuts(stream), label="pieces")
    strict = data.draw(st.booleans(), label="strict")

    outcome = caught(
        lambda: drive_sse(pieces, max_line=max_line, max_frame=max_frame, strict=strict)
    )
    COUNTS["fuzz sse examples"] += 1
    COUNTS[f"fuzz sse outcome {outcome.split(':')[0]}"] += 1


@pytest.mark.parametrize("api", API_NAMES)
@FUZZ
@given(data=st.data())
def test_stream_decoder_raises_only_typed_errors(api: ApiName, data: st.DataObject) -> None:
    stream = data.draw(mutated_stream(api), label="stream")
    outcome = caught(lambda: drive_decoder(api, stream))
    COUNTS["fuzz stream decoder examples"] += 1
    COUNTS[f"fuzz stream decoder outcome {outcome.split(':')[0]}"] += 1


@pytest.mark.parametrize("api", API_NAMES)
@FUZZ
@given(data=st.data())
def test_stream_relay_never_raises(api: ApiName, data: st.DataObject) -> None:
    """Stricter than the other targets: the proxy writes what the relay returns and reads its
    outcome, so every failure must come back as the API's error event, not as an exception."""
    small = data.draw(st.booleans(), label="small limits")
    max_line = 16384 if small else 4 * 1024 * 1024
    steps = data.draw(relay_steps(api, giant=max_line if small else 16384), label="steps")
    style = data.draw(marks, label="marks")
    tools = data.draw(tool_schemas, label="tools")
    outcome = drive_relay(
        api, steps, marks=style, tools=tools, max_line=max_line, max_frame=4 * max_line
    )
    COUNTS["fuzz relay examples"] += 1
    COUNTS[f"fuzz relay outcome {outcome.split(':')[0]}"] += 1
