"""What reaches the client: per-API encoders, commit marks, failures, and faults.

The official SDKs read the client side through an in-process transport (no sockets): what
they make of turngate's relay must equal what they make of the recording itself, and every
broken run must make them raise. Client-side tool calls are counted by an independent
reader (``client_calls``): a partial one is never allowed.
"""

from __future__ import annotations

import copy
import hashlib
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import orjson
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types
from openai.lib.streaming.chat import ChatCompletionStreamState

from tests.adapters import stream_faults as faults
from tests.fixtures_dir import COUNTS, fixture_params, fixture_paths
from turngate.adapters.relay import StreamRelay
from turngate.adapters.sse import SSEDecoder
from turngate.graph.assembler import StreamFailed
from turngate.graph.turn import AssistantTurn

ALL_STREAMS = fixture_params("*/*.sse")
TERMINATORS = {
    "openai_chat": b"data: [DONE]",
    "anthropic": b"event: message_stop",
    "openai_responses": b"event: response.completed",
}


def api_of(path: Path) -> str:
    return faults.API_OF_FOLDER[path.parent.name]


def relay(
    api: str, data: bytes, *, marks: Any = None, chunk: int | None = None
) -> tuple[bytes, AssistantTurn | StreamFailed]:
    relay = StreamRelay(api, marks=marks)  # type: ignore[arg-type]
    step = chunk or len(data) or 1
    out = b"".join(relay.feed(data[at : at + step]) for at in range(0, len(data), step))
    tail, outcome = relay.finish()
    return out + tail, outcome


# --- the official SDKs, offline --------------------------------------------------------------


class _Body(httpx2.SyncByteStream):
    def __init__(self, data: bytes, aborted: bool) -> None:
        self.data, self.aborted = data, aborted

    def __iter__(self) -> Iterator[bytes]:
        yield self.data
        if self.aborted:
            raise httpx2.RemoteProtocolError("peer closed connection without ending the body")


def _http(data: bytes, aborted: bool) -> httpx2.Client:
    def handler(request: httpx2.Request) -> httpx2.Response:
        headers = {"content-type": "text/event-stream"}
        return httpx2.Response(200, headers=headers, stream=_Body(data, aborted))

    return httpx2.Client(transport=httpx2.MockTransport(handler))


@dataclass
class Reading:
    """What the client's SDK ended up with: the final message, or the error it raised."""

    text: str = ""
    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    usage: Any = None
    error: BaseException | None = None


def sdk_read(api: str, data: bytes, *, aborted: bool = False) -> Reading:
    reading = Reading()
    with warnings.catch_warnings():
        # openai's own models warn while serialising some hosted-tool items (web_search
        # actions); that is the SDK talking to itself, the same with or without turngate.
        warnings.filterwarnings("ignore", "Pydantic serializer warnings", UserWarning)
        try:
            _SDK_READERS[api](data, aborted, reading)
        except Exception as exc:  # every SDK exception type is the point here
            reading.error = exc
    return reading


def _read_chat(data: bytes, aborted: bool, reading: Reading) -> None:
    client = openai.OpenAI(
        api_key="k", base_url="http://t/v1", max_retries=0, http_client=_http(data, aborted)
    )
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    for chunk in client.chat.completions.create(model="m", messages=[], stream=True):
        if chunk.usage is not None:
            reading.usage = chunk.usage.model_dump()
        if chunk.choices:
            state.handle_chunk(chunk)
    message = state.get_final_completion().choices[0].message
    reading.text = message.content or ""
    for call in message.tool_calls or []:
        function = call.function  # type: ignore[union-attr]
        reading.calls.append((call.id, function.name, orjson.loads(function.arguments)))


def _read_responses(data: bytes, aborted: bool, reading: Reading) -> None:
    client = openai.OpenAI(
        api_key="k", base_url="http://t/v1", max_retries=0, http_client=_http(data, aborted)
    )
    with client.responses.stream(model="m", input="x") as stream:
        response = stream.get_final_response()
    reading.text = response.output_text
    for item in response.output:
        if item.type == "function_call":
            reading.calls.append((item.call_id, item.name, orjson.loads(item.arguments)))
    reading.usage = response.usage.model_dump() if response.usage else None


