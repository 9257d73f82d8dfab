"""A kept answer reads back as the turn committed for it (proxy/continuation.py).

A Gemini hop continued by token and an Anthropic turn resumed in its thread are committed
with the blocks of the answers before them, read back from what turngate kept for replay:
for a stream, the bytes it relayed, marks and all. Over every recorded stream that ends in
a turn, in each mark style, the blocks read back digest as the relayed turn's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures_dir import fixture_params
from turngate.adapters.relay import StreamRelay
from turngate.adapters.sse import MARK_STYLES, MarkStyle
from turngate.graph.history import turn_digest
from turngate.graph.model import ApiName
from turngate.graph.turn import AssistantTurn
from turngate.proxy.continuation import kept_answer
from turngate.state.conversations import StoredResponse

STREAMS = [
    pytest.param(api, *found.values, id=found.id, marks=found.marks)
    for api in ("anthropic", "gemini")
    for found in fixture_params(f"{api}/*.sse")
]


@pytest.mark.parametrize("marks", MARK_STYLES)
@pytest.mark.parametrize(("api", "path"), STREAMS)
def test_a_kept_stream_reads_back_as_its_turn(api: ApiName, path: Path, marks: MarkStyle) -> None:
    relay = StreamRelay(api, marks=marks)
    relayed = relay.feed(path.read_bytes())
    tail, turn = relay.finish()
    if not isinstance(turn, AssistantTurn):
        pytest.skip(f"{path.name} ends in no turn (an error stream): nothing is kept")
    kept = StoredResponse(200, "text/event-stream", relayed + tail, True, 0.0)
    read, _ = kept_answer(api, kept)
    assert turn_digest(read.blocks) == turn_digest(turn.blocks)
    assert [b.kind for b in read.blocks] == [b.kind for b in turn.blocks]
