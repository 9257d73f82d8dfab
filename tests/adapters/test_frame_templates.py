"""Frames of more text read through their template relay exactly as read in full.

Anthropic and Responses decoders cut a template (turngate/adapters/template.py) from a
text delta's whole frame and take later frames that fit it without parsing them
(``quick_frame``). A relay with that path switched off reads every frame in full: for
recorded streams, generated envelopes and texts, any byte of a fitting frame changed
(framing included), frames cut across reads and CRLF framing, what the client receives,
the relay's quick flag, its resume cursor and the turn must be the same.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.adapters import stream_faults as faults
from tests.fixtures_dir import fixture_params
from turngate.adapters.relay import StreamRelay
from turngate.adapters.sse import MarkStyle
from turngate.adapters.template import PAD, Hole, cut
from turngate.errors import TurngateError
from turngate.graph.turn import AssistantTurn

# What an envelope string may hold: quotes, backslashes, keys the templates look for.
TRICKY = st.text(
    alphabet=st.sampled_from(['"', "\\", "a", "é", "\n", ":", "{", "}", ",", "/", "\x01"]),
    max_size=8,
) | st.sampled_from(['"text":"', '\\"delta\\":\\"', '","obfuscation":"', "\\u0041"])
ENVELOPES = st.fixed_dictionaries(
    {"id": TRICKY, "model": TRICKY, "item": TRICKY, "obfuscation": st.none() | TRICKY}
)
EDITS = st.tuples(st.integers(0, 10_000), st.sampled_from(["drop", "insert", "replace"]))
INSERTS = b'"\\,:{}[]0a \x01\n\r'


def _frame(kind: str, payload: dict[str, Any], line_end: bytes, pad: int = 0) -> bytes:
    data = orjson.dumps({"type": kind, **payload})
    data = data[:-1] + b" " * pad + b"}"
    return b"event: " + kind.encode() + line_end + b"data: " + data + line_end + line_end


@dataclass(frozen=True)
class Shape:
    """One API's text stream: the frames before the text, a text delta frame (its text
    and sequence number), and the frames after it (given the whole text); how many text
    frames are read in full before the next fits the template."""

    api: str
    opening: Callable[[dict[str, Any], bytes], list[bytes]]
    text: Callable[[dict[str, Any], str, int, bytes], bytes]
    closing: Callable[[dict[str, Any], str, int, bytes], list[bytes]]
    in_full: int = 1
    # Tool-call streams: the texts become a call's arguments, {"notes": texts}, cut into as
    # many fragments as there are texts.
    arguments: bool = False


def _anthropic_opening(env: dict[str, Any], le: bytes) -> list[bytes]:
    message = {"id": env["id"], "type": "message", "role": "assistant", "model": env["model"]}
    message |= {"content": [], "stop_reason": None, "usage": {"input_tokens": 3}}
    block = {"type": "text", "text": ""}
    return [
        _frame("message_start", {"message": message}, le),
        _frame("content_block_start", {"index": 0, "content_block": block}, le),
    ]


def _anthropic_text(env: dict[str, Any], text: str, seq: int, le: bytes) -> bytes:
    # Anthropic pads its frames with spaces before the last brace, more or fewer each time.
    delta = {"type": "text_delta", "text": text}
    return _frame("content_block_delta", {"index": 0, "delta": delta}, le, pad=len(text) % 7)


def _anthropic_ending(reason: str, le: bytes) -> list[bytes]:
    stop = {"delta": {"stop_reason": reason}, "usage": {"output_tokens": 5}}
    return [
        _frame("content_block_stop", {"index": 0}, le),
        _frame("message_delta", stop, le),
        _frame("message_stop", {}, le),
    ]


def _anthropic_closing(env: dict[str, Any], whole: str, seq: int, le: bytes) -> list[bytes]:
    return _anthropic_ending("end_turn", le)


def _responses_opening(env: dict[str, Any], le: bytes) -> list[bytes]:
    response = {"id": env["id"], "object": "response", "status": "in_progress"}
    response |= {"model": env["model"], "output": []}
    item = {"id": env["item"], "type": "message", "status": "in_progress", "content": []}
    part = {"type": "output_text", "annotations": [], "text": ""}
    return [
        _frame("response.created", {"sequence_number": 0, "response": response}, le),
        _frame(
            "response.output_item.added",
            {"sequence_number": 1, "output_index": 0, "item": {**item, "role": "assistant"}},
            le,
        ),
        _frame(
            "response.content_part.added",
            {
                "sequence_number": 2,
                "item_id": env["item"],
                "output_index": 0,
                "content_index": 0,
                "part": part,
            },
            le,
        ),
    ]


def _responses_text(env: dict[str, Any], text: str, seq: int, le: bytes) -> bytes:
    payload: dict[str, Any] = {
        "sequence_number": seq,
        "item_id": env["item"],
        "output_index": 0,
        "content_index": 0,
        "delta": text,
        "logprobs": [],
    }
    if env["obfuscation"] is not None:
        payload["obfuscation"] = env["obfuscation"]
    return _frame("response.output_text.delta", payload, le)


def _responses_closing(env: dict[str, Any], whole: str, seq: int, le: bytes) -> list[bytes]:
    part = {"type": "output_text", "annotations": [], "text": whole}
    where = {"item_id": env["item"], "output_index": 0, "content_index": 0}
    item = {"id": env["item"], "type": "message", "status": "completed", "content": [part]}
    response = {"id": env["id"], "object": "response", "status": "completed"}
    response |= {"model": env["model"], "output": [item], "usage": {"input_tokens": 3}}
    return [
        _frame("response.content_part.done", {"sequence_number": seq, **where, "part": part}, le),
        _frame(
            "response.output_item.done",
            {"sequence_number": seq + 1, "output_index": 0, "item": item},
            le,
        ),
        _frame("response.completed", {"sequence_number": seq + 2, "response": response}, le),
    ]


def _gemini_frame(chunk: dict[str, Any], le: bytes) -> bytes:
    return b"data: " + orjson.dumps(chunk) + le + le


def _gemini_text(env: dict[str, Any], text: str, seq: int, le: bytes) -> bytes:
    # Every chunk is a whole response: the first also starts it; the token counts grow.
    candidate = {"content": {"parts": [{"text": text}], "role": "model"}}
    usage = {"promptTokenCount": 4, "candidatesTokenCount": seq, "totalTokenCount": seq + 4}
    chunk = {"candidates": [candidate], "usageMetadata": usage, "modelVersion": env["model"]}
    return _gemini_frame({**chunk, "responseId": env["id"]}, le)


def _gemini_text_same_usage(env: dict[str, Any], text: str, seq: int, le: bytes) -> bytes:
    # Older models repeat the prompt's count on every chunk until the last.
    return _gemini_text(env, text, 0, le)


def _gemini_closing(env: dict[str, Any], whole: str, seq: int, le: bytes) -> list[bytes]:
    candidate = {"content": {"parts": [], "role": "model"}, "finishReason": "STOP"}
    usage = {"promptTokenCount": 4, "candidatesTokenCount": 6, "totalTokenCount": 10}
    chunk = {"candidates": [candidate], "usageMetadata": usage, "modelVersion": env["model"]}
    return [_gemini_frame({**chunk, "responseId": env["id"]}, le)]


def _anthropic_call_opening(env: dict[str, Any], le: bytes) -> list[bytes]:
    block = {"type": "tool_use", "id": "toolu_1", "name": "notes", "input": {}}
    return [
        _anthropic_opening(env, le)[0],
        _frame("content_block_start", {"index": 0, "content_block": block}, le),
    ]


def _anthropic_arguments(env: dict[str, Any], piece: str, seq: int, le: bytes) -> bytes:
    delta = {"type": "input_json_delta", "partial_json": piece}
    return _frame("content_block_delta", {"index": 0, "delta": delta}, le, pad=len(piece) % 5)


def _anthropic_call_closing(env: dict[str, Any], whole: str, seq: int, le: bytes) -> list[bytes]:
    return _anthropic_ending("tool_use", le)


def _responses_call_item(env: dict[str, Any], arguments: str, status: str) -> dict[str, Any]:
    return {
        "id": env["item"],
        "type": "function_call",
        "status": status,
        "arguments": arguments,
        "call_id": "call_1",
        "name": "notes",
    }


def _responses_call_opening(env: dict[str, Any], le: bytes) -> list[bytes]:
    item = _responses_call_item(env, "", "in_progress")
    return [
        _responses_opening(env, le)[0],
        _frame(
            "response.output_item.added",
            {"sequence_number": 1, "output_index": 0, "item": item},
            le,
        ),
    ]


def _responses_arguments(env: dict[str, Any], piece: str, seq: int, le: bytes) -> bytes:
    payload: dict[str, Any] = {
        "sequence_number": seq,
        "item_id": env["item"],
        "output_index": 0,
        "delta": piece,
    }
    if env["obfuscation"] is not None:
        payload["obfuscation"] = env["obfuscation"]
    return _frame("response.function_call_arguments.delta", payload, le)


def _responses_call_closing(env: dict[str, Any], whole: str, seq: int, le: bytes) -> list[bytes]:
    item = _responses_call_item(env, whole, "completed")
    response = {"id": env["id"], "object": "response", "status": "completed"}
    response |= {"model": env["model"], "output": [item], "usage": {"input_tokens": 3}}
    return [
        _frame(
            "response.output_item.done",
            {"sequence_number": seq, "output_index": 0, "item": item},
            le,
        ),
        _frame("response.completed", {"sequence_number": seq + 1, "response": response}, le),
    ]


SHAPES = {
    "anthropic": Shape("anthropic", _anthropic_opening, _anthropic_text, _anthropic_closing),
    "openai_responses": Shape(
        "openai_responses", _responses_opening, _responses_text, _responses_closing
    ),
    # The first chunk starts the response too: the second cuts the template.
    "gemini": Shape("gemini", lambda env, le: [], _gemini_text, _gemini_closing, in_full=2),
    "gemini_same_usage": Shape(
        "gemini", lambda env, le: [], _gemini_text_same_usage, _gemini_closing, in_full=2
    ),
    "anthropic_call": Shape(
        "anthropic",
        _anthropic_call_opening,
        _anthropic_arguments,
        _anthropic_call_closing,
        arguments=True,
    ),
    "openai_responses_call": Shape(
        "openai_responses",
        _responses_call_opening,
        _responses_arguments,
        _responses_call_closing,
        arguments=True,
    ),
}


def _relays(shape: str, marks: MarkStyle | None = None) -> tuple[StreamRelay, StreamRelay]:
    """Relays of ``shape``'s API (or of the API so named), with and without templates."""
    api = SHAPES[shape].api if shape in SHAPES else shape
    on = StreamRelay(api, marks=marks)  # type: ignore[arg-type]
    off = StreamRelay(api, marks=marks)  # type: ignore[arg-type]
    off._templates = off._block_templates = False
    off._live_template = off._live_blocks = None
    return on, off