def _read_anthropic(data: bytes, aborted: bool, reading: Reading) -> None:
    client = anthropic.Anthropic(
        api_key="k", base_url="http://t", max_retries=0, http_client=_http(data, aborted)
    )
    with client.messages.stream(model="m", max_tokens=1, messages=[]) as stream:
        message = stream.get_final_message()
    for block in message.content:
        if block.type == "text":
            reading.text += block.text
        elif block.type == "tool_use":
            reading.calls.append((block.id, block.name, block.input))
    reading.usage = message.usage.model_dump()


def _read_gemini(data: bytes, aborted: bool, reading: Reading) -> None:
    options = genai_types.HttpOptions(
        base_url="http://t", api_version="v1beta", httpx_client=_http(data, aborted)
    )
    client = genai.Client(api_key="k", http_options=options)
    for chunk in client.models.generate_content_stream(model="m", contents="x"):
        if chunk.usage_metadata is not None:
            reading.usage = chunk.usage_metadata.model_dump()
        content = chunk.candidates[0].content if chunk.candidates else None
        for part in (content.parts if content else None) or []:
            if part.text and not part.thought:
                reading.text += part.text
            call = part.function_call
            if call is not None and call.name and not call.partial_args:
                reading.calls.append((call.id or "", call.name, call.args or {}))


_SDK_READERS = {
    "openai_chat": _read_chat,
    "openai_responses": _read_responses,
    "anthropic": _read_anthropic,
    "gemini": _read_gemini,
}


# --- an independent reader of tool calls on the client side ----------------------------------


@dataclass
class ClientCalls:
    whole: int = 0
    partial: int = 0
    fragmented: int = 0
    calls: list[tuple[str, Any]] = field(default_factory=list)


def _object(text: Any) -> Any:
    try:
        value = orjson.loads(text)
    except (orjson.JSONDecodeError, TypeError):
        return None
    return value if isinstance(value, dict) else None


def client_calls(api: str, data: bytes) -> ClientCalls:
    """Every tool call the client was shown, read straight from its SSE bytes."""
    found = ClientCalls()
    frames = [f.data for f in faults.split_frames(data) if isinstance(f.data, dict)]
    if api == "openai_chat":
        chat: dict[int, dict[str, Any]] = {}
        for chunk in frames:
            for choice in chunk.get("choices") or []:
                for call in (choice.get("delta") or {}).get("tool_calls") or []:
                    slot = chat.setdefault(call["index"], {"args": "", "chunks": 0})
                    slot["chunks"] += 1
                    function = call.get("function") or {}
                    slot.setdefault("name", function.get("name"))
                    slot.setdefault("id", call.get("id"))
                    slot["args"] += function.get("arguments") or ""
        for slot in chat.values():
            _tally(found, slot.get("id") and slot.get("name"), slot, slot["chunks"] > 1)
    elif api == "anthropic":
        blocks: dict[int, dict[str, Any]] = {}
        for event in frames:
            kind, index = event.get("type"), event.get("index")
            block = event.get("content_block") or {}
            if kind == "content_block_start" and block.get("type") == "tool_use":
                blocks[index] = {"name": block["name"], "args": "", "chunks": 0, "stop": False}
            elif kind == "content_block_delta" and index in blocks:
                blocks[index]["args"] += event["delta"].get("partial_json", "")
                blocks[index]["chunks"] += 1
            elif kind == "content_block_stop" and index in blocks:
                blocks[index]["stop"] = True
        for slot in blocks.values():
            slot["args"] = slot["args"] or "{}"
            _tally(found, slot["stop"], slot, slot["chunks"] > 1)
    elif api == "openai_responses":
        items: dict[int, dict[str, Any]] = {}
        for event in frames:
            kind, item = event.get("type"), event.get("item") or {}
            index = event.get("output_index")
            if kind == "response.output_item.added" and item.get("type") == "function_call":
                items[index] = {"name": item["name"], "args": "", "chunks": 0, "done": None}
            elif kind == "response.function_call_arguments.delta" and index in items:
                items[index]["args"] += event["delta"]
                items[index]["chunks"] += 1
            elif kind == "response.output_item.done" and index in items:
                items[index]["done"] = item.get("arguments")
        for slot in items.values():
            complete = slot["done"] is not None and slot["done"] == slot["args"]
            _tally(found, complete, slot, slot["chunks"] > 1)
    elif api == "gemini":
        for chunk in frames:
            for candidate in chunk.get("candidates") or []:
                for part in (candidate.get("content") or {}).get("parts") or []:
                    call = part.get("functionCall")
                    if call is None:
                        continue
                    whole = bool(call.get("name")) and not {"partialArgs", "willContinue"} & set(
                        call
                    )
                    slot = {"name": call.get("name"), "args": orjson.dumps(call.get("args", {}))}
                    _tally(found, whole, slot, False)
    return found


