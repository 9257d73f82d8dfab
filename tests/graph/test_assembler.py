"""StreamAssembler: the commit boundary.

Over every recorded stream the canonical turn must equal an independent reading of the same
stream (the official SDK's own accumulator, or the API's final response object, parsed by
the adapter's non-streaming parser). Then the rules one by one, on synthetic events, and
event-level faults over every recording.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, TypeGuard

import orjson
import pytest
from anthropic.lib.streaming._messages import accumulate_event
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from tests.adapters.stream_faults import API_OF_FOLDER, split_frames
from tests.fixtures_dir import COUNTS, fixture_params
from turngate.adapters import get_adapter
from turngate.adapters.relay import stream_codec
from turngate.adapters.sse import SSEDecoder
from turngate.graph.assembler import (
    TRANSITIONS,
    AssemblerState,
    Commit,
    Complete,
    Failed,
    Preview,
    Quarantine,
    Retract,
    Signal,
    StreamAssembler,
    StreamFailed,
)
from turngate.graph.events import (
    ArgsDelta,
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
from turngate.graph.history import turn_digest
from turngate.graph.model import AnyBlock, TextBlock, ToolCallBlock, UnknownBlock
from turngate.graph.schema_check import SchemaCache, tool_schemas
from turngate.graph.turn import AssistantTurn, Usage, semantic_digest_of

ALL_STREAMS = fixture_params("*/*.sse")


def api_of(path: Path) -> str:
    return API_OF_FOLDER[path.parent.name]


def frame_events(api: str, data: bytes) -> tuple[list[list[StreamEvent]], Any]:
    """The events of each frame, and the decoder (its ``build_block`` goes to the assembler)."""
    decoder_class, _ = stream_codec(api)
    sse, decoder = SSEDecoder(), decoder_class()
    return [decoder.decode(f) for f in sse.feed(data) + sse.close()], decoder


def assemble(
    api: str, frames: list[list[StreamEvent]], decoder: Any, **kwargs: Any
) -> tuple[StreamAssembler, list[Any]]:
    assembler = StreamAssembler(
        api=api,  # type: ignore[arg-type]
        eof_terminates=decoder.eof_terminates,
        builder=decoder.build_block,
        **kwargs,
    )
    outputs = [o for events in frames for e in events for o in assembler.feed(e)]
    return assembler, outputs


def turn_of(path: Path, **kwargs: Any) -> AssistantTurn | StreamFailed:
    api = api_of(path)
    frames, decoder = frame_events(api, path.read_bytes())
    assembler, _ = assemble(api, frames, decoder, **kwargs)
    return assembler.finish()


# --- an independent reading of each recording -------------------------------------------


def independent_reading(api: str, data: bytes) -> AssistantTurn | None:
    """The turn as the official SDK accumulates it (or the API's final response object),
    parsed by the adapter's non-streaming parser. None for a stream that failed."""
    frames = [f for f in split_frames(data) if f.data is not None]
    if api == "openai_chat":
        state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
        for f in frames:
            if isinstance(f.data, dict) and f.data.get("choices"):
                state.handle_chunk(ChatCompletionChunk.construct(**f.data))
        completion = state.get_final_completion().model_dump(mode="json")
        usage = [
            f.data["usage"] for f in frames if isinstance(f.data, dict) and f.data.get("usage")
        ]
        completion["usage"] = usage[-1] if usage else None
        return get_adapter(api).parse_response(completion)
    if api == "anthropic":
        snapshot: Any = None
        buffers: dict[int, bytes] = {}
        for f in frames:
            if f.data.get("type") in ("ping", "error"):
                continue
            snapshot = accumulate_event(event=f.data, current_snapshot=snapshot, json_bufs=buffers)
        return get_adapter(api).parse_response(snapshot.model_dump(mode="json"))
    if api == "openai_responses":
        # encrypted_content is read from output_item.done (the SDK's own advice): the copies
        # in output_item.added and even response.completed can differ.
        done = {
            f.data["item"]["id"]: f.data["item"]
            for f in frames
            if f.data.get("type") == "response.output_item.done"
        }
        for f in frames:
            if f.data.get("type") in ("response.completed", "response.incomplete"):
                response = f.data["response"]
                for item in response["output"]:
                    final = done.get(item.get("id"), {})
                    if final.get("encrypted_content") not in (None, item.get("encrypted_content")):
                        COUNTS["responses encrypted_content differing in response.completed"] += 1
                        item["encrypted_content"] = final["encrypted_content"]
                return get_adapter(api).parse_response(response)
        return None
    if api == "gemini":
        parts, last = [], {}
        for f in frames:
            candidate = (f.data.get("candidates") or [{}])[0]
            for part in (candidate.get("content") or {}).get("parts") or []:
                parts.append(_whole_gemini_part(parts, part))
            last = {**last, **{k: v for k, v in candidate.items() if k != "content"}}
            usage = f.data.get("usageMetadata", last.get("$usage"))
            last["$usage"] = usage
        parts = [p for p in parts if p is not None]
        body = {
            "candidates": [{"content": {"role": "model", "parts": parts}, **last}],
            "usageMetadata": last.pop("$usage"),
            **{k: frames[0].data[k] for k in ("responseId", "modelVersion")},
        }
        return get_adapter(api).parse_response(body)
    raise ValueError(api)


def _whole_gemini_part(parts: list[Any], part: dict[str, Any]) -> dict[str, Any] | None:
    """Vertex streamed arguments, put together the simple way the recordings need."""
    call = part.get("functionCall")
    if call is None:
        return part
    open_call = next((p for p in reversed(parts) if p and p.get("$open")), None)
    if open_call is None and call.get("willContinue"):
        return {**part, "functionCall": {"name": call["name"], "args": {}}, "$open": True}
    if open_call is None:
        return part
    for arg in call.get("partialArgs", []):
        key = arg["jsonPath"].removeprefix("$.")
        args = open_call["functionCall"]["args"]
        args[key] = args.get(key, "") + arg["stringValue"]
    if not call.get("willContinue"):
        del open_call["$open"]
    return None


def _text_runs_joined(blocks: tuple[AnyBlock, ...]) -> list[AnyBlock]:
    """What a canonical turn keeps of ``blocks``: each run of adjacent text blocks with no
    attributes of their own as one block (a Gemini reading has a part per streamed chunk)."""
    joined: list[AnyBlock] = []
    for block in blocks:
        last = joined[-1] if joined else None
        if _plain(block) and last is not None and _plain(last):
            joined[-1] = dataclasses.replace(last, text=last.text + block.text)
        else:
            joined.append(block)
    return joined


def _plain(block: AnyBlock) -> TypeGuard[TextBlock]:
    return isinstance(block, TextBlock) and not block.attrs and block.trust == "untrusted"


@pytest.mark.parametrize("path", ALL_STREAMS)
def test_recorded_stream_gives_the_turn_the_sdk_reads(path: Path) -> None:
    api, data = api_of(path), path.read_bytes()
    turn = turn_of(path)
    expected = independent_reading(api, data)
    if expected is None:
        assert isinstance(turn, StreamFailed)
        assert turn.rule == "upstream_error"
        COUNTS["recorded streams ending in an upstream error (no turn)"] += 1
        return
    assert isinstance(turn, AssistantTurn), turn
    reading = _text_runs_joined(expected.blocks)
    assert [b.kind for b in turn.blocks] == [b.kind for b in reading]
    assert turn.semantic_digest == semantic_digest_of(reading)
    assert turn_digest(turn.blocks) == turn_digest(expected.blocks)
    assert (turn.handle, turn.stop_reason, turn.usage) == (
        expected.handle,
        expected.stop_reason,
        expected.usage,
    )
    COUNTS["recorded streams assembled = SDK reading"] += 1
    COUNTS["recorded tool calls committed"] += len(turn.tool_calls)


@pytest.mark.parametrize("path", fixture_params("*/*.sse"))
def test_recorded_tool_calls_satisfy_the_declared_schemas(path: Path) -> None:
    request = path.with_name(path.name.removesuffix(".sse") + ".request.json")
    if not request.exists():
        pytest.skip("no recorded request beside this stream")
    api = api_of(path)
    seq = get_adapter(api).parse_request(orjson.loads(request.read_bytes()))
    tools = tool_schemas(seq)
    turn = turn_of(path, tools=tools)
    assert isinstance(turn, AssistantTurn), turn
    checked = [c for c in turn.tool_calls if tools.get(c.name)]
    COUNTS["recorded tool calls checked against their declared schema"] += len(checked)


# --- the rules, on synthetic events ---------------------------------------------------------

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


def run(events: list[StreamEvent], **kwargs: Any) -> tuple[StreamAssembler, list[Any]]:
    assembler = StreamAssembler(api="anthropic", **kwargs)
    return assembler, [o for e in events for o in assembler.feed(e)]


def call(
    index: int, args: list[str], call_id: str = "call_1", name: str = "weather"
) -> list[StreamEvent]:
    return [
        BlockStart(index, "tool_call", call_id=call_id, name=name),
        *(ArgsDelta(index, a, seq=k) for k, a in enumerate(args)),
        BlockStop(index),
    ]


def text(index: int, *parts: str) -> list[StreamEvent]:
    return [
        BlockStart(index, "text"),
        *(TextDelta(index, p, seq=k) for k, p in enumerate(parts)),
        BlockStop(index),
    ]


START = ResponseStart(handle="msg_1", model="m")
END = [TurnEnd("tool_use"), StreamDone()]


def test_text_previews_at_once_and_a_call_commits_only_whole() -> None:
    events = [START, *text(0, "Hi", " there"), *call(1, ['{"ci', 'ty": "Paris"}']), *END]
    assembler = StreamAssembler(api="anthropic", tools={"weather": WEATHER})
    per_event = [assembler.feed(e) for e in events]
    # Each text event is previewed as it arrives; no output at all while the call streams.
    assert all(isinstance(outs[0], Preview) for outs in per_event[1:4])
    assert per_event[5:7] == [[], []]
    (commit,) = per_event[8]
    assert isinstance(commit, Commit)
    assert isinstance(commit.block, ToolCallBlock)
    assert commit.block.arguments == '{"city": "Paris"}'
    assert [type(e) for e in commit.held] == [BlockStart, ArgsDelta, ArgsDelta, BlockStop]
    (complete,) = per_event[-1]
    assert isinstance(complete, Complete)
    assert [b.kind for b in complete.turn.blocks] == ["text", "tool_call"]
    assert complete.turn.blocks[0].text == "Hi there"  # type: ignore[union-attr]
    assert assembler.finish() is complete.turn


@pytest.mark.parametrize(
    ("args", "tools", "call_id", "rule"),
    [
        (['{"city": 3}'], {"weather": WEATHER}, "call_1", "schema_violation"),
        (['{"town": "x"}'], {"weather": WEATHER}, "call_1", "schema_violation"),
        (['{"city": "P'], {"weather": WEATHER}, "call_1", "incomplete_arguments"),
        # No argument bytes is no arguments ({}): refused here for the city it lacks.
        ([], {"weather": WEATHER}, "call_1", "schema_violation"),
        (['["a"]'], None, "call_1", "incomplete_arguments"),
        (['{"city": "P"}'], {"other": WEATHER}, "call_1", "unknown_tool"),
        (['{"city": "P"}'], None, "", "invalid_call_id"),
        (['{"city": "P"}'], None, "call 1", "invalid_call_id"),
    ],
)
def test_an_invalid_call_is_never_committed(
    args: list[str], tools: dict[str, Any] | None, call_id: str, rule: str
) -> None:
    events = [START, *text(0, "Let me look."), *call(1, args, call_id), *END]
    assembler, outputs = run(events, tools=tools)
    assert not any(isinstance(o, Commit) and o.block.kind == "tool_call" for o in outputs)
    failed = [o for o in outputs if isinstance(o, Failed)]
    assert len(failed) == 1
    assert failed[0].error.rule == rule
    # The text preview already relayed is retracted; the turn never becomes canonical.
    assert [r.index for r in failed[0].error.retracted] == [0]
    assert isinstance(assembler.finish(), StreamFailed)
    assert assembler.state is AssemblerState.FAILED


def test_a_call_the_provider_closes_with_no_argument_bytes_calls_a_tool_with_none() -> None:
    """OpenAI writes `arguments: ""` for a tool that takes no arguments (openai-python PR
    #3502): once the provider closes the call, it is committed as sent. A stream cut before
    the close never commits it (the truncation tests in test_stream_encoders)."""
    no_args = {"type": "object", "properties": {}}
    events = [START, *call(0, [], "call_1"), *END]
    _, outputs = run(events, tools={"weather": no_args})
    (committed,) = [o for o in outputs if isinstance(o, Commit) and o.block.kind == "tool_call"]
    assert committed.block.arguments == ""
    assert not [o for o in outputs if isinstance(o, Failed)]


def test_a_call_id_used_twice_fails_the_turn() -> None:
    events = [START, *call(0, ["{}"], "toolu_1"), *call(1, ["{}"], "toolu_1"), *END]
    _, outputs = run(events)
    assert [type(o) for o in outputs][-1] is Failed
    assert outputs[-1].error.rule == "duplicate_call_id"


def test_the_call_id_rules_of_the_api_apply() -> None:
    from turngate.adapters.openai_chat import CAPABILITIES

    events = [START, *call(0, ["{}"], "c" * 65), *END]
    _, outputs = run(events, capabilities=CAPABILITIES)
    assert outputs[-1].error.rule == "invalid_call_id"


def test_streamed_and_final_arguments_must_agree() -> None:
    events = [
        START,
        BlockStart(0, "tool_call", call_id="c", name="weather"),
        ArgsDelta(0, '{"city": "A"}', seq=0),
        BlockStop(0, arguments='{"city": "B"}'),
    ]
    _, outputs = run(events)
    assert outputs[-1].error.rule == "arguments_mismatch"


def test_a_block_never_stopped_fails_at_turn_end() -> None:
    events = [START, BlockStart(0, "tool_call", call_id="c", name="w"), ArgsDelta(0, "{}", seq=0)]
    assembler, outputs = run([*events, *END])
    assert outputs[-1].error.rule == "missing_stop"
    assert isinstance(assembler.finish(), StreamFailed)


def test_a_terminator_without_a_stop_reason_is_not_canonical() -> None:
    _assembler, outputs = run([START, *text(0, "x"), StreamDone()])
    assert isinstance(outputs[-1], Failed)
    assert outputs[-1].error.rule == "stream_protocol"


@pytest.mark.parametrize("eof_terminates", [False, True])
def test_connection_end_after_the_stop_reason(eof_terminates: bool) -> None:
    assembler, _ = run([START, *text(0, "x"), TurnEnd("STOP")], eof_terminates=eof_terminates)
    outcome = assembler.finish()
    assert isinstance(outcome, AssistantTurn) is eof_terminates
    if not eof_terminates:
        assert isinstance(outcome, StreamFailed)
        assert outcome.rule == "stream_truncated"


@pytest.mark.parametrize("cut", range(0, 7))
def test_a_dropped_stream_never_yields_a_turn(cut: int) -> None:
    events = [START, *call(0, ['{"city"', ': "P"}']), *END]
    assembler, outputs = run(events[:cut])
    stopped = BlockStop(0) in events[:cut]
    assert any(isinstance(o, Commit) for o in outputs) is stopped
    outcome = assembler.finish()
    assert isinstance(outcome, StreamFailed)
    assert outcome.rule == "stream_truncated"


def test_an_upstream_error_event_fails_the_turn_with_its_native_error() -> None:
    native = {"type": "error", "error": {"type": "overloaded_error"}}
    _, outputs = run([START, *text(0, "x"), StreamError("Overloaded", native=native, raw=b"e")])
    error = outputs[-1].error
    assert (error.rule, error.native, error.raw) == ("upstream_error", native, b"e")


def test_duplicate_deltas_are_dropped_by_their_sequence() -> None:
    events = [START, BlockStart(0, "text"), TextDelta(0, "a", seq=0), TextDelta(0, "a", seq=0)]
    events += [TextDelta(0, "b", seq=1), TextDelta(0, "a", seq=0), BlockStop(0), *END]
    assembler, outputs = run(events)
    turn = assembler.finish()
    assert isinstance(turn, AssistantTurn)
    assert turn.blocks[0].text == "ab"
    assert assembler.duplicates == 2
    assert sum(isinstance(o, Preview) and isinstance(o.event, TextDelta) for o in outputs) == 2


def test_events_of_an_old_generation_are_quarantined() -> None:
    assembler = StreamAssembler(api="openai_responses", generation=1)
    assembler.feed(START, generation=1)
    preview = assembler.feed(BlockStart(0, "text"), generation=1)
    retracts = assembler.activate(2)
    assert isinstance(preview[0], Preview)
    assert retracts == [Retract("g1.b0", 0, "superseded by a new attempt generation")]
    late = assembler.feed(TextDelta(0, "stale", seq=0), generation=1)
    assert isinstance(late[0], Quarantine)
    assert late[0].generation == 1
    for event in [START, *text(0, "fresh"), TurnEnd("completed"), StreamDone()]:
        assembler.feed(event, generation=2)
    turn = assembler.finish()
    assert isinstance(turn, AssistantTurn)
    assert turn.blocks[0].text == "fresh"
    assert assembler.quarantined == 1


def test_events_after_the_terminator_are_quarantined() -> None:
    assembler, _ = run([START, *text(0, "x"), *END])
    assert isinstance(assembler.feed(Native("ping"))[0], Quarantine)


@pytest.mark.parametrize("deltas", [63, 64, 65, 129, 1000])
def test_long_blocks_commit_every_delta_in_order(deltas: int) -> None:
    """The assembler keeps a block's deltas joined in runs: no character moves or is lost at
    a run's edge, duplicates included."""
    words = [f"w{k} " for k in range(deltas)]
    fragments = list(orjson.dumps({"notes": words}).decode())
    events: list[StreamEvent] = [START, BlockStart(0, "text")]
    for k, word in enumerate(words):
        events += [TextDelta(0, word, seq=k)] * (2 if k % 50 == 0 else 1)
    events += [BlockStop(0), *call(1, fragments), *END]
    assembler, _ = run(events)
    turn = assembler.finish()
    assert isinstance(turn, AssistantTurn)
    text, tool = turn.blocks
    assert text.text == "".join(words)
    assert isinstance(tool, ToolCallBlock)
    assert tool.arguments == "".join(fragments)
    assert assembler.duplicates == len(range(0, deltas, 50))


def test_an_unknown_delta_kind_is_never_joined_into_text() -> None:
    _, outputs = run([START, BlockStart(0, "text"), OpaqueDelta(0, {"type": "new_delta"})])
    assert outputs[-1].error.rule == "unknown_kind"


def test_an_unknown_block_is_held_and_committed_as_unknown() -> None:
    events = [START, BlockStart(0, "unknown", native_type="hologram"), OpaqueDelta(0, {"x": 1})]
    events += [BlockStop(0), *END]
    _assembler, outputs = run(events)
    commits = [o for o in outputs if isinstance(o, Commit)]
    assert isinstance(commits[0].block, UnknownBlock)
    assert commits[0].block.native_type == "hologram"
    assert not any(isinstance(o, Preview) and o.block_id for o in outputs)


def test_citations_and_usage_are_kept() -> None:
    events = [START, BlockStart(0, "text"), CitationDelta(0, {"url": "u"}, seq=0)]
    events += [BlockStop(0), UsageEvent(Usage(5, None, None)), UsageEvent(Usage(None, 7, 12))]
    assembler, _ = run([*events, *END])
    turn = assembler.finish()
    assert isinstance(turn, AssistantTurn)
    assert turn.blocks[0].attrs["citations"] == [{"url": "u"}]
    assert turn.usage == Usage(5, 7, 12)


_SIGNALS = {
    Signal.START: START,
    Signal.BLOCK: BlockStart(0, "text"),
    Signal.META: Native("ping"),
    Signal.TURN_END: TurnEnd("stop"),
    Signal.DONE: StreamDone(),
}
_REACH: dict[AssemblerState, list[StreamEvent]] = {
    AssemblerState.AWAITING_START: [],
    AssemblerState.STREAMING: [START],
    AssemblerState.ENDING: [START, TurnEnd("stop")],
}


@pytest.mark.parametrize(("state", "signal"), [(s, g) for s in _REACH for g in _SIGNALS])
def test_the_transition_table_is_what_the_assembler_does(
    state: AssemblerState, signal: Signal
) -> None:
    assembler, _ = run(_REACH[state])
    assert assembler.state is state
    assembler.feed(_SIGNALS[signal])
    expected = TRANSITIONS.get((state, signal), AssemblerState.FAILED)
    assert assembler.state is expected


def test_compiled_schemas_are_cached_by_digest() -> None:
    cache = SchemaCache(max_size=2)
    for _ in range(3):
        assert cache.check(WEATHER, {"city": "x"}) is None
    assert cache.compiled == 1
    assert cache.check(WEATHER, {"city": 1}) is not None
    cache.check({"type": "string"}, "a")
    cache.check({"type": "integer"}, 1)
    assert len(cache) == 2
    assert cache.compiled == 3


# --- event-level faults over every recording ------------------------------------------------


def _calls(outputs: list[Any]) -> list[tuple[str, str, str]]:
    return [
        (o.block.call_id, o.block.name, o.block.arguments)
        for o in outputs
        if isinstance(o, Commit) and isinstance(o.block, ToolCallBlock)
    ]


@pytest.mark.parametrize("path", ALL_STREAMS)
def test_every_frame_prefix_is_failed_and_commits_only_whole_calls(path: Path) -> None:
    api = api_of(path)
    frames, _ = frame_events(api, path.read_bytes())
    _, full_outputs = assemble(api, frames, frame_events(api, path.read_bytes())[1])
    full_calls = set(_calls(full_outputs))
    # Every frame boundary; the three longest recordings (600+ frames) every few frames.
    stride = max(1, len(frames) // 250)
    for cut in range(0, len(frames), stride):
        fresh_frames, decoder = frame_events(api, path.read_bytes())
        assembler, outputs = assemble(api, fresh_frames[:cut], decoder)
        assert isinstance(assembler.finish(), StreamFailed)
        assert set(_calls(outputs)) <= full_calls
        COUNTS["event-level prefixes checked (never canonical)"] += 1


@pytest.mark.parametrize("path", ALL_STREAMS)
def test_replayed_deltas_with_their_sequence_are_deduplicated(path: Path) -> None:
    api = api_of(path)
    frames, decoder = frame_events(api, path.read_bytes())
    doubled = [
        [e for event in events for e in ((event, event) if _is_delta(event) else (event,))]
        for events in frames
    ]
    clean = turn_of(path)
    assembler, _ = assemble(api, doubled, decoder)
    turn = assembler.finish()
    if isinstance(clean, StreamFailed):
        assert isinstance(turn, StreamFailed)
        return
    assert isinstance(turn, AssistantTurn)
    assert turn.semantic_digest == clean.semantic_digest
    COUNTS["replayed deltas dropped by sequence"] += assembler.duplicates


def _is_delta(event: StreamEvent) -> bool:
    deltas = TextDelta | ArgsDelta | CitationDelta | ReasoningDelta | SignatureDelta
    return isinstance(event, deltas) and event.seq is not None


# --- whole_text: a text block whole in one frame, kept as its text -------------------------


def _whole_start(index: int) -> BlockStart:
    return BlockStart(index, "text", native_type="text")


def _whole(texts: list[str], *, taken: bool) -> StreamAssembler:
    """Text blocks 0.. of one frame each, through ``whole_text`` or through ``feed``."""
    assembler = StreamAssembler(api="gemini", eof_terminates=True)
    assembler.feed(START)
    for index, piece in enumerate(texts):
        if taken:
            assert assembler.whole_text(index, piece, Usage(3, index, None), _whole_start)
            continue
        for event in (
            _whole_start(index),
            TextDelta(index, piece, seq=0),
            BlockStop(index),
            UsageEvent(Usage(3, index, None)),
        ):
            assembler.feed(event)
    return assembler


def _blocks(turn: AssistantTurn | StreamFailed) -> list[tuple[str, int, str, dict[str, Any]]]:
    assert isinstance(turn, AssistantTurn)
    return [(b.id, b.order, b.trust, b.semantic()) for b in turn.blocks]


@pytest.mark.parametrize("ending", ["turn", "delta", "start", "fail"])
def test_text_blocks_taken_whole_are_what_feed_makes_of_them(ending: str) -> None:
    texts = ["a", "b", "", "c"]
    results = []
    for taken in (True, False):
        assembler = _whole(texts, taken=taken)
        if ending == "turn":
            outputs = [*assembler.feed(TurnEnd("STOP")), *assembler.feed(StreamDone())]
        elif ending == "delta":
            outputs = assembler.feed(TextDelta(1, "late", seq=1))  # a stopped block
        elif ending == "start":
            outputs = assembler.feed(_whole_start(2))  # started twice
        else:
            outputs = assembler.fail(StreamFailed("gone", rule="upstream_dropped"))
        outcome = assembler.finish()
        results.append(
            (
                [type(o).__name__ for o in outputs],
                getattr(outputs[-1], "error", None) and str(outputs[-1].error),
                getattr(outputs[-1], "error", None) and outputs[-1].error.rule,
                getattr(outputs[-1], "error", None) and outputs[-1].error.retracted,
                _blocks(outcome) if isinstance(outcome, AssistantTurn) else outcome.rule,
                assembler.usage,
                assembler.relayed,
            )
        )
    assert results[0] == results[1]
    if ending == "turn":
        # One block of the joined text, where the stream had a block per chunk.
        assert [(b[0], b[1], b[3]["text"]) for b in results[0][4]] == [("g1.b0", 0, "abc")]


def test_a_turn_joins_adjacent_plain_text_and_keeps_what_a_client_sends_back() -> None:
    """Runs of plain text blocks (taken whole or fed) become one block each, split by a
    call and by text with attributes; the digest a conversation compares is unchanged."""
    assembler = StreamAssembler(api="gemini", eof_terminates=True)
    for event in (START, *text(0, "Hel", "lo"), *text(1, " wor")):
        assembler.feed(event)
    assert assembler.whole_text(2, "ld", None, _whole_start)
    for event in call(3, ['{"city": "Paris"}']):
        assembler.feed(event)
    assert assembler.whole_text(4, "after", None, _whole_start)
    signed = BlockStart(5, "text", native_type="text", attrs={"thoughtSignature": "s"})
    for event in (signed, TextDelta(5, " signed", seq=0), BlockStop(5)):
        assembler.feed(event)
    assert assembler.whole_text(6, " tail", None, _whole_start)
    per_chunk = list(assembler.committed)
    assembler.feed(TurnEnd("STOP"))
    turn = assembler.finish()
    assert isinstance(turn, AssistantTurn)
    assert [(b.id, b.kind, getattr(b, "text", None)) for b in turn.blocks] == [
        ("g1.b0", "text", "Hello world"),
        ("g1.b3", "tool_call", None),
        ("g1.b4", "text", "after"),
        ("g1.b5", "text", " signed"),
        ("g1.b6", "text", " tail"),
    ]
    assert len(per_chunk) == 7  # a failure still retracts every previewed block by its id
    assert turn_digest(turn.blocks) == turn_digest(per_chunk)


def test_a_text_block_is_taken_whole_only_while_streaming_and_new() -> None:
    assembler = StreamAssembler(api="gemini", eof_terminates=True)
    assert not assembler.whole_text(0, "early", None, _whole_start)  # before the start
    assembler.feed(START)
    assert assembler.whole_text(0, "a", None, _whole_start)
    assert not assembler.whole_text(0, "again", None, _whole_start)
    assembler.feed(_whole_start(1))
    assert not assembler.whole_text(1, "open", None, _whole_start)