def _text_of(relayed: list[Any]) -> str:
    """The text of the turn ``_relayed`` ended with (its text blocks joined); of a call,
    its notes."""
    blocks = relayed[-2]
    if blocks and "arguments" in blocks[0]:
        return "".join(orjson.loads(blocks[0]["arguments"])["notes"])
    return "".join(block["text"] for block in blocks)


def _relayed(relay: StreamRelay, reads: list[bytes]) -> list[Any]:
    """What the relay gives for each read (with its quick flag, resume cursor and the usage
    so far), then at the end of the stream. Gemini's quick flag is left out: a chunk read
    in full commits its text block through the proxy's checks, one read through its
    template is quick (a commit that writes nothing, as no marks are written)."""
    gemini = relay.api == "gemini"
    out: list[Any] = [
        (relay.feed(read), None if gemini else relay.quick, relay.cursor, relay.assembler.usage)
        for read in reads
    ]
    tail, outcome = relay.finish()
    out.append((tail, type(outcome).__name__, getattr(outcome, "rule", None)))
    if isinstance(outcome, AssistantTurn):
        out.append(outcome.usage)
        out.append([block.semantic() for block in outcome.blocks])
        out.append([(block.id, block.order, block.trust) for block in outcome.blocks])
    return out


def _stream(shape: Shape, env: dict[str, Any], texts: list[str], le: bytes) -> list[bytes]:
    opening = shape.opening(env, le)
    seq = len(opening)
    if shape.arguments:
        whole = orjson.dumps({"notes": texts}).decode()
        cuts = [len(whole) * n // len(texts) for n in range(len(texts) + 1)]
        texts = [whole[a:b] for a, b in itertools.pairwise(cuts)]
    frames = [shape.text(env, text, seq + n, le) for n, text in enumerate(texts)]
    return [*opening, *frames, *shape.closing(env, "".join(texts), seq + len(texts), le)]


def _template_reads(relay: StreamRelay, reads: list[bytes], monkeypatch: pytest.MonkeyPatch) -> int:
    """How many of ``reads`` the relay's decoder took through its template: one at a time,
    or as a run of more text (``took_text``)."""
    taken: list[int] = []
    decoder = type(relay._live[1])
    name = "quick_block" if hasattr(decoder, "quick_block") else "quick_frame"
    quick = getattr(decoder, name)

    def counted(self: Any, frame: bytes) -> Any:
        read = quick(self, frame)
        taken.append(read is not None)
        return read

    with monkeypatch.context() as patch:
        patch.setattr(decoder, name, counted)
        took = getattr(decoder, "took_text", None)
        if took is not None:

            def took_counted(self: Any, index: int, pieces: list[str]) -> int | None:
                taken.extend([True] * len(pieces))
                first: int | None = took(self, index, pieces)
                return first

            patch.setattr(decoder, "took_text", took_counted)
        for read in reads:
            relay.feed(read)
        relay.finish()
    return sum(taken)


@pytest.mark.parametrize("api", sorted(SHAPES))
@pytest.mark.parametrize("line_end", [b"\n", b"\r\n"])
def test_delta_frames_after_the_first_are_read_through_the_template(
    api: str, line_end: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"id": "msg_1", "model": "m", "item": "msg_1", "obfuscation": "abc123"}
    texts = ["Hel", "lo", ' "wo', "rld\\", "\n!", "é"]
    reads = _stream(SHAPES[api], env, texts, line_end)
    on, off = _relays(api)
    relayed = _relayed(on, reads)
    assert relayed == _relayed(off, reads)
    assert _text_of(relayed) == "".join(texts)
    on, off = _relays(api)
    # The first delta frame cuts the template; each later one fits it.
    in_full = SHAPES[api].in_full
    assert _template_reads(on, reads, monkeypatch) == len(texts) - in_full
    assert _template_reads(off, reads, monkeypatch) == 0


@pytest.mark.parametrize("api", sorted(SHAPES))
@given(
    env=ENVELOPES,
    texts=st.lists(TRICKY.filter(bool), min_size=2, max_size=4),
    edit=EDITS,
    byte=st.sampled_from(INSERTS),
    line_end=st.sampled_from([b"\n", b"\r\n"]),
)
def test_any_byte_changed_in_a_fitting_frame_relays_as_in_full(
    api: str,
    env: dict[str, Any],
    texts: list[str],
    edit: tuple[int, str],
    byte: int,
    line_end: bytes,
) -> None:
    reads = _stream(SHAPES[api], env, texts, line_end)
    # The last text frame, which fits the template of the one before, changed anywhere:
    # its JSON, its event line, its ``data:``, its line ends.
    changed = len(reads) - len(SHAPES[api].closing(env, "", 0, line_end)) - 1
    reads[changed] = _edited(reads[changed], edit, byte)
    on, off = _relays(api)
    assert _relayed(on, reads) == _relayed(off, reads)


def _edited(frame: bytes, edit: tuple[int, str], byte: int) -> bytes:
    """``frame`` with one byte dropped, ``byte`` put before it, or ``byte`` in its place."""
    at = edit[0] % (len(frame) + 1)
    if edit[1] == "drop":
        return frame[:at] + frame[at + 1 :]
    if edit[1] == "insert":
        return frame[:at] + bytes([byte]) + frame[at:]
    return frame[:at] + bytes([byte]) + frame[at + 1 :]


def _edits(frame: bytes) -> list[bytes]:
    """``frame`` with each byte dropped, and each of ``INSERTS`` put before it and in its
    place."""
    edited = []
    for at in range(len(frame) + 1):
        edited.append(frame[:at] + frame[at + 1 :])
        for byte in INSERTS:
            edited.append(frame[:at] + bytes([byte]) + frame[at:])
            edited.append(frame[:at] + bytes([byte]) + frame[at + 1 :])
    return edited


@pytest.mark.parametrize("api", sorted(SHAPES))
@pytest.mark.parametrize("line_end", [b"\n", b"\r\n"])
def test_every_edit_of_a_fitting_frame_relays_as_in_full(api: str, line_end: bytes) -> None:
    env = {"id": "r", "model": "m", "item": "i", "obfuscation": "Zq9"}
    reads = _stream(SHAPES[api], env, ["one", "two", 'th"ree'], line_end)
    at = len(SHAPES[api].opening(env, line_end)) + 2
    fits = 0
    for edited in _edits(reads[at]):
        changed = [*reads[:at], edited, *reads[at + 1 :]]
        on, off = _relays(api)
        relayed = _relayed(on, changed)
        assert relayed == _relayed(off, changed), edited
        fits += isinstance(relayed[-1], list)  # the turn's blocks: it completed
    # Some edits leave a valid stream (a space, another letter of the text); most do not.
    assert fits > 0


@pytest.mark.parametrize("api", sorted(SHAPES))
@pytest.mark.parametrize("cut", [1, 7, 30, -3, -2, -1])
def test_a_frame_read_in_two_pieces_relays_as_in_full(api: str, cut: int) -> None:
    # The first piece leaves a partial frame with the SSE decoder: the next read is not at
    # a frame boundary even when it looks like a whole frame.
    env = {"id": "r", "model": "m", "item": "i", "obfuscation": "xy"}
    reads = _stream(SHAPES[api], env, ["one", "two", "three", "four"], b"\n")
    at = len(SHAPES[api].opening(env, b"\n")) + 2
    fitting = reads[at]
    reads[at : at + 2] = [fitting[:cut], fitting[cut:] + reads[at + 1]]
    on, off = _relays(api)
    relayed = _relayed(on, reads)
    assert relayed == _relayed(off, reads)
    assert _text_of(relayed) == "onetwothreefour"


@pytest.mark.parametrize("api", sorted(SHAPES))
@pytest.mark.parametrize("line_end", [b"\n", b"\r\n"])
@pytest.mark.parametrize("size", [None, 7, 100])
def test_frames_queued_in_one_read_relay_as_in_full(
    api: str, line_end: bytes, size: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An unpaced upstream's frames come several to a read, or cut anywhere: the frames the
    # SSE decoder cuts from them are read through the template too.
    env = {"id": "r", "model": "m", "item": "i", "obfuscation": "ok1"}
    texts = ["one", ' "two', "three", "fo\\ur", "five", "six"]
    whole = b"".join(_stream(SHAPES[api], env, texts, line_end))
    reads = (
        [whole] if size is None else [whole[at : at + size] for at in range(0, len(whole), size)]
    )
    on, off = _relays(api)
    relayed = _relayed(on, reads)
    assert relayed == _relayed(off, reads)
    assert _text_of(relayed) == "".join(texts)
    on, _off = _relays(api)
    fits = _template_reads(on, reads, monkeypatch)
    if size is None:
        # Each text frame of the one read after those that cut the template.
        assert fits == len(texts) - SHAPES[api].in_full


@pytest.mark.parametrize("api", ["openai_chat", "anthropic", "openai_responses"])
@pytest.mark.parametrize("ending", ["fail", "restart", "late", "cut", "replayed", "truncated"])
def test_a_run_of_text_frames_ended_by_anything_relays_as_in_full(api: str, ending: str) -> None:
    """Frames of more text read as a run (``StreamRelay._end_run`` hands them over later)
    give what reading each in full gives, whatever ends the run: the store failing the
    attempt, a retry taking over, an old generation's bytes, a frame cut in two, a frame
    replayed, the connection's end."""
    env = {"id": "r", "model": "m", "item": "i", "obfuscation": "xy"}
    texts = ["one", "two", "three", "four", "five"]
    # Cut after the third text frame: the first cuts the template, the second begins the
    # run, the third is its first piece.
    if api in SHAPES:
        reads = _stream(SHAPES[api], env, texts, b"\n")
        at = len(SHAPES[api].opening(env, b"\n")) + 3
    else:
        reads = _chat_stream(texts)
        at = 4
    outcomes = []
    for relay in _relays(api):
        out = [relay.feed(read) for read in reads[:at]]
        assert (relay._run is not None) is relay._templates
        rest = reads[at:]
        if ending == "fail":
            out.append(relay.fail(TurngateError("refused", rule="state_conflict")))
        elif ending == "restart":
            out.append(relay.restart(2))
            out.append(relay.feed(reads[at], generation=1))
        elif ending == "late":
            out.append(relay.feed(reads[0], generation=0))
        elif ending == "cut":
            out += [relay.feed(rest[0][:5]), relay.feed(rest[0][5:])]
            rest = rest[1:]
        elif ending == "replayed":
            # The run's last frame again (a Responses resume replays what it relayed).
            out.append(relay.feed(reads[at - 1]))
        out.append(relay.cursor)
        if ending in ("late", "cut", "replayed"):
            out += [relay.feed(read) for read in rest]
        tail, outcome = relay.finish()
        turn = outcome.blocks if isinstance(outcome, AssistantTurn) else outcome.rule
        retracted = [] if isinstance(outcome, AssistantTurn) else outcome.retracted
        outcomes.append((out, tail, turn, retracted, relay.assembler.duplicates))
    assert outcomes[0] == outcomes[1]
    if ending in ("late", "cut") or (ending == "replayed" and api == "openai_responses"):
        assert "".join(block.text for block in outcomes[0][2]) == "".join(texts)


def _chat_stream(texts: list[str]) -> list[bytes]:
    """A Chat stream's frames: the role, a chunk per text, the finish, ``[DONE]``."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        body = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [choice]}
        return b"data: " + orjson.dumps({**body, "obfuscation": "abc"}) + b"\n\n"

    return [
        chunk({"role": "assistant", "content": ""}),
        *(chunk({"content": text}) for text in texts),
        chunk({}, "stop"),
        b"data: [DONE]\n\n",
    ]


def test_an_anthropic_text_frame_after_its_block_stopped_is_refused_as_in_full() -> None:
    shape, le = SHAPES["anthropic"], b"\n"
    env = {"id": "m", "model": "m", "item": "i", "obfuscation": None}
    reads = _stream(shape, env, ["a", "b"], le)
    stop = reads.index(_frame("content_block_stop", {"index": 0}, le))
    # The same frame that fit the template, after the stop dropped it.
    reads.insert(stop + 1, shape.text(env, "late", 0, le))
    on, off = _relays("anthropic")
    relayed = _relayed(on, reads)
    assert relayed == _relayed(off, reads)
    assert relayed[-1][1:] == ("StreamFailed", "stream_protocol")


def test_a_replayed_responses_delta_is_dropped_and_the_cursor_kept() -> None:
    # A resumed connection replays events up to the cursor: a text frame that fits the
    # template but whose sequence number was seen is dropped, as in full.
    shape, le = SHAPES["openai_responses"], b"\n"
    env = {"id": "r", "model": "m", "item": "i", "obfuscation": "o"}
    reads = _stream(shape, env, ["a", "b", "c"], le)
    texts = [n for n, read in enumerate(reads) if b"output_text.delta" in read]
    reads[texts[-1] + 1 : texts[-1] + 1] = [reads[texts[1]], reads[texts[2]]]
    on, off = _relays("openai_responses")
    relayed = _relayed(on, reads)
    assert relayed == _relayed(off, reads)
    assert [read[0] for read in relayed[texts[-1] + 1 : texts[-1] + 3]] == [b"", b""]
    assert _text_of(relayed) == "abc"
    assert on.assembler.duplicates == 2


def test_a_template_reads_only_what_parses_to_it_with_other_values() -> None:
    # Every kind of hole at once, through the general reading: any edit that ``read`` takes
    # must parse, in full, to the template's object with the values it gave.
    frame = {"type": "x", "sequence_number": 12, "n": 1, "delta": 'h"i', "obfuscation": "ab"}
    data = orjson.dumps(frame)[:-1] + b"  }"
    holes = (
        Hole(b'"sequence_number":', ("sequence_number",), "count"),
        Hole(b'"delta":', ("delta",), "text"),
        Hole(b'"obfuscation":', ("obfuscation",), "token"),
        Hole(b'"n":', ("n",), "count"),
        PAD,
    )
    template = cut(data, orjson.loads(data), holes)
    assert template is not None
    assert template.kinds == ("count", "count", "text", "token", "pad")
    taken = 0
    for edited in _edits(data):
        read = template.read(edited)
        if read is None:
            continue
        taken += 1
        parsed = orjson.loads(edited)
        text, (count, n) = read
        assert type(parsed["obfuscation"]) is str
        assert parsed == {**frame, "delta": text, "sequence_number": count, "n": n} | {
            "obfuscation": parsed["obfuscation"]
        }, edited
    assert taken > 50  # digits, letters of the text and the token, spaces of the padding
    other = data.replace(b":12,", b":7,").replace(b'h\\"i', b"yo").replace(b":1,", b":30,")
    assert template.read(other.replace(b"  }", b"}")) == ("yo", (7, 30))


def test_a_gemini_text_chunk_while_a_call_streams_is_refused_as_in_full() -> None:
    # Vertex streams a call's arguments over several chunks: a text part before the call's
    # end breaks the stream, though the chunk fits the template of the text before.
    shape, le = SHAPES["gemini"], b"\r\n"
    env = {"id": "r", "model": "m", "item": "i", "obfuscation": None}
    reads = _stream(shape, env, ["a", "b", "c"], le)
    call = {"functionCall": {"name": "f", "willContinue": True}}
    opening = {"candidates": [{"content": {"parts": [call], "role": "model"}}]}
    reads[3:3] = [_gemini_frame(opening, le), shape.text(env, "d", 3, le)]
    on, off = _relays("gemini")
    relayed = _relayed(on, reads)
    assert relayed == _relayed(off, reads)
    assert relayed[-1][1:] == ("StreamFailed", "stream_protocol")


def test_a_gemini_chunk_with_its_template_counts_reports_them_again() -> None:
    # A chunk read through the template with the counts as they were reports those counts
    # again, after a chunk that reported others (the usage so far follows each chunk).
    env = {"id": "r", "model": "m", "item": "i", "obfuscation": None}
    reads = _stream(SHAPES["gemini"], env, ["a", "b", "c", "d", "e"], b"\r\n")
    reads[3] = _gemini_text(env, "d", 1, b"\r\n")  # the counts of the second chunk again
    on, off = _relays("gemini")
    relayed = _relayed(on, reads)
    assert relayed == _relayed(off, reads)
    assert relayed[3][3] == relayed[1][3] != relayed[2][3]


@pytest.mark.parametrize("marks", ["comments", "events"])
def test_gemini_chunks_read_through_their_template_are_marked_as_in_full(
    marks: MarkStyle, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Asked for marks, a chunk that fits its template goes through the assembler as the
    # events decoding it gives: the marks (block ids, commits) come out the same.
    env = {"id": "r", "model": "m", "item": "i", "obfuscation": None}
    reads = _stream(SHAPES["gemini"], env, ["a", "b", "c", "d"], b"\r\n")
    on, off = _relays("gemini", marks)
    relayed = _relayed(on, reads)
    assert relayed == _relayed(off, reads)
    assert relayed[2][0].count(b"turngate") == (2 if marks == "events" else 1)
    on, _off = _relays("gemini", marks)
    assert _template_reads(on, reads, monkeypatch) == 2


def _plain_gemini_text(chunk: Any) -> bool:
    """A chunk of one part of nothing but text that does not end the turn."""
    candidates = chunk.get("candidates") if isinstance(chunk, dict) else None
    if not isinstance(candidates, list) or len(candidates) != 1:
        return False
    parts = candidates[0].get("content", {}).get("parts")
    plain = isinstance(parts, list) and len(parts) == 1 and list(parts[0]) == ["text"]
    return plain and "finishReason" not in candidates[0]


RECORDED = (
    fixture_params("anthropic/*.sse")
    + fixture_params("openai-responses/*.sse")
    + fixture_params("gemini/*.sse")
)


@pytest.mark.parametrize("path", RECORDED)
def test_recorded_streams_relay_alike_with_templates(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = faults.API_OF_FOLDER[path.parent.name]
    reads = [f.raw for f in faults.split_frames(path.read_bytes())]
    on, off = _relays(api)
    assert _relayed(on, reads) == _relayed(off, reads)
    on, _off = _relays(api)
    texts = sum(1 for read in reads if b'"text_delta"' in read or b"output_text.delta" in read)
    # Responses recordings without sequence numbers cut no template, and log
    # probabilities differ from frame to frame.
    stream = path.read_bytes()
    numbered = b'"sequence_number"' in stream and b'"logprobs":[{' not in stream
    if api == "gemini":
        texts = sum(1 for frame in faults.split_frames(stream) if _plain_gemini_text(frame.data))
    if texts >= 3 and (api != "openai_responses" or numbered):
        assert _template_reads(on, reads, monkeypatch) > 0, "no text frame fit its template"


# --- Gemini: a call's arguments streamed in pieces (Vertex ``partialArgs``) --------------


def _gemini_chunk(env: dict[str, Any], part: dict[str, Any], counts: int, le: bytes) -> bytes:
    candidate = {"content": {"role": "model", "parts": [part]}}
    usage = {"promptTokenCount": 4, "totalTokenCount": 4 + counts, "trafficType": env["item"]}
    chunk = {"candidates": [candidate], "usageMetadata": usage, "modelVersion": env["model"]}
    return _gemini_frame({**chunk, "responseId": env["id"]}, le)


def _gemini_call_reads(
    env: dict[str, Any], notes: list[str], le: bytes, *, pieces: int = 3
) -> list[bytes]:
    """A call ``write_notes`` whose ``notes`` stream as Vertex streams them: the call's
    name, each note in up to ``pieces`` string pieces (``willContinue`` on all but a note's
    last), the empty call that ends it, then the turn's end."""
    call = {"functionCall": {"name": "write_notes", "willContinue": True}}
    reads = [_gemini_chunk(env, call, 0, le)]
    for n, note in enumerate(notes):
        cuts = sorted({0, len(note), *(len(note) * k // pieces for k in range(1, pieces))})
        split = [note[a:b] for a, b in itertools.pairwise(cuts)] or [""]
        for k, piece in enumerate(split):
            arg: dict[str, Any] = {"jsonPath": f"$.notes[{n}]", "stringValue": piece}
            if k < len(split) - 1:
                arg["willContinue"] = True
            more = {"functionCall": {"partialArgs": [arg], "willContinue": True}}
            reads.append(_gemini_chunk(env, more, 0, le))
    reads.append(_gemini_chunk(env, {"functionCall": {}}, 0, le))
    candidate = {"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP"}
    usage = {"promptTokenCount": 4, "candidatesTokenCount": 9, "totalTokenCount": 13}
    end = {"candidates": [candidate], "usageMetadata": usage, "responseId": env["id"]}
    return [*reads, _gemini_frame(end, le)]


def _args_reads(relay: StreamRelay, reads: list[bytes], monkeypatch: pytest.MonkeyPatch) -> int:
    """How many of ``reads`` the relay's Gemini decoder took as more held arguments."""
    taken: list[bool] = []
    decoder = type(relay._live[1])
    quick = decoder.quick_args  # type: ignore[attr-defined]

    def counted(self: Any, frame: bytes) -> Any:
        read = quick(self, frame)
        taken.append(read is not None)
        return read

    with monkeypatch.context() as patch:
        patch.setattr(decoder, "quick_args", counted)
        for read in reads:
            relay.feed(read)
    return sum(taken)


def _notes_of(relayed: list[Any]) -> list[str]:
    blocks = relayed[-2]
    assert blocks[0]["kind"] == "tool_call"
    notes: list[str] = orjson.loads(blocks[0]["arguments"])["notes"]
    return notes


GEMINI_ENV = {"id": "r1", "model": "gemini-3-flash-preview", "item": "ON_DEMAND"}


@pytest.mark.parametrize("line_end", [b"\n", b"\r\n"])
@pytest.mark.parametrize("marks", [None, "comments", "events"])
def test_gemini_streamed_arguments_are_read_through_their_template(
    line_end: bytes, marks: MarkStyle | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = ["first note", 'a "quoted" one', "back\\slash", "é and \n", ""]
    reads = _gemini_call_reads(GEMINI_ENV, notes, line_end)
    on, off = _relays("gemini", marks)
    relayed = _relayed(on, reads)
    assert relayed == _relayed(off, reads)
    assert _notes_of(relayed) == notes
    # Never relayed in pieces: nothing of the call reaches the client before its end.
    # The first chunk's envelope goes out; of the call, nothing before its end.
    assert b"functionCall" not in relayed[0][0]
    assert [out[0] for out in relayed[1 : len(reads) - 2]] == [b""] * (len(reads) - 3)
    assert b"write_notes" in relayed[len(reads) - 2][0]
    on, off = _relays("gemini", marks)
    pieces = sum(1 for read in reads if b"partialArgs" in read)
    # The first chunk of more arguments cuts the template; each later one fits it.
    assert _args_reads(on, reads, monkeypatch) == pieces - 1
    assert _args_reads(off, reads, monkeypatch) == 0


@pytest.mark.parametrize("line_end", [b"\n", b"\r\n"])
def test_every_edit_of_a_fitting_arguments_frame_relays_as_in_full(line_end: bytes) -> None:
    reads = _gemini_call_reads(GEMINI_ENV, ["one", 'tw"o', "three"], line_end, pieces=2)
    at = 3  # the second chunk of arguments: it fits the template the first cut
    fits = 0
    for edited in _edits(reads[at]):
        changed = [*reads[:at], edited, *reads[at + 1 :]]
        on, off = _relays("gemini")
        relayed = _relayed(on, changed)
        assert relayed == _relayed(off, changed), edited
        fits += isinstance(relayed[-1], list)
    assert fits > 0


@given(
    env=st.fixed_dictionaries({"id": TRICKY, "model": TRICKY, "item": TRICKY}),
    notes=st.lists(TRICKY, min_size=1, max_size=4),
    pieces=st.integers(1, 4),
    edit=EDITS,
    byte=st.sampled_from(INSERTS),
    line_end=st.sampled_from([b"\n", b"\r\n"]),
)
def test_any_byte_changed_in_a_fitting_arguments_frame_relays_as_in_full(
    env: dict[str, Any],
    notes: list[str],
    pieces: int,
    edit: tuple[int, str],
    byte: int,
    line_end: bytes,
) -> None:
    reads = _gemini_call_reads(env, notes, line_end, pieces=pieces)
    changed = len(reads) - 3  # the last chunk of arguments
    reads[changed] = _edited(reads[changed], edit, byte)
    on, off = _relays("gemini")
    assert _relayed(on, reads) == _relayed(off, reads)


@pytest.mark.parametrize("size", [None, 7, 100])
def test_gemini_arguments_queued_in_one_read_relay_as_in_full(size: int | None) -> None:
    notes = ["one", "two", "three", "four"]
    whole = b"".join(_gemini_call_reads(GEMINI_ENV, notes, b"\r\n"))
    reads = (
        [whole] if size is None else [whole[at : at + size] for at in range(0, len(whole), size)]
    )
    on, off = _relays("gemini")
    relayed = _relayed(on, reads)
    assert relayed == _relayed(off, reads)
    assert _notes_of(relayed) == notes


def test_a_piece_that_does_not_fit_the_arguments_fails_the_stream_as_in_full() -> None:
    reads = _gemini_call_reads(GEMINI_ENV, ["one", "two", "three"], b"\r\n")
    # The envelope of a fitting chunk, a path into a note as if it were an object.
    reads[4] = reads[4].replace(b'"$.notes[1]"', b'"$.notes[0].x"')
    on, off = _relays("gemini")
    relayed = _relayed(on, reads)
    assert relayed == _relayed(off, reads)
    assert relayed[-1][1:] == ("StreamFailed", "upstream_protocol_error")


def test_a_fitting_arguments_chunk_reports_its_usage_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Chunks whose counts alternate: each cuts a template until the decoder stops cutting
    # them; the next that fits the last template reports that template's counts again, as
    # decoding it in full does (the usage so far follows each chunk).
    reads = _gemini_call_reads(GEMINI_ENV, [f"note {n}" for n in range(8)], b"\r\n", pieces=1)
    for n in range(1, 9):
        if n % 2 == 0:
            reads[n] = reads[n].replace(b'"totalTokenCount":4', b'"totalTokenCount":9')
    on, off = _relays("gemini")
    relayed = _relayed(on, reads)
    assert relayed == _relayed(off, reads)
    assert [relayed[n][3].total_tokens for n in range(5, 9)] == [4, 9, 4, 9]
    on, _off = _relays("gemini")
    assert _args_reads(on, reads, monkeypatch) > 0