def _tally(found: ClientCalls, complete: Any, slot: dict[str, Any], fragmented: bool) -> None:
    args = _object(slot["args"])
    if complete and args is not None:
        found.whole += 1
        found.calls.append((slot["name"], args))
    else:
        found.partial += 1
    found.fragmented += fragmented


# --- relaying the recordings -----------------------------------------------------------------


@pytest.mark.parametrize("path", ALL_STREAMS)
def test_the_sdk_reads_the_same_message_through_turngate(path: Path) -> None:
    api, data = api_of(path), path.read_bytes()
    out, outcome = relay(api, data)
    failed = isinstance(outcome, StreamFailed)
    direct, relayed = sdk_read(api, data), sdk_read(api, out, aborted=failed)
    if isinstance(outcome, StreamFailed):
        # The recording itself ends in an upstream error: both raise.
        assert direct.error is not None
        assert relayed.error is not None
        COUNTS["recorded upstream errors relayed as the SDK's own error"] += 1
        return
    assert relayed.error is None, relayed.error
    assert direct.error is None, direct.error
    assert relayed.text == direct.text
    assert relayed.usage == direct.usage
    if api == "gemini" and b"partialArgs" in data:
        # The recording streams arguments in pieces; turngate relays each call whole.
        expected = [(c.name, orjson.loads(c.arguments)) for c in outcome.tool_calls]
        assert [(name, args) for _id, name, args in relayed.calls] == expected
    else:
        assert relayed.calls == direct.calls
    COUNTS["recorded streams relayed: SDK final message unchanged"] += 1


@pytest.mark.parametrize("path", ALL_STREAMS)
def test_decoding_the_relay_gives_the_same_turn(path: Path) -> None:
    api, data = api_of(path), path.read_bytes()
    out, outcome = relay(api, data, chunk=97)
    _, second = relay(api, out)
    if isinstance(outcome, StreamFailed):
        assert isinstance(second, StreamFailed)
        return
    assert isinstance(second, AssistantTurn), second
    assert second.semantic_digest == outcome.semantic_digest
    assert (second.stop_reason, second.usage) == (outcome.stop_reason, outcome.usage)


@pytest.mark.parametrize("path", ALL_STREAMS)
def test_committed_calls_reach_the_client_whole_and_marked(path: Path) -> None:
    api, data = api_of(path), path.read_bytes()
    out, outcome = relay(api, data)
    if isinstance(outcome, StreamFailed):
        return
    calls = client_calls(api, out)
    assert (calls.partial, calls.fragmented) == (0, 0)
    assert calls.whole == len(outcome.tool_calls)
    commits = out.count(b": turngate commit ")
    if api == "gemini":
        assert commits == 0
        assert b"\n:" not in out
    else:
        assert commits == len(outcome.blocks)
        # The terminator goes out once, after every commit.
        assert out.count(TERMINATORS[api]) == 1
        assert out.rfind(TERMINATORS[api]) > out.rfind(b": turngate commit ")
    COUNTS["committed tool calls relayed whole"] += calls.whole


@pytest.mark.parametrize("api", ["openai_chat", "anthropic", "openai_responses", "gemini"])
def test_explicit_mark_events_when_asked(api: str) -> None:
    found = [p for p in fixture_paths(f"{faults.FOLDERS[api]}/*.sse") if b"tool" in p.read_bytes()]
    if not found:
        pytest.skip("recorded fixtures ABSENT: no recorded tool-call stream to relay")
    path = found[0]
    marked = StreamRelay(api, marks="events")  # type: ignore[arg-type]
    out = marked.feed(path.read_bytes())
    tail, outcome = marked.finish()
    out += tail
    assert isinstance(outcome, AssistantTurn)
    # Every block the turn was assembled from (the turn itself joins adjacent plain text).
    blocks = marked.assembler.committed
    sse = SSEDecoder()
    frames = sse.feed(out) + sse.close()
    commits = [orjson.loads(f.data) for f in frames if f.event == "turngate.commit"]
    assert [c["block"] for c in commits] == [b.id for b in blocks]
    previews = [f for f in frames if f.event == "turngate.preview"]
    previewed_kinds = {"text", "reasoning", "refusal"}
    assert len(previews) == sum(b.kind in previewed_kinds for b in blocks)
    assert not re.search(rb"(^|\n): turngate", out)


