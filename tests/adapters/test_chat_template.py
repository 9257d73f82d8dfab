"""A Chat text chunk read through the template of the one before it decodes as in full.

``ChatStreamDecoder`` cuts a template from a text chunk it parsed in full and reads later
chunks that fit it by their text alone (turngate/adapters/openai_chat/template.py). With
templates switched off every chunk is parsed in full: the events (text, sequence numbers,
raw bytes) or the refusal must be the same for recorded streams, for generated envelopes
and texts, and for any byte of a chunk changed, added or removed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.adapters import stream_faults as faults
from tests.fixtures_dir import fixture_params
from turngate.adapters.openai_chat.stream import ChatStreamDecoder
from turngate.adapters.relay import StreamRelay
from turngate.adapters.template import FrameTemplate, Hole, cut
from turngate.errors import TurngateError
from turngate.graph.events import StreamEvent, TextDelta
from turngate.graph.turn import AssistantTurn

CHAT_STREAMS = fixture_params("openai-chat/*.sse")
# What an envelope string may hold: quotes, backslashes, the keys the template looks for.
TRICKY = st.text(
    alphabet=st.sampled_from(['"', "\\", "a", "é", "\n", ":", "{", "}", ",", "/", "\x01"]),
    max_size=8,
) | st.sampled_from(['"content":"', '\\"content\\":\\"', '","obfuscation":"', "\\u0041"])


def _decoder(*, templates: bool) -> ChatStreamDecoder:
    decoder = ChatStreamDecoder()
    if not templates:
        decoder._templates_left = 0
    return decoder


def _decoded(decoder: ChatStreamDecoder, data: bytes) -> list[StreamEvent] | str:
    try:
        return decoder.decode_data(data, b"data: " + data + b"\n\n")
    except TurngateError as exc:
        return exc.rule


def _both(frames: list[bytes]) -> tuple[list[Any], list[Any], ChatStreamDecoder]:
    on, off = _decoder(templates=True), _decoder(templates=False)
    return [_decoded(on, f) for f in frames], [_decoded(off, f) for f in frames], on


@pytest.mark.parametrize("path", CHAT_STREAMS)
def test_recorded_streams_decode_alike_with_templates(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frames = [f.raw for f in faults.split_frames(path.read_bytes())]
    data = [raw.removeprefix(b"data: ").removesuffix(b"\n\n") for raw in frames]
    fits: list[str] = []
    read = FrameTemplate.read

    def counted(self: FrameTemplate, data: bytes) -> tuple[str, int] | None:
        taken = read(self, data)
        if taken is not None and taken[0]:
            fits.append(taken[0])
        return taken

    monkeypatch.setattr(FrameTemplate, "read", counted)
    with_templates, in_full, _ = _both(data)
    assert with_templates == in_full
    texts = sum(1 for events in in_full for e in events if type(e) is TextDelta)
    if texts > 3:
        # Every text chunk after the two that open the block and cut the template.
        assert len(fits) == texts - 2, "recorded text chunks did not fit their template"


def _chunk(envelope: dict[str, Any], delta: dict[str, Any], obfuscation: str | None) -> bytes:
    chunk: dict[str, Any] = {
        **envelope,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}],
    }
    if obfuscation is not None:
        chunk["obfuscation"] = obfuscation
    return orjson.dumps(chunk)


ENVELOPES = st.fixed_dictionaries(
    {"id": TRICKY, "object": st.just("chat.completion.chunk"), "model": TRICKY},
    optional={"system_fingerprint": TRICKY, "created": st.integers(0, 2**40)},
)


@given(
    envelope=ENVELOPES,
    texts=st.lists(TRICKY.filter(bool), min_size=3, max_size=5),
    obfuscations=st.lists(st.none() | TRICKY, min_size=6, max_size=6),
)
def test_generated_text_chunks_decode_alike(
    envelope: dict[str, Any], texts: list[str], obfuscations: list[str | None]
) -> None:
    first = _chunk(envelope, {"role": "assistant", "content": ""}, obfuscations[0])
    frames = [first] + [
        _chunk(envelope, {"content": text}, obfuscation)
        for text, obfuscation in zip(texts, obfuscations[1:], strict=False)
    ]
    with_templates, in_full, _ = _both(frames)
    assert with_templates == in_full
    assert [e.text for events in in_full for e in events if type(e) is TextDelta] == texts


# One byte dropped, inserted or replaced, at an offset taken modulo the length.
EDITS = st.tuples(st.integers(0, 10_000), st.sampled_from(["drop", "insert", "replace"]))


def _edited(data: bytes, edit: tuple[int, str], byte: int) -> bytes:
    at, how = edit[0] % (len(data) + 1), edit[1]
    if how == "drop":
        return data[:at] + data[at + 1 :]
    if how == "insert":
        return data[:at] + bytes([byte]) + data[at:]
    return data[:at] + bytes([byte]) + data[at + 1 :]


@st.composite
def edited_chunks(
    draw: st.DrawFn, wrap: Callable[[bytes], bytes], inserts: bytes
) -> tuple[bytes, bytes, bytes, bytes]:
    """An opening chunk, a text chunk, another that fits its template, and that one with
    a byte changed; each as ``wrap`` gives it (the change is made to the wrapped bytes)."""
    envelope, obfuscation = draw(ENVELOPES), draw(st.none() | TRICKY)
    texts = draw(st.tuples(TRICKY.filter(bool), TRICKY))
    start = wrap(_chunk(envelope, {"role": "assistant", "content": ""}, obfuscation))
    base = wrap(_chunk(envelope, {"content": texts[0]}, obfuscation))
    fitting = wrap(_chunk(envelope, {"content": texts[1]}, obfuscation))
    return start, base, fitting, _edited(fitting, draw(EDITS), draw(st.sampled_from(inserts)))


@given(edited_chunks(lambda chunk: chunk, b'"\\,:{}[]0a \x01'))
def test_any_byte_changed_in_a_fitting_chunk_decodes_as_in_full(
    chunks: tuple[bytes, bytes, bytes, bytes],
) -> None:
    start, base, fitting, changed = chunks
    # The first text opens the block, the second cuts the template, the changed one fits it
    # or not.
    with_templates, in_full, _ = _both([start, base, base, changed, fitting])
    assert with_templates == in_full


CONTENT = (Hole(b'"content":', ("choices", 0, "delta", "content"), "text"),)


def test_a_template_cuts_only_where_the_probe_finds_the_strings() -> None:
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"content": "hi"}}]}
    data = orjson.dumps(chunk)
    template = cut(data, chunk, CONTENT)
    assert template is not None
    assert template.read(data.replace(b'"hi"', b'"a\\"b"')) == ('a"b', ())
    # Cut inside an escaped quote, or a hole that closes the string early: no fit.
    assert template.read(data.replace(b'"hi"', b'"a\\"')) is None
    assert template.read(data.replace(b'"hi"', b'"a","x":"b"')) is None
    # A repeated content key: the parse keeps the last one, so no template is cut.
    twice = data.replace(b'{"content":"hi"}', b'{"content":"no","content":"hi"}')
    assert cut(twice, orjson.loads(twice), CONTENT) is None
    # The same text under another content key before the delta: the probe finds the hole
    # is not the delta's, so no template is cut (else that key's next value would be read).
    decoy = {"id": "c", "meta": {"content": "hi"}, **chunk}
    decoy_data = orjson.dumps(decoy)
    assert cut(decoy_data, decoy, CONTENT) is None
    # Spaced JSON: the space after the colon stays with the fixed bytes.
    spaced = data.replace(b'"content":"hi"', b'"content": "hi"')
    spaced_template = cut(spaced, orjson.loads(spaced), CONTENT)
    assert spaced_template is not None
    assert spaced_template.read(spaced.replace(b'"hi"', b'"yo"')) == ("yo", ())
    assert spaced_template.read(data) is None


# --- whole frames through the relay: the template read on the frame (quick_frame) ---------


def _relays() -> tuple[StreamRelay, StreamRelay]:
    on, off = StreamRelay("openai_chat"), StreamRelay("openai_chat")
    decoder = off._live[1]
    assert isinstance(decoder, ChatStreamDecoder)
    decoder._templates_left = 0
    return on, off


def _relayed(relay: StreamRelay, reads: list[bytes]) -> list[Any]:
    """What the relay gives for each read, then at the end of the stream."""
    out: list[Any] = [(relay.feed(read), relay.quick) for read in reads]
    tail, outcome = relay.finish()
    out.append((tail, type(outcome).__name__, getattr(outcome, "rule", None)))
    if isinstance(outcome, AssistantTurn):
        out.append([block.semantic() for block in outcome.blocks])
    return out


def _frame(data: bytes) -> bytes:
    return b"data: " + data + b"\n\n"


STOP = _frame(b'{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}')
DONE = b"data: [DONE]\n\n"


@given(edited_chunks(_frame, b'"\\,:{}[]0a \x01\n\r'))
def test_any_byte_changed_in_a_fitting_frame_relays_as_in_full(
    frames: tuple[bytes, bytes, bytes, bytes],
) -> None:
    start, base, fitting, changed = frames
    # The framing itself may be what changed (a line break, the blank line, ``data:``).
    on, off = _relays()
    reads = [start, base, base, changed, fitting, fitting, STOP, DONE]
    assert _relayed(on, reads) == _relayed(off, reads)


def test_a_chunk_sent_over_several_data_lines_cuts_no_frame_template() -> None:
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"content": "hi"}}]}
    data = orjson.dumps(chunk).replace(b'"c",', b'"c",\n')  # JSON allows the line break
    template = cut(data, chunk, CONTENT)
    assert template is not None
    assert template.framed(b"data: " + data.replace(b"\n", b"\ndata: ") + b"\n\n", data) is None
    # Through the relay: the same chunks as frames of two data lines read as in full.
    lines = [
        b"data: " + orjson.dumps(c).replace(b'"c",', b'"c",\ndata: ') + b"\n\n"
        for c in (
            {"id": "c", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
            chunk,
            chunk,
            {"id": "c", "choices": [{"index": 0, "delta": {"content": "more"}}]},
        )
    ]
    on, off = _relays()
    reads = [*lines, STOP, DONE]
    relayed = _relayed(on, reads)
    assert relayed == _relayed(off, reads)
    assert relayed[-1][0]["text"] == "hihimore"


@pytest.mark.parametrize("path", CHAT_STREAMS)
def test_recorded_streams_relay_alike_with_templates(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = [f.raw for f in faults.split_frames(path.read_bytes())]
    fits: list[str] = []
    quick_frame = ChatStreamDecoder.quick_frame

    def counted(self: ChatStreamDecoder, frame: bytes) -> tuple[int, str, int] | None:
        taken = quick_frame(self, frame)
        if taken is not None:
            fits.append(taken[1])
        return taken

    monkeypatch.setattr(ChatStreamDecoder, "quick_frame", counted)
    on, off = _relays()
    assert _relayed(on, reads) == _relayed(off, reads)
    texts = sum(1 for read in reads if b'"content":"' in read and b'"content":""' not in read)
    if texts > 3:
        assert fits, "no recorded text frame was read through its frame template"


@pytest.mark.parametrize("cut", [1, 6, 20, -3, -2, -1])
def test_a_frame_read_in_two_pieces_relays_as_in_full(cut: int) -> None:
    # The first piece leaves a partial frame with the SSE decoder: the next read is not at a
    # frame boundary even when it looks like a whole frame.
    envelope = {"id": "c", "object": "chat.completion.chunk", "model": "m"}
    start = _frame(_chunk(envelope, {"role": "assistant", "content": ""}, "ab"))
    base, fitting = (_frame(_chunk(envelope, {"content": t}, "cd")) for t in ("one", "two"))
    reads = [start, base, base, fitting[:cut], fitting[cut:] + fitting, fitting, STOP, DONE]
    on, off = _relays()
    relayed = _relayed(on, reads)
    assert relayed == _relayed(off, reads)
    assert relayed[-1][0]["text"] == "oneonetwotwotwo"
