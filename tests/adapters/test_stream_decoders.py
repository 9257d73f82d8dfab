"""Per-API stream decoders: recorded frames -> canonical events.

Every recorded stream must decode to the same events (raw bytes included) whether it is
fed whole, byte by byte, or cut at hypothesis-chosen places.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.adapters.stream_faults import API_OF_FOLDER, split_frames
from tests.fixtures_dir import COUNTS, FIXTURES_DIR, fixture_params, fixture_paths
from turngate.adapters.anthropic.stream import AnthropicStreamDecoder
from turngate.adapters.gemini.stream import GeminiStreamDecoder
from turngate.adapters.openai_chat.stream import ChatStreamDecoder
from turngate.adapters.openai_responses.stream import ResponsesStreamDecoder
from turngate.adapters.relay import stream_codec
from turngate.adapters.sse import SSEDecoder, SSEFrame
from turngate.errors import UpstreamProtocolError
from turngate.graph.events import (
    ArgsDelta,
    BlockStart,
    BlockStop,
    CitationDelta,
    Native,
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

ALL_STREAMS = fixture_params("*/*.sse")


def api_of(path: Path) -> str:
    return API_OF_FOLDER[path.parent.name]


def decode(api: str, data: bytes, cuts: list[int] | None = None) -> list[StreamEvent]:
    decoder_class, _ = stream_codec(api)
    sse, decoder = SSEDecoder(), decoder_class()
    events: list[StreamEvent] = []
    at = 0
    for cut in sorted(set(cuts or [])):
        for frame in sse.feed(data[at:cut]):
            events += decoder.decode(frame)
        at = cut
    for frame in sse.feed(data[at:]) + sse.close():
        events += decoder.decode(frame)
    return events


def decode_bytewise(api: str, data: bytes) -> list[StreamEvent]:
    decoder_class, _ = stream_codec(api)
    sse, decoder = SSEDecoder(), decoder_class()
    events: list[StreamEvent] = []
    for k in range(len(data)):
        for frame in sse.feed(data[k : k + 1]):
            events += decoder.decode(frame)
    for frame in sse.close():
        events += decoder.decode(frame)
    return events


@pytest.mark.parametrize("path", ALL_STREAMS)
def test_whole_equals_byte_by_byte(path: Path) -> None:
    api, data = api_of(path), path.read_bytes()
    whole = decode(api, data)
    assert whole, "a recorded stream gives events"
    assert decode_bytewise(api, data) == whole
    COUNTS["streams decoded whole = byte by byte"] += 1
    COUNTS["canonical events decoded"] += len(whole)


def _holds_tool_material(api: str, data: Any) -> bool:
    if not isinstance(data, dict):
        return False
    if api == "openai_chat":
        return any(c.get("delta", {}).get("tool_calls") for c in data.get("choices") or [])
    if api == "gemini":
        parts = ((data.get("candidates") or [{}])[0].get("content") or {}).get("parts") or []
        return any(set(p) - {"text", "thought", "thoughtSignature"} for p in parts)
    return False


@pytest.mark.parametrize("path", ALL_STREAMS)
def test_every_frame_is_accounted_for(path: Path) -> None:
    """A frame is relayable as it came (its exact bytes ride on one event, in order) unless it
    holds tool-call material, which must wait for the commit."""
    api, data = api_of(path), path.read_bytes()
    carried = [e.raw for e in decode(api, data) if e.raw]
    frames = split_frames(data)
    held = [f for f in frames if f.raw not in carried]
    assert [f.raw for f in frames if f.raw in carried] == carried
    assert all(_holds_tool_material(api, f.data) for f in held)
    COUNTS["recorded frames relayable byte-exact"] += len(carried)
    COUNTS["recorded frames held for a commit"] += len(held)


_SPLITS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_SPLITS
@given(data=st.data())
def test_hypothesis_splits_give_identical_events(data: st.DataObject) -> None:
    paths = fixture_paths("*/*.sse")
    if not paths:
        pytest.skip(f"recorded fixtures ABSENT: {FIXTURES_DIR}")
    path = data.draw(st.sampled_from(paths), label="stream")
    raw = path.read_bytes()
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=40), label="cuts")
    assert decode(api_of(path), raw, cuts) == decode(api_of(path), raw)
    COUNTS["hypothesis split runs (identical events)"] += 1


# --- what each decoder must get right --------------------------------------------------


def frames_of(data: bytes) -> list[SSEFrame]:
    sse = SSEDecoder()
    return sse.feed(data) + sse.close()


def chat(*chunks: Any) -> bytes:
    out = b""
    for chunk in chunks:
        body = chunk if isinstance(chunk, bytes) else orjson.dumps(chunk)
        out += b"data: " + body + b"\n\n"
    return out


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def test_chat_tool_call_fragments_keyed_by_index() -> None:
    data = chat(
        _chunk({"role": "assistant", "content": None}),
        _chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                "function": {"name": "f", "arguments": ""}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x"'}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}),
        _chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                                "function": {"name": "g", "arguments": "{}"}}]}),
        _chunk({}, "tool_calls"),
        b"[DONE]",
    )  # fmt: skip
    events = decode("openai_chat", data)
    starts = [e for e in events if isinstance(e, BlockStart)]
    assert [(s.index, s.call_id, s.name) for s in starts] == [
        (0, "call_a", "f"),
        (1, "call_b", "g"),
    ]
    args = "".join(e.fragment for e in events if isinstance(e, ArgsDelta) and e.index == 0)
    assert args == '{"x":1}'
    # Call 0 stops when call 1 starts; call 1 when the finish_reason arrives, before TurnEnd.
    order = [type(e).__name__ + str(getattr(e, "index", "")) for e in events]
    assert order.index("BlockStop0") < order.index("BlockStart1")
    assert order.index("BlockStop1") < order.index("TurnEnd")
    assert isinstance(events[-1], StreamDone)
    # Frames carrying tool-call bytes are never marked for relaying as they came.
    assert all(e.raw is None for e in events if isinstance(e, ArgsDelta))


def test_chat_tool_call_out_of_order_is_a_protocol_error() -> None:
    decoder = ChatStreamDecoder()
    (frame,) = frames_of(
        chat(_chunk({"tool_calls": [{"index": 1, "id": "c", "function": {"name": "f"}}]}))
    )
    with pytest.raises(UpstreamProtocolError) as caught:
        decoder.decode(frame)
    assert caught.value.rule == "stream_protocol"


def test_chat_more_than_one_choice_is_refused() -> None:
    chunk = _chunk({"content": "a"})
    chunk["choices"].append({"index": 1, "delta": {"content": "b"}, "finish_reason": None})
    with pytest.raises(UpstreamProtocolError) as caught:
        ChatStreamDecoder().decode(frames_of(chat(chunk))[0])
    assert caught.value.rule == "unsupported_in_target"


def test_chat_in_band_error_chunk() -> None:
    (event,) = ChatStreamDecoder().decode(
        frames_of(chat({"error": {"message": "overloaded", "type": "server_error"}}))[0]
    )
    assert isinstance(event, StreamError)
    assert event.message == "overloaded"


@pytest.mark.parametrize("path", fixture_params("openai-chat/vercel-azure-model-router.sse"))
def test_azure_empty_first_chunk_is_not_the_response_start(path: Path) -> None:
    events = decode("openai_chat", path.read_bytes())
    assert isinstance(events[0], Native)
    start = next(e for e in events if isinstance(e, ResponseStart))
    assert start.handle is not None
    assert start.handle.startswith("chatcmpl-")


@pytest.mark.parametrize("path", fixture_params("openai-chat/pai-moderation-*.sse"))
def test_moderation_chunk_after_usage_is_relayed_as_is(path: Path) -> None:
    events = decode("openai_chat", path.read_bytes())
    usage_at = max(i for i, e in enumerate(events) if isinstance(e, UsageEvent))
    after = events[usage_at + 1 :]
    assert [type(e) for e in after] == [Native, StreamDone]
    assert b'"moderation"' in (after[0].raw or b"")


@pytest.mark.parametrize("path", fixture_params("openai-responses/*.sse"))
def test_responses_sequence_numbers_and_encrypted_content(path: Path) -> None:
    data = path.read_bytes()
    events = decode("openai_responses", data)
    frames = split_frames(data)
    numbered = [f.data.get("sequence_number") for f in frames if isinstance(f.data, dict)]
    if None not in numbered:
        native_seq = [e.seq for e in events if e.raw]
        assert native_seq == [n for n in numbered if n in native_seq]
    # encrypted_content comes from output_item.done, not the (possibly partial) added copy.
    done_items = [
        f.data["item"]
        for f in frames
        if isinstance(f.data, dict) and f.data.get("type") == "response.output_item.done"
    ]
    expected = [i["encrypted_content"] for i in done_items if i.get("encrypted_content")]
    payloads = [e.payload for e in events if isinstance(e, BlockStop) and e.payload]
    assert payloads == expected
    COUNTS["responses encrypted_content taken from output_item.done"] += len(payloads)


@pytest.mark.parametrize("path", fixture_params("openai-responses/pai-function-call-turn1.sse"))
def test_responses_recording_without_sequence_numbers(path: Path) -> None:
    events = decode("openai_responses", path.read_bytes())
    deltas = [e for e in events if isinstance(e, ArgsDelta)]
    assert [d.seq for d in deltas] == list(range(len(deltas)))
    assert "".join(d.fragment for d in deltas) == '{"country":"France"}'


@pytest.mark.parametrize("path", fixture_params("openai-responses/vercel-error-mid-stream.sse"))
def test_responses_error_event(path: Path) -> None:
    errors = [
        e for e in decode("openai_responses", path.read_bytes()) if isinstance(e, StreamError)
    ]
    assert errors
    assert "quota" in errors[0].message


@pytest.mark.parametrize("path", fixture_params("anthropic/pai-thinking-signature.sse"))
def test_anthropic_signature_is_byte_exact(path: Path) -> None:
    data = path.read_bytes()
    events = decode("anthropic", data)
    signature = "".join(e.signature for e in events if isinstance(e, SignatureDelta))
    recorded = [
        f.data["delta"]["signature"]
        for f in split_frames(data)
        if isinstance(f.data, dict) and f.data.get("delta", {}).get("type") == "signature_delta"
    ]
    assert signature == "".join(recorded)
    assert len(signature) > 100
    thinking = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    assert thinking.startswith("This is a straightforward question")


@pytest.mark.parametrize("path", fixture_params("anthropic/pai-redacted-thinking.sse"))
def test_anthropic_redacted_thinking_arrives_whole(path: Path) -> None:
    starts = [e for e in decode("anthropic", path.read_bytes()) if isinstance(e, BlockStart)]
    redacted = [s for s in starts if s.redacted]
    assert len(redacted) == 2
    assert all(s.kind == "reasoning" and s.payload and len(s.payload) > 100 for s in redacted)


@pytest.mark.parametrize("path", fixture_params("anthropic/pai-web-search-citations.sse"))
def test_anthropic_server_tools_and_citations(path: Path) -> None:
    events = decode("anthropic", path.read_bytes())
    kinds = [(s.kind, s.phase, s.name) for s in events if isinstance(s, BlockStart)][:2]
    assert kinds == [
        ("server_tool", "call", "web_search"),
        ("server_tool", "result", "web_search_tool_result"),
    ]
    assert sum(isinstance(e, CitationDelta) for e in events) == 9


def test_anthropic_out_of_order_block_is_a_protocol_error() -> None:
    frame = frames_of(
        b'event: content_block_start\ndata: {"type":"content_block_start","index":1,'
        b'"content_block":{"type":"text","text":""}}\n\n'
    )[0]
    with pytest.raises(UpstreamProtocolError):
        AnthropicStreamDecoder().decode(frame)


@pytest.mark.parametrize("path", fixture_params("gemini/*.sse"))
def test_gemini_crlf_frames_whole_calls_and_finish(path: Path) -> None:
    data = path.read_bytes()
    assert b"\r\n\r\n" in data
    events = decode("gemini", data)
    assert GeminiStreamDecoder.eof_terminates
    ends = [e for e in events if isinstance(e, TurnEnd)]
    assert [e.stop_reason for e in ends] == ["STOP"]
    for stop in (e for e in events if isinstance(e, BlockStop)):
        assert stop.final is not None


@pytest.mark.parametrize("path", fixture_params("gemini/pai-function-tools-gemini3-turn2.sse"))
def test_gemini_signature_on_an_empty_text_part_is_kept(path: Path) -> None:
    stops = [e for e in decode("gemini", path.read_bytes()) if isinstance(e, BlockStop)]
    last = stops[-1].final or {}
    assert last.get("text") == ""
    assert len(last.get("thoughtSignature", "")) > 20


@pytest.mark.parametrize("path", fixture_params("gemini/vercel-*streamed-args.sse"))
def test_gemini_streamed_partial_args_are_assembled(path: Path) -> None:
    events = decode("gemini", path.read_bytes())
    calls = [
        (e.final or {}).get("functionCall")
        for e in events
        if isinstance(e, BlockStop) and "functionCall" in (e.final or {})
    ]
    assert all(c and "partialArgs" not in c and "willContinue" not in c for c in calls)
    args = [c["args"] for c in calls if c and c.get("args")]
    assert args in (
        [{"location": "Boston"}, {"location": "San Francisco"}],
        [{"id": "A"}, {"id": "B"}, {"id": "C"}],
    )


def test_gemini_error_payload() -> None:
    frame = frames_of(b'data: {"error": {"code": 503, "message": "busy"}}\r\n\r\n')[0]
    (event,) = GeminiStreamDecoder().decode(frame)
    assert isinstance(event, StreamError)
    assert event.message == "busy"


DECODERS = [ChatStreamDecoder, ResponsesStreamDecoder, AnthropicStreamDecoder, GeminiStreamDecoder]


@pytest.mark.parametrize("decoder_class", DECODERS)
def test_a_frame_that_is_not_json_is_a_typed_error(decoder_class: type) -> None:
    with pytest.raises(UpstreamProtocolError) as caught:
        decoder_class().decode(frames_of(b"data: {not json\n\n")[0])
    assert caught.value.rule == "stream_malformed"


def test_text_deltas_count_per_block() -> None:
    events = decode("openai_chat", chat(_chunk({"content": "a"}), _chunk({"content": "b"})))
    assert [e.seq for e in events if isinstance(e, TextDelta)] == [0, 1]


_PATHS = ["$.a", "$['a']", "$.notes", "$.notes[0]", "$.notes[1]", "$.n.deep[2]", "$.n"]
_VALUES = {
    "stringValue": st.text(max_size=3),
    "string_value": st.text(max_size=3),
    "numberValue": st.sampled_from([1, 2.0, 2.5]),
    "boolValue": st.booleans(),
    "nullValue": st.none(),
}
_PARTIAL_ENTRY = st.builds(
    lambda path_key, path, kind, value, going: {
        path_key: path,
        kind: value,
        **({} if going is None else {going[0]: going[1]}),
    },
    st.sampled_from(["jsonPath", "json_path"]),
    st.sampled_from(_PATHS),
    st.sampled_from(sorted(_VALUES)),
    st.one_of(*_VALUES.values()),
    st.one_of(
        st.none(),
        st.tuples(st.sampled_from(["willContinue", "will_continue"]), st.sampled_from([True, 1])),
    ),
)


def _applied(entries: list[dict[str, Any]], walk_every_time: bool) -> Any:
    from turngate.adapters.gemini.stream import _apply_partial

    streaming: dict[str, Any] = {"args": {}, "open": None, "open_at": None}
    for entry in entries:
        if walk_every_time:
            streaming["open_at"] = None  # never the shortcut for a continued string
        try:
            _apply_partial(streaming, entry)
        except UpstreamProtocolError as error:
            return ("raised", str(error), streaming["args"])
    return (streaming["args"], streaming["open"])


# More of the string at ``$.notes[1]``: the entry the shortcut takes when the one before
# left that string open.
_CONTINUED = st.builds(
    lambda text, going: {"jsonPath": "$.notes[1]", "stringValue": text, **going},
    st.text(max_size=2),
    st.sampled_from([{"willContinue": True}, {"will_continue": True}, {}]),
)


@given(st.lists(st.one_of(_CONTINUED, _PARTIAL_ENTRY), max_size=30))
def test_gemini_continued_strings_append_as_walking_their_path_does(
    entries: list[dict[str, Any]],
) -> None:
    assert _applied(entries, walk_every_time=False) == _applied(entries, walk_every_time=True)
