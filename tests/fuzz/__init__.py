"""The fuzz targets: each drives one part of turngate the way the proxy (or ``turngate
check``) does, returns an outcome label for the printed counts, and lets every exception
escape. The tests and bench/fuzz_long.py let only ``TurngateError`` through; the inputs
come from tests/fuzz/strategies.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from turngate.adapters import API_NAMES, detect_api, get_adapter
from turngate.adapters.base import Adapter, RouteInfo
from turngate.adapters.relay import StreamRelay, stream_codec
from turngate.adapters.sse import SSEDecoder
from turngate.errors import RemoteError, StateConflict, TurngateError
from turngate.graph.assembler import StreamAssembler, StreamFailed
from turngate.graph.events import StreamEvent
from turngate.graph.model import ApiName, MessageSequence
from turngate.graph.turn import AssistantTurn
from turngate.graph.validator import validate
from turngate.proxy.body import MAX_JSON_DEPTH, json_depth_exceeds

RelayStep = tuple[str, bytes]


def caught(run: Callable[[], str]) -> str:
    """Run a target; a typed error is an outcome, anything else propagates."""
    try:
        return run()
    except TurngateError as exc:
        return f"raised:{exc.rule}"


def drive_sse(pieces: list[bytes], *, max_line: int, max_frame: int, strict: bool) -> str:
    """Bytes in, one read at a time, to an SSE decoder with the given limits."""
    decoder = SSEDecoder(max_line=max_line, max_frame=max_frame)
    frames = [frame for piece in pieces for frame in decoder.feed(piece)]
    frames += decoder.close(strict=strict)
    assert all(len(f.raw) <= max_frame for f in frames), "a frame over the limit got out"
    return f"frames:{len(frames)}"


def drive_decoder(api: ApiName, stream: bytes) -> str:
    """Every frame of ``stream`` through a fresh stream decoder of ``api``. The decoder keeps
    its state across frames and, as in the relay, is fed on after it refused one."""
    decoder = stream_codec(api)[0]()
    sse = SSEDecoder()
    try:
        frames = sse.feed(stream) + sse.close()
    except TurngateError:
        return "raised:sse"
    events = refused = 0
    for frame in frames:
        try:
            events += len(decoder.decode(frame))
        except TurngateError:
            refused += 1
    return f"decoded:{events}-events:{refused}-refused"


def refused(adapter: Adapter, error: TurngateError) -> str:
    """What the proxy does with a typed error: render it in the API's envelope."""
    response = adapter.render_error(error)
    orjson.dumps(response.body)
    return f"refused:{error.rule}"


def drive_request(api: ApiName, body: Any, route: RouteInfo | None = None) -> str:
    """What ``turngate check`` does with a request body (parse, validate: any depth orjson
    reads) and, for a body the proxy lets in (nested at most ``MAX_JSON_DEPTH``), what the
    proxy does too: the manifest's digests, the same API's rendering and its bytes. Then
    the rendering to every other API, read back by that API's parser."""
    if not isinstance(body, dict):
        return "not-an-object"  # the proxy and the checker refuse it before any adapter
    detect_api(body)
    adapter = get_adapter(api)
    try:
        seq = adapter.parse_request(body, route)
    except TurngateError as exc:
        return refused(adapter, exc)
    verdict = validate(seq, adapter.capabilities, role_forgery="refuse")
    if json_depth_exceeds(body, MAX_JSON_DEPTH):
        return f"checked:{verdict.status}:{','.join(sorted(set(verdict.rules)))}"
    _touch(seq)
    try:
        orjson.dumps(adapter.render_request(seq))
    except TurngateError as exc:
        refused(adapter, exc)
    for other in API_NAMES:
        if other == api:
            continue
        target = get_adapter(other)
        try:
            again = target.parse_request(target.render_request(seq), route)
        except TurngateError as exc:
            refused(target, exc)
            continue
        validate(again, target.capabilities)
    return f"parsed:{verdict.status}:{','.join(sorted(set(verdict.rules)))}"


def _touch(seq: MessageSequence) -> list[object]:
    """What the proxy reads off a parsed sequence for its manifest."""
    return [
        seq.sequence_digest,
        seq.toolset_digest,
        seq.adapter_digest,
        seq.conversation_revision,
        seq.model_revision,
        seq.edges,
        *(block.digest for _message, block in seq.blocks()),
    ]


def drive_response(api: ApiName, body: Any) -> str:
    if not isinstance(body, dict):
        return "not-an-object"  # the proxy refuses it before the adapter
    adapter = get_adapter(api)
    try:
        turn = adapter.parse_response(body)
    except TurngateError as exc:
        if not isinstance(exc, RemoteError):
            # The upstream sent it: the client must not get a 4xx that blames its request.
            raise AssertionError(f"{type(exc).__name__} for an upstream's body") from exc
        return refused(adapter, exc)
    _touch_turn(turn)
    return f"parsed:{len(turn.blocks)}-blocks"


def _touch_turn(turn: AssistantTurn) -> list[object]:
    """What a commit reads off a turn (its digests are not computed on commit)."""
    return [turn.handle, turn.stop_reason, turn.tool_calls]


def drive_relay(
    api: ApiName,
    steps: list[RelayStep],
    *,
    marks: str | None = None,
    tools: dict[str, Any] | None = None,
    max_line: int = 16384,
    max_frame: int = 65536,
) -> str:
    """Drive a relay as the proxy does, then finish it. A step is ``("feed", bytes)``,
    ``("old", bytes)`` (bytes of a superseded generation), ``("resume", b"")``,
    ``("restart", b"")`` (a new generation) or ``("fail", b"")`` (the store superseded the
    attempt). Once the relay failed the proxy feeds it nothing more."""
    relay = StreamRelay(
        api,
        tools=tools,
        marks=marks,  # type: ignore[arg-type]
        max_line=max_line,
        max_frame=max_frame,
    )
    written: list[bytes] = []
    for step, data in steps:
        if step == "feed" and not relay.failed:
            written.append(relay.feed(data))
        elif step == "old":
            written.append(relay.feed(data, generation=relay.generation - 1))
        elif step == "resume":
            relay.resume()
        elif step == "restart":
            written.append(relay.restart(relay.generation + 1))
        elif step == "fail":
            written.append(relay.fail(StateConflict("superseded", rule="attempt_superseded")))
        elif step != "feed":
            raise AssertionError(step)
    tail, outcome = relay.finish()
    assert all(isinstance(piece, bytes) for piece in [*written, tail])
    if isinstance(outcome, StreamFailed):
        return f"failed:{outcome.rule}"
    _touch_turn(outcome)
    return f"complete:{len(outcome.blocks)}-blocks"


def drive_assembler(
    api: ApiName,
    sequence: list[StreamEvent],
    *,
    marks: str | None = None,
    tools: dict[str, Any] | None = None,
) -> str:
    """Events straight into an assembler built as the relay builds it, outputs into the
    API's encoder."""
    decoder_class, encoder_class = stream_codec(api)
    decoder = decoder_class()
    assembler = StreamAssembler(
        api=api, tools=tools, eof_terminates=decoder.eof_terminates, builder=decoder.build_block
    )
    encoder = encoder_class(marks)
    for event in sequence:
        for output in assembler.feed(event):
            encoder.encode(output)
    outcome = assembler.finish()
    if isinstance(outcome, StreamFailed):
        encoder.encode_failure(outcome)
        return f"failed:{outcome.rule}"
    _touch_turn(outcome)
    return f"complete:{len(outcome.blocks)}-blocks"
