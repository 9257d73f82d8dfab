"""The relay's quick path for more text of a previewed block gives what the general path gives.

``StreamRelay`` reads a frame that is only more text of a block already previewed without
building outputs (``StreamAssembler.preview_text``, ``preview_more``), and a read that is
exactly one ``data:`` frame, or several one-line ``data:`` frames, without the frame list
(``SSEDecoder.single``, ``SSEDecoder.data_lines``). With that path switched off
every event goes through ``StreamAssembler.feed`` and the encoder: the client bytes, the
outcome and the quarantine must be the same, whatever the reads and whatever the faults.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.adapters import stream_faults as faults
from tests.fixtures_dir import fixture_params
from turngate.adapters.relay import StreamRelay
from turngate.adapters.sse import SSEDecoder
from turngate.graph.assembler import StreamAssembler, StreamFailed
from turngate.graph.events import (
    BlockStart,
    BlockStop,
    ResponseStart,
    StreamDone,
    TextDelta,
    TurnEnd,
)
from turngate.graph.turn import AssistantTurn

ALL_STREAMS = fixture_params("*/*.sse")


def _relay(
    api: str, reads: list[bytes], *, quick: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[bytes, AssistantTurn | StreamFailed, int]:
    with monkeypatch.context() as patch:
        if not quick:

            def never(self: StreamAssembler, index: int, text: str, seq: int) -> bool:
                return False

            # ``preview_text`` and the relay's fused text path both go through it.
            patch.setattr(StreamAssembler, "preview_more", never)
        relay = StreamRelay(api)  # type: ignore[arg-type]
        out = b"".join(relay.feed(read) for read in reads)
        tail, outcome = relay.finish()
    return out + tail, outcome, len(relay.quarantine)


def _same(api: str, reads: list[bytes], monkeypatch: pytest.MonkeyPatch) -> bytes:
    quick = _relay(api, reads, quick=True, monkeypatch=monkeypatch)
    general = _relay(api, reads, quick=False, monkeypatch=monkeypatch)
    assert quick[0] == general[0]
    assert quick[2] == general[2]
    if isinstance(general[1], StreamFailed):
        assert isinstance(quick[1], StreamFailed)
        assert quick[1].rule == general[1].rule
    else:
        assert quick[1] == general[1]
    return quick[0]


def _frames(data: bytes) -> list[bytes]:
    return [frame.raw for frame in faults.split_frames(data)]


@pytest.mark.parametrize("path", ALL_STREAMS)
def test_frame_by_frame_whole_and_byte_by_byte(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api, data = faults.API_OF_FOLDER[path.parent.name], path.read_bytes()
    by_frame = _same(api, _frames(data), monkeypatch)
    assert _same(api, [data], monkeypatch) == by_frame
    assert _same(api, [data[k : k + 7] for k in range(0, len(data), 7)], monkeypatch) == by_frame


@pytest.mark.parametrize("path", ALL_STREAMS)
def test_faulty_streams_read_frame_by_frame(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api, data = faults.API_OF_FOLDER[path.parent.name], path.read_bytes()
    faulty = [
        faults.duplicate_deltas(api, data),
        faults.reorder_blocks(api, data),
        faults.drop_tool_stop(api, data),
        faults.drop_terminator(api, data),
        faults.truncate(data, len(data) // 2),
    ]
    for stream in faulty:
        if stream is not None:
            _same(api, _frames(stream), monkeypatch)


def _chat(delta: dict[str, object], **extra: object) -> bytes:
    chunk = {"id": "chatcmpl-q", "model": "m", "choices": [{"index": 0, "delta": delta}], **extra}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def test_chat_text_after_its_stop_and_a_repeated_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    """Text that follows a finish reason, a refusal, and the same text frame twice: the
    quick path hands each to the general one or takes it exactly as the general one does."""
    reads = [
        _chat({"role": "assistant", "content": ""}),
        _chat({"content": "Hel"}),
        _chat({"content": "lo"}),
        _chat({"content": "lo"}),
        _chat({"refusal": "no"}),
        _chat({"refusal": "pe"}),
        _chat({}, usage=None) + _chat({"content": "!"}),
    ]
    done = [_chat({}), b"data: [DONE]\n\n"]
    finish = b"data: " + orjson.dumps(
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    )
    out = _same(
        "openai_chat", [*reads, finish + b"\n\n", _chat({"content": "late"}), *done], monkeypatch
    )
    assert b"late" not in out
    _, outcome, _ = _relay(
        "openai_chat",
        [*reads, finish + b"\n\n", b"data: [DONE]\n\n"],
        quick=True,
        monkeypatch=monkeypatch,
    )
    assert isinstance(outcome, AssistantTurn)
    assert [b.kind for b in outcome.blocks] == ["text", "refusal"]


@given(st.lists(st.integers(0, 6), min_size=1, max_size=30))
def test_preview_text_takes_what_feed_would_relay(seqs: list[int]) -> None:
    """Deltas at or below their block's highest sequence are dropped by either way in."""

    def run(quick: bool) -> tuple[AssistantTurn | StreamFailed, int]:
        assembler = StreamAssembler(api="anthropic")
        assembler.feed(ResponseStart("msg_1", "m"))
        assembler.feed(BlockStart(0, "text"))
        relayed = 0
        for seq in seqs:
            delta = TextDelta(0, f"<{seq}>", seq, b"")
            if quick and assembler.preview_text(delta):
                relayed += 1
            else:
                relayed += len(assembler.feed(delta))
        for event in (BlockStop(0), TurnEnd("end_turn"), StreamDone()):
            assembler.feed(event)
        return assembler.finish(), relayed

    assert run(quick=True) == run(quick=False)


