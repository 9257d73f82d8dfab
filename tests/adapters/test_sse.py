"""The incremental SSE decoder and the frame encoder."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fixtures_dir import COUNTS, fixture_params
from turngate.adapters.sse import (
    SSEDecoder,
    SSEFrame,
    SSEFrameTooLarge,
    SSETruncated,
    encode_comment,
    encode_frame,
)


def decode_all(data: bytes, **limits: int) -> list[SSEFrame]:
    decoder = SSEDecoder(**limits)
    return decoder.feed(data) + decoder.close()


def decode_bytewise(data: bytes) -> list[SSEFrame]:
    decoder = SSEDecoder()
    frames: list[SSEFrame] = []
    for k in range(len(data)):
        frames += decoder.feed(data[k : k + 1])
    return frames + decoder.close()


def decode_split(data: bytes, cuts: list[int]) -> list[SSEFrame]:
    decoder = SSEDecoder()
    frames: list[SSEFrame] = []
    at = 0
    for cut in sorted(set(cuts)):
        frames += decoder.feed(data[at:cut])
        at = cut
    return frames + decoder.feed(data[at:]) + decoder.close()


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"])
def test_every_line_ending_gives_the_same_frames(ending: bytes) -> None:
    text = b"event: a\ndata: one\ndata: two\n\ndata: three\n\n".replace(b"\n", ending)
    frames = decode_all(text)
    assert [(f.event, f.data) for f in frames] == [("a", b"one\ntwo"), (None, b"three")]
    assert b"".join(f.raw for f in frames) == text


def test_comments_are_skipped_and_their_bytes_kept_in_the_next_frame() -> None:
    text = b": keep-alive\n\n: hello\ndata: x\n\n"
    (frame,) = decode_all(text)
    assert frame.data == b"x"
    assert frame.raw == text


def test_one_optional_space_after_the_colon() -> None:
    frames = decode_all(b"data:tight\n\ndata:  two spaces\n\ndata\n\n")
    assert [f.data for f in frames] == [b"tight", b" two spaces", b""]


def test_id_and_retry_fields_and_unknown_fields() -> None:
    decoder = SSEDecoder()
    (frame,) = decoder.feed(b"id: 7\nretry: 1500\nfoo: bar\ndata: x\n\n")
    assert (frame.id, frame.retry, frame.data) == ("7", 1500, b"x")
    assert decoder.last_event_id == "7"
    (later,) = decoder.feed(b"retry: soon\ndata: y\n\n")
    assert (later.id, later.retry) == (None, None)
    assert decoder.last_event_id == "7"


def test_a_block_without_data_dispatches_nothing() -> None:
    assert decode_all(b"event: lonely\n\nevent: real\ndata: 1\n\n")[0].event == "real"


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_a_bom_is_skipped_even_split_across_reads(cut: int) -> None:
    data = b"\xef\xbb\xbfdata: x\n\n"
    assert [f.data for f in decode_split(data, [cut])] == [b"x"]
    assert decode_split(data, [cut])[0].raw == b"data: x\n\n"


def test_a_crlf_split_between_reads_is_one_line_end() -> None:
    data = b"data: a\r\n\r\ndata: b\r\n\r\n"
    for cut in range(len(data) + 1):
        assert decode_split(data, [cut]) == decode_all(data)


def test_a_lone_cr_at_the_very_end_is_resolved_by_close() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r\r") == []
    (frame,) = decoder.close()
    assert (frame.data, frame.truncated, decoder.truncated) == (b"a", False, False)


def test_close_flags_a_frame_cut_short() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: complete\n\ndata: [DO") != []
    (cut,) = decoder.close()
    assert cut.truncated
    assert cut.data == b"[DO"
    assert decoder.truncated


def test_close_after_complete_frames_and_a_comment_is_clean() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: x\n\n: ping\n\n")
    assert decoder.close() == []
    assert not decoder.truncated


def test_strict_close_raises_on_a_frame_cut_short() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"event: message_stop\ndata: {}")
    with pytest.raises(SSETruncated) as caught:
        decoder.close(strict=True)
    assert caught.value.rule == "sse_truncated"


def test_an_over_long_line_raises_instead_of_growing() -> None:
    decoder = SSEDecoder(max_line=64)
    decoder.feed(b"data: " + b"x" * 40)
    with pytest.raises(SSEFrameTooLarge) as caught:
        decoder.feed(b"y" * 40)
    assert caught.value.status == 502


def test_an_over_large_frame_raises() -> None:
    with pytest.raises(SSEFrameTooLarge):
        decode_all(b"".join(b"data: " + b"x" * 30 + b"\n" for _ in range(10)), max_frame=200)


def test_feed_after_close_is_refused() -> None:
    decoder = SSEDecoder()
    decoder.close()
    with pytest.raises(Exception, match="after close"):
        decoder.feed(b"data: x\n\n")


def test_encode_frame_round_trips_multiline_data() -> None:
    raw = encode_frame("turngate.commit", b'{"a":1}\nsecond', id="9")
    (frame,) = decode_all(raw)
    assert (frame.event, frame.id, frame.data, frame.raw) == (
        "turngate.commit",
        "9",
        b'{"a":1}\nsecond',
        raw,
    )


def test_encode_frame_refuses_a_line_break_in_a_field() -> None:
    with pytest.raises(ValueError, match="line break"):
        encode_frame("a\nb", b"x")


def test_comments_are_invisible_to_the_decoder() -> None:
    data = encode_comment("turngate commit g1.b0") + encode_frame(None, b"x", line_end=b"\r\n")
    assert data.startswith(b": turngate commit g1.b0\n\n")
    assert [f.data for f in decode_all(data)] == [b"x"]


_FIELD_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\x00"),
    max_size=20,
)


@settings(max_examples=200, deadline=None)
@given(
    frames=st.lists(
        st.tuples(st.none() | _FIELD_TEXT.filter(bool), st.lists(_FIELD_TEXT, min_size=1)),
        max_size=6,
    ),
    ending=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_encoded_frames_decode_back_at_any_split(
    frames: list[tuple[str | None, list[str]]], ending: bytes, cuts: list[int]
) -> None:
    data = b"".join(
        encode_frame(event, "\n".join(lines).encode(), line_end=ending) for event, lines in frames
    )
    decoded = decode_split(data, [c for c in cuts if c <= len(data)])
    assert [(f.event, f.data) for f in decoded] == [
        (event, "\n".join(lines).encode()) for event, lines in frames
    ]
    assert b"".join(f.raw for f in decoded) == data


_LINE = st.one_of(
    st.builds(lambda t: "data: " + t, _FIELD_TEXT),
    st.builds(lambda t: "data:" + t, _FIELD_TEXT),
    st.sampled_from(["data", "event: e", "id: 7", "retry: 15", ": ping", "foo: bar", ""]),
)


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(_LINE, max_size=24),
    bom=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=8),
)
def test_lf_streams_frame_as_the_same_lines_with_crlf(
    lines: list[str], bom: bool, cuts: list[int]
) -> None:
    """Input with no ``\\r`` is cut at blank lines in bulk; with ``\\r\\n`` line by line.
    Both must give the same frames, at any split, cut short or not."""
    lf = (b"\xef\xbb\xbf" if bom else b"") + "\n".join(lines).encode()
    crlf = lf.replace(b"\n", b"\r\n")
    decoders = (SSEDecoder(), SSEDecoder())
    found = []
    for decoder, data in zip(decoders, (lf, crlf), strict=True):
        frames: list[SSEFrame] = []
        at = 0
        for cut in sorted({c for c in cuts if c <= len(data)}):
            frames += decoder.feed(data[at:cut])
            at = cut
        frames += decoder.feed(data[at:]) + decoder.close()
        found.append(
            [
                (f.data, f.event, f.id, f.retry, f.raw.replace(b"\r\n", b"\n"), f.truncated)
                for f in frames
            ]
        )
    assert found[0] == found[1]
    assert [d.last_event_id for d in decoders] == [decoders[1].last_event_id] * 2
    assert decoders[0].truncated == decoders[1].truncated


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(_LINE, max_size=24),
    crlf_from=st.integers(min_value=0, max_value=24),
    cuts=st.lists(st.integers(min_value=0, max_value=300), min_size=1, max_size=8),
)
def test_a_first_cr_mid_stream_changes_no_frame(
    lines: list[str], crlf_from: int, cuts: list[int]
) -> None:
    """Reads before the first ``\\r`` are cut in bulk, the rest line by line; one read of
    the same bytes goes line by line from the start."""
    data = b"".join(
        line.encode() + (b"\r\n" if at >= crlf_from else b"\n") for at, line in enumerate(lines)
    )
    split = decode_split(data, [c for c in cuts if c <= len(data)])
    assert split == decode_all(data)


def test_a_long_block_coming_in_pieces_is_checked_line_by_line() -> None:
    decoder = SSEDecoder(max_line=64)
    assert decoder.feed(b"event: e\n" + b"data: " + b"x" * 50 + b"\n") == []
    with pytest.raises(SSEFrameTooLarge):
        decoder.feed(b"data: " + b"y" * 70)


@pytest.mark.parametrize("path", fixture_params("*/*.sse"))
def test_recorded_streams_frame_identically_whole_and_byte_by_byte(path: Path) -> None:
    data = path.read_bytes()
    whole = decode_all(data)
    assert whole == decode_bytewise(data)
    assert b"".join(f.raw for f in whole) == data
    assert not any(f.truncated for f in whole)
    COUNTS["sse frames decoded (whole = byte by byte)"] += len(whole)


@settings(max_examples=300, deadline=None)
@given(
    frames=st.lists(
        st.tuples(_FIELD_TEXT, _FIELD_TEXT, st.sampled_from(["", ": ping\n", "id: 3\n"])),
        min_size=1,
        max_size=5,
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=6),
)
def test_typed_frames_cut_in_bulk_read_as_line_by_line(
    frames: list[tuple[str, str, str]], cuts: list[int]
) -> None:
    """An ``event`` line then one ``data`` line (Anthropic's and Responses' frames) is cut
    in bulk from ``\\n`` input; with ``\\r\\n`` the same frames are read line by line. Any
    event name, any data, with or without a field or comment in between."""
    lf = "".join(f"event: {e}\n{between}data: {d}\n\n" for e, d, between in frames).encode()
    found = []
    for data in (lf, lf.replace(b"\n", b"\r\n")):
        decoded = decode_split(data, [c for c in cuts if c <= len(data)])
        found.append([(f.event, f.data, f.id, f.raw.replace(b"\r\n", b"\n")) for f in decoded])
    assert found[0] == found[1]
    assert [(event, data) for event, data, _ in frames] == [
        (f_event, f_data.decode()) for f_event, f_data, _, _ in found[0]
    ]


@settings(max_examples=200, deadline=None)
@given(
    frames=st.lists(st.tuples(_FIELD_TEXT, st.booleans()), min_size=1, max_size=6),
    ending=st.sampled_from([b"\n", b"\r\n"]),
)
def test_a_read_of_one_whole_frame_decodes_as_line_by_line(
    frames: list[tuple[str, bool]], ending: bytes
) -> None:
    """A paced chunk, one ``data`` line and its blank line per read (LF, or CRLF as Gemini
    writes them), is taken whole (``single``); the same bytes read in one piece go through
    the scanners. Some reads are not one frame (a comment before, two frames): read in full."""
    reads = [
        (b": c" + ending if extra else b"") + b"data: " + text.encode() + ending + ending
        for text, extra in frames
    ]
    one_by_one = SSEDecoder()
    decoded = [frame for read in reads for frame in one_by_one.feed(read)]
    decoded += one_by_one.close()
    assert decoded == decode_all(b"".join(reads))
    assert [f.data for f in decoded] == [text.encode() for text, _ in frames]


def test_a_crlf_frame_read_whole_is_taken_without_the_scanners() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r\n\r\n")[0].data == b"a"
    assert decoder.single(b"data: b\r\n\r\n") == b"b"
    for read in (
        b"data: b\r\n\r\ndata: c\r\n\r\n",  # two frames
        b"data: b\r\n\n",  # mixed line ends: the scanners decide
        b"data: b\r\r\n\r\n",
        b"data: b\r\nid: 1\r\n\r\n",
        b"data: b\r\n\r\n\r\n",
    ):
        assert decoder.single(read) is None, read