def test_a_comment_line_breaks_google_genai_so_gemini_sends_none_by_default() -> None:
    path = fixture_paths("gemini/pai-text-only.sse")
    if not path:
        pytest.skip("recorded fixtures ABSENT")
    data = path[0].read_bytes()
    plain, _ = relay("gemini", data)
    marked, _ = relay("gemini", data, marks="comments")
    assert b": turngate commit" in marked
    assert sdk_read("gemini", plain).error is None
    assert sdk_read("gemini", marked).error is not None


# --- failures reach the client as the API's own error -----------------------------------------

EXPECTED_ERRORS: dict[str, tuple[type[BaseException], ...]] = {
    "openai_chat": (openai.APIError,),
    "openai_responses": (openai.APIError,),
    "anthropic": (anthropic.APIStatusError,),
    "gemini": (genai_errors.APIError,),
}


def _is_native_error(api: str, out: bytes) -> bool:
    frames = [f for f in faults.split_frames(out) if f.data is not None]
    last = frames[-1] if frames else None
    if last is None or not isinstance(last.data, dict):
        return False
    if api == "anthropic":
        return last.event == "error" and last.data.get("type") == "error"
    return isinstance(last.data.get("error"), dict) and (api != "gemini" or last.event is None)


@dataclass
class FaultTally:
    runs: int = 0
    failed: int = 0
    canonical: int = 0
    sdk_raised: int = 0
    whole_calls: int = 0
    seen: set[bytes] = field(default_factory=set)


def check_run(
    api: str, broken: bytes, original_calls: list[tuple[str, Any]], tally: FaultTally, label: str
) -> tuple[bytes, AssistantTurn | StreamFailed]:
    """One faulty upstream through the relay, with every client-side invariant checked."""
    out, outcome = relay(api, broken)
    calls = client_calls(api, out)
    assert calls.partial == 0, f"{label}: a partial tool call reached the client"
    assert calls.fragmented == 0, f"{label}: a tool call reached the client in pieces"
    assert all(c in original_calls for c in calls.calls), f"{label}: a call not in the stream"
    tally.runs += 1
    tally.whole_calls += calls.whole
    COUNTS["fault runs: partial tool calls reaching the client"] += calls.partial
    if isinstance(outcome, StreamFailed):
        tally.failed += 1
        assert _is_native_error(api, out), f"{label}: no native error event at the end"
        terminator = TERMINATORS.get(api)
        assert terminator is None or terminator not in out, f"{label}: terminator after failure"
        digest = hashlib.sha256(out).digest()
        if digest not in tally.seen:
            tally.seen.add(digest)
            reading = sdk_read(api, out, aborted=True)
            assert isinstance(reading.error, EXPECTED_ERRORS[api]), (label, reading.error)
            tally.sdk_raised += 1
    else:
        tally.canonical += 1
    return out, outcome


def _report(tally: FaultTally, fault: str) -> None:
    COUNTS[f"fault runs: {fault}"] += tally.runs
    COUNTS["fault runs failed (client got the API's error event)"] += tally.failed
    COUNTS["fault runs: distinct broken client streams, official SDK raised"] += tally.sdk_raised
    COUNTS["fault runs: whole tool calls delivered"] += tally.whole_calls


def _original(api: str, data: bytes) -> tuple[AssistantTurn | StreamFailed, list[tuple[str, Any]]]:
    out, outcome = relay(api, data)
    return outcome, client_calls(api, out).calls


TOOL_STREAMS = [
    pytest.param(p, id=p.name)
    for p in fixture_paths("*/*.sse")
    if faults.has_tool_call(api_of(p), p.read_bytes())
] or fixture_params("no-such-fixture")