def test_no_text_is_relayed_after_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """The upstream's error event mid-text fails the turn; text after it is never relayed."""
    error = b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'
    reads = [_chat({"role": "assistant", "content": ""}), _chat({"content": "a"}), error]
    out = _same("openai_chat", [*reads, _chat({"content": "after"})], monkeypatch)
    assert b"after" not in out
    assert b"overloaded" in out


def test_a_deeply_nested_text_chunk_is_relayed_as_it_came() -> None:
    """Only the text of a chunk that is more text is kept; its frame is relayed byte for
    byte, so nesting in its other fields is not refused (any other chunk still is)."""
    relay = StreamRelay("openai_chat")
    relay.feed(_chat({"role": "assistant", "content": ""}))
    relay.feed(_chat({"content": "a"}))
    deep: object = 1
    for _ in range(200):
        deep = [deep]
    nested = _chat({"content": "b"}, extra=deep)
    assert relay.feed(nested) == nested
    assert not relay.failed
    relay.feed(_chat({"role": "assistant"}, extra=deep))
    assert relay.failed


def _primed(before: bytes) -> tuple[SSEDecoder, SSEDecoder]:
    """Two decoders in the same state: a first frame read, then ``before``."""
    decoders = SSEDecoder(), SSEDecoder()
    for sse in decoders:
        sse.feed(b"data: first\n\n" + before)
    return decoders


@given(st.binary(max_size=40), st.sampled_from([b"", b"data: x\n\n", b"data: {}\n"]))
def test_single_is_feed_of_exactly_one_frame(tail: bytes, before: bytes) -> None:
    """``single`` answers only for a read ``feed`` would return as one frame, with its data."""
    for data in (b"data: " + tail + b"\n\n", tail, b"data: " + tail):
        decoder, reference = _primed(before)
        payload = decoder.single(data)
        frames = reference.feed(data)
        if payload is not None:
            assert len(frames) == 1
            assert (frames[0].data, frames[0].raw, frames[0].event) == (payload, data, None)
            assert decoder.feed(data) == frames


@given(
    st.lists(
        st.one_of(
            st.binary(max_size=12),
            st.sampled_from([b"a\ndata: b", b"a\nid: 7", b"a\nevent: e", b"a\r", b"\n"]),
        ),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from([b"", b"data: x\n\n", b"data: {}\n", b": c\n\n"]),
    st.sampled_from([b"", b"\n", b"\r\n", b"\n\n", b"data: y"]),
)
def test_data_lines_is_feed_of_several_one_line_frames(
    tails: list[bytes], before: bytes, after: bytes
) -> None:
    """``data_lines`` answers only for a read ``feed`` would return as two or more frames of
    one ``data`` line each, and gives their lines; ``feed`` after it returns the same."""
    data = b"".join(b"data: " + tail + b"\n\n" for tail in tails) + after
    decoder, reference = _primed(before)
    lines = decoder.data_lines(data)
    frames = reference.feed(data)
    if lines is not None:
        assert len(lines) >= 2
        assert [(f.data, f.raw, f.event, f.id) for f in frames] == [
            (line[6:], line + b"\n\n", None, None) for line in lines
        ]
        assert decoder.feed(data) == frames
    elif (
        not before
        and not after
        and len(tails) >= 2
        and all(b"\n" not in t and b"\r" not in t for t in tails)
    ):
        raise AssertionError(f"several plain frames not taken: {data!r}")


def _relayed(reads: list[bytes]) -> tuple[bytes, AssistantTurn | StreamFailed]:
    relay = StreamRelay("openai_chat")
    out = b"".join(relay.feed(read) for read in reads)
    tail, outcome = relay.finish()
    return out + tail, outcome


@pytest.mark.parametrize("path", fixture_params("openai-chat/*.sse"))
@given(cuts=st.lists(st.integers(0, 10_000), max_size=12))
def test_frames_grouped_into_reads_at_any_frame_boundary(path: Path, cuts: list[int]) -> None:
    """Frames that queued up arrive in one read: any grouping of a recorded stream's frames
    gives the client the bytes and the outcome of reading it frame by frame."""
    data = path.read_bytes()
    frames = _frames(data)
    bounds = sorted({0, len(frames), *(cut % (len(frames) + 1) for cut in cuts)})
    reads = [b"".join(frames[a:b]) for a, b in itertools.pairwise(bounds)]
    assert b"".join(reads) == data
    assert _relayed(reads) == _relayed(frames)