@pytest.mark.parametrize("path", TOOL_STREAMS)
def test_truncation_at_every_byte_offset(path: Path) -> None:
    """Cut the upstream after every byte. A cut leaves complete only the frames the SSE
    decoder dispatches for that prefix (read for every offset, the decoder closed as at a
    real end of input), so each offset's outcome is the one of the cut at the matching frame
    boundary; that is checked literally at three places inside every frame, and every
    boundary cut goes through the relay, the client-side checks and the SDK."""
    api, data = api_of(path), path.read_bytes()
    _, original_calls = _original(api, data)
    ends = faults.frame_ends(data)
    starts = [0, *ends[:-1]]
    tally = FaultTally()
    by_frames: list[list[tuple[str | None, bytes]]] = []
    for start in starts:
        out, outcome = check_run(api, data[:start], original_calls, tally, f"cut at {start}")
        assert isinstance(outcome, StreamFailed), f"cut at {start} gave a canonical turn"
        by_frames.append(client_view(out))
    by_frames.append(client_view(relay(api, data)[0]))
    literal = set(starts) | {
        at for s, e in zip(starts, ends, strict=True) for at in (s + 1, (s + e) // 2, e - 1)
    }
    sse = SSEDecoder()
    dispatched = 0
    for k in range(len(data) + 1):
        if k:
            dispatched += len(sse.feed(data[k - 1 : k]))
        closing = copy.deepcopy(sse)
        complete = dispatched + sum(not f.truncated for f in closing.close())
        if k in literal:
            assert client_view(relay(api, data[:k])[0]) == by_frames[complete], f"cut at {k}"
    COUNTS["truncation offsets checked (tool-call streams)"] += len(data)
    _report(tally, "truncated")


def client_view(out: bytes) -> list[tuple[str | None, bytes]]:
    """The events a client's SSE reader gets (a frame ended by CR alone is still whole)."""
    sse = SSEDecoder()
    return [(f.event, f.data) for f in sse.feed(out) + sse.close()]


def _each_fault(api: str, data: bytes) -> list[tuple[str, bytes | None]]:
    return [
        ("each delta duplicated", faults.duplicate_deltas(api, data)),
        ("blocks reordered", faults.reorder_blocks(api, data)),
        ("tool stop removed", faults.drop_tool_stop(api, data)),
        ("terminator removed", faults.drop_terminator(api, data)),
        ("dropped mid-arguments", faults.cut_mid_arguments(api, data)),
    ]


@pytest.mark.parametrize("path", ALL_STREAMS)
def test_faulty_upstreams_never_deliver_a_partial_call(path: Path) -> None:
    api, data = api_of(path), path.read_bytes()
    clean, original_calls = _original(api, data)
    for fault, broken in _each_fault(api, data):
        if broken is None:
            continue
        tally = FaultTally()
        _out, outcome = check_run(api, broken, original_calls, tally, fault)
        if fault in ("tool stop removed", "dropped mid-arguments", "terminator removed"):
            assert isinstance(outcome, StreamFailed), fault
        if fault == "each delta duplicated" and api == "openai_responses":
            # Numbered events: duplicates are dropped and the turn is the same. A recording
            # without numbers: what streamed no longer matches the final items, refused.
            if b'"sequence_number"' not in data:
                assert isinstance(outcome, StreamFailed)
            elif isinstance(clean, AssistantTurn):
                assert isinstance(outcome, AssistantTurn)
                assert outcome.semantic_digest == clean.semantic_digest
        _report(tally, fault)


@pytest.mark.parametrize("path", ALL_STREAMS)
def test_a_late_old_generation_is_quarantined(path: Path) -> None:
    api, data = api_of(path), path.read_bytes()
    clean_out, clean = relay(api, data)
    # Generation 1 stalls inside its first frame: nothing reached the client, so a retry
    # (generation 2, same request bytes) may take over; generation 1's late bytes follow.
    cut = faults.frame_ends(data)[0] // 2
    stream = StreamRelay(api)  # type: ignore[arg-type]
    out = b""
    for generation, chunk in faults.old_generation_schedule(data, cut):
        if generation == 2 and stream.generation == 1:
            assert not stream.relayed
            assert out == b""
            out += stream.restart(2)
        out += stream.feed(chunk, generation=generation)
    tail, outcome = stream.finish()
    out += tail
    if isinstance(clean, StreamFailed):
        assert isinstance(outcome, StreamFailed)
        return
    assert isinstance(outcome, AssistantTurn)
    assert outcome.semantic_digest == clean.semantic_digest
    late = [q for q in stream.quarantine if q.generation == 1]
    assert late, "the old generation's late events are quarantined"
    # The client got generation 2's stream, nothing of generation 1.
    assert out.replace(b" g2.b", b" g1.b") == clean_out
    COUNTS["late old-generation events quarantined"] += len(late)


@pytest.mark.parametrize("path", fixture_params("openai-responses/*.sse"))
def test_a_resumed_responses_stream_is_invisible_to_the_client(path: Path) -> None:
    """Drop the connection mid-frame, resume from an earlier sequence number: the replayed
    events are de-duplicated and the client gets exactly the uninterrupted stream."""
    data = path.read_bytes()
    if b'"sequence_number"' not in data:
        pytest.skip("a recording without sequence numbers cannot be resumed")
    clean_out, clean = relay("openai_responses", data)
    ends = faults.frame_ends(data)
    drop = (ends[len(ends) // 2] + ends[len(ends) // 2 + 1]) // 2
    replay_from = ends[len(ends) // 3]
    stream = StreamRelay("openai_responses")
    out = stream.feed(data[:drop])
    stream.resume()
    out += stream.feed(data[replay_from:])
    tail, outcome = stream.finish()
    assert out + tail == clean_out
    if isinstance(clean, StreamFailed):
        assert isinstance(outcome, StreamFailed)
        return
    assert isinstance(outcome, AssistantTurn)
    assert outcome.semantic_digest == clean.semantic_digest
    assert stream.assembler.duplicates > 0
    COUNTS["resumed streams: replayed events dropped by sequence"] += stream.assembler.duplicates


@pytest.mark.parametrize("path", fixture_params("gemini/vercel-*streamed-args.sse"))
@pytest.mark.parametrize("chunk", [None, 1, 61])
def test_a_streamed_gemini_call_without_usage_reaches_the_client_only_whole(
    path: Path, chunk: int | None
) -> None:
    # Vertex streams a call's arguments over chunks; a chunk need not carry usageMetadata.
    # Without it the chunk has nothing to assemble but is not to be relayed either: the
    # client must never see a piece of the call, only the call whole at its end.
    data = b"".join(
        frame.raw
        if not isinstance(frame.data, dict)
        else b"data: "
        + orjson.dumps({k: v for k, v in frame.data.items() if k != "usageMetadata"})
        + b"\r\n\r\n"
        for frame in faults.split_frames(path.read_bytes())
    )
    assert b"partialArgs" in data
    assert b"usageMetadata" not in data
    out, outcome = relay("gemini", data, chunk=chunk)
    assert isinstance(outcome, AssistantTurn)
    assert b"partialArgs" not in out
    assert b"willContinue" not in out
    shown = client_calls("gemini", out)
    assert shown.partial == 0
    assert [name for name, _ in shown.calls] == [c.name for c in outcome.tool_calls]
    COUNTS["gemini streamed calls without usage: relayed only whole"] += len(shown.calls)


@pytest.mark.parametrize("path", fixture_params("gemini/pai-function-call-*turn1.sse"))
def test_a_gemini_chunk_with_a_refused_call_is_never_relayed(path: Path) -> None:
    # A chunk of whole parts goes out as the provider sent it, once its calls are committed;
    # a call that breaks its schema fails the stream first, and nothing of its chunk (the
    # text beside the call included) reaches the client.
    frames = [f for f in faults.split_frames(path.read_bytes()) if isinstance(f.data, dict)]
    calls = [
        part["functionCall"]["name"]
        for frame in frames
        for candidate in frame.data.get("candidates") or []
        for part in (candidate.get("content") or {}).get("parts") or []
        if "functionCall" in part
    ]
    assert calls
    # Every call's schema asks for an argument no recorded call carries.
    strict = {"type": "object", "required": ["__never_sent__"]}
    stream = StreamRelay("gemini", tools=dict.fromkeys(calls, strict))
    out = stream.feed(path.read_bytes())
    tail, outcome = stream.finish()
    assert isinstance(outcome, StreamFailed)
    assert client_calls("gemini", out + tail).calls == []
    assert b"functionCall" not in out + tail
