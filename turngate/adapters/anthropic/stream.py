"""Anthropic Messages streams: named events -> canonical events, and the relay back.

``message_start`` → per block ``content_block_start`` → ``content_block_delta``* →
``content_block_stop`` → ``message_delta`` (stop reason, cumulative usage) →
``message_stop``; ``ping`` anywhere; ``event: error`` for failures after the 200. Blocks
that arrive whole (``redacted_thinking``, server-tool results) have no deltas. The decoder
also rebuilds each block's final native object (text, thinking + signature, citations,
``input``), and ``build_block`` turns it into a graph block with the adapter's own parser,
so a streamed turn equals the same message read whole.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from turngate.adapters.anthropic.blocks import (
    PROVIDER_MARKS,
    SERVER_CALL_TYPES,
    BlockParser,
    is_server_result_type,
)
from turngate.adapters.anthropic.response import usage_of
from turngate.adapters.sse import MarkStyle, SSEFrame, StreamEncoder, encode_frame, frame_json
from turngate.adapters.template import PAD, FrameTemplate, Hole, QuickDelta, cut, read_with
from turngate.errors import TurngateError, UpstreamProtocolError
from turngate.graph.assembler import Commit
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
from turngate.graph.model import AnyBlock, ToolCallBlock
from turngate.graph.turn import Usage

_ARGUMENT_BLOCKS = frozenset({"tool_use"} | SERVER_CALL_TYPES)
_TEXT_HOLES = (Hole(b'"text":', ("delta", "text"), "text"), PAD)
_ARGS_HOLES = (Hole(b'"partial_json":', ("delta", "partial_json"), "text"), PAD)
# Templates a block may cut: a provider whose frames change from delta to delta would
# otherwise pay for a probe on every one.
_TEMPLATES_PER_BLOCK = 4


class AnthropicStreamDecoder:
    api = "anthropic"
    eof_terminates = False

    def __init__(self) -> None:
        self._index: dict[int, int] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        # Streamed text, thinking and signature pieces per (block, key), joined into the
        # block's final object at its stop: growing the string each delta copied all of it
        # every time (quadratic in a long answer's deltas).
        self._grown: dict[tuple[int, str], list[str]] = {}
        self._counts: dict[int, int] = {}
        self._input_tokens: int | None = None
        self._open: int | None = None
        # The whole frame of the open block's last text or argument delta read in full, its
        # block and whether it holds arguments (adapters/template.py); dropped when a block
        # starts or stops.
        self._template: FrameTemplate | None = None
        self._template_block = -1
        self._template_args = False
        self._template_pieces: list[str] = []
        self._templates_left = 0

    def quick_frame(self, frame: bytes) -> QuickDelta | None:
        """``TemplateStreamDecoder.quick_frame``: more text, or more arguments, of the open
        block."""
        read = read_with(self._template, frame)
        if read is None:
            return None
        index, piece = self._template_block, read[0]
        seq = self._counts[index]
        self._counts[index] = seq + 1
        self._template_pieces.append(piece)
        return index, piece, seq, self._template_args

    def text_run(self) -> tuple[int, FrameTemplate] | None:
        """``TextRunDecoder.text_run``: the open block and its delta template, when the
        block is text."""
        template = self._template
        if template is None or self._template_args:
            return None
        return self._template_block, template

    def took_text(self, index: int, pieces: list[str]) -> int:
        """``TextRunDecoder.took_text``: the pieces' sequence numbers taken, and the pieces
        kept for the block's final object."""
        seq = self._counts[index]
        self._counts[index] = seq + len(pieces)
        self._template_pieces.extend(pieces)
        return seq

    def decode(self, frame: SSEFrame) -> list[StreamEvent]:
        if frame.truncated:
            return []
        payload = frame_json(frame.data)
        kind = payload.get("type", frame.event)
        raw = frame.raw
        if kind == "content_block_delta":
            event = self._delta(payload, raw)
            if self._templates_left and (type(event) is TextDelta or type(event) is ArgsDelta):
                self._templates_left -= 1
                self._cut(frame, payload, event.index, type(event) is ArgsDelta)
            return [event]
        if kind == "content_block_start":
            return self._start(payload, raw)
        if kind == "content_block_stop":
            return [self._stop(payload, raw)]
        if kind == "message_start":
            return self._message_start(payload, raw)
        if kind == "message_delta":
            return self._message_delta(payload, raw)
        if kind == "message_stop":
            return [StreamDone(raw=raw)]
        if kind == "error":
            error = payload.get("error")
            native = error if isinstance(error, dict) else payload
            message = native.get("message")
            text = message if isinstance(message, str) else "upstream stream error"
            return [StreamError(text, native=payload, raw=raw)]
        # ``ping`` and event types added later: frames with nothing to assemble.
        return [Native(str(kind), raw=raw)]

    def _cut(self, frame: SSEFrame, payload: dict[str, Any], index: int, args: bool) -> None:
        """The template of this text (or argument) delta's whole frame (None when it cannot
        be cut)."""
        template = cut(frame.data, payload, _ARGS_HOLES if args else _TEXT_HOLES)
        self._template = None if template is None else template.framed(frame.raw, frame.data)
        self._template_block = index
        self._template_args = args
        # Where ``_delta`` keeps the block's pieces: the fragments, or the text grown so far.
        self._template_pieces = self._json[index] if args else self._grown[(index, "text")]

    def _message_start(self, payload: dict[str, Any], raw: bytes) -> list[StreamEvent]:
        message = payload.get("message")
        if not isinstance(message, dict):
            raise UpstreamProtocolError("message_start without a message", rule="stream_malformed")
        handle, model = message.get("id"), message.get("model")
        start = ResponseStart(
            handle=handle if isinstance(handle, str) else None,
            model=model if isinstance(model, str) else None,
            native=message,
            raw=raw,
        )
        usage = message.get("usage")
        if not isinstance(usage, dict):
            return [start]
        counted = usage_of(usage)
        self._input_tokens = counted.input_tokens
        return [replace(start, raw=b""), UsageEvent(counted, native=usage, raw=raw)]

    def _message_delta(self, payload: dict[str, Any], raw: bytes) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        delta = payload.get("delta")
        stop_reason = delta.get("stop_reason") if isinstance(delta, dict) else None
        if isinstance(stop_reason, str):
            events.append(TurnEnd(stop_reason, native=delta, raw=b""))
        usage = payload.get("usage")
        if isinstance(usage, dict):
            counted = usage_of(usage)
            prompt = counted.input_tokens if counted.input_tokens is not None else None
            prompt = prompt if prompt is not None else self._input_tokens
            output = counted.output_tokens
            total = prompt + output if prompt is not None and output is not None else None
            events.append(UsageEvent(Usage(prompt, output, total), native=usage, raw=b""))
        if not events:
            return [Native("message_delta", raw=raw)]
        events[-1] = replace(events[-1], raw=raw)
        return events

    def _start(self, payload: dict[str, Any], raw: bytes) -> list[StreamEvent]:
        native_index, block = payload.get("index"), payload.get("content_block")
        if not isinstance(native_index, int) or not isinstance(block, dict):
            raise UpstreamProtocolError("malformed content_block_start", rule="stream_malformed")
        if native_index not in self._index and native_index != len(self._index):
            raise UpstreamProtocolError(
                f"content block {native_index} started out of order", rule="stream_protocol"
            )
        if self._open is not None and self._open != native_index:
            # Blocks stream one after another; the client's SDK indexes content by position.
            raise UpstreamProtocolError(
                f"content block {native_index} started before block {self._open} stopped",
                rule="stream_protocol",
            )
        self._open = native_index
        self._template = None
        self._templates_left = _TEMPLATES_PER_BLOCK
        index = self._index.setdefault(native_index, len(self._index))
        self._blocks[index] = dict(block)
        self._json[index] = []
        self._counts[index] = 0
        kind = block.get("type")
        kind = kind if isinstance(kind, str) else None  # any other JSON value names no type
        native_type = kind if kind is not None else "unknown"
        common: dict[str, Any] = {"native_type": native_type, "native_index": native_index}
        call_id, name = block.get("id"), block.get("name")
        call_id = call_id if isinstance(call_id, str) else None
        name = name if isinstance(name, str) else None
        if kind == "text":
            start = BlockStart(index, "text", **common)
        elif kind == "thinking":
            start = BlockStart(index, "reasoning", **common)
        elif kind == "redacted_thinking":
            data = block.get("data")
            payload_data = data if isinstance(data, str) else None
            start = BlockStart(index, "reasoning", payload=payload_data, redacted=True, **common)
        elif kind == "tool_use":
            start = BlockStart(index, "tool_call", call_id=call_id, name=name, **common)
        elif kind in SERVER_CALL_TYPES or kind in PROVIDER_MARKS:
            start = BlockStart(index, "server_tool", call_id=call_id, name=name, **common)
        elif isinstance(kind, str) and is_server_result_type(kind):
            result_of = block.get("tool_use_id")
            start = BlockStart(
                index,
                "server_tool",
                call_id=result_of if isinstance(result_of, str) else None,
                name=kind,
                phase="result",
                **common,
            )
        else:
            start = BlockStart(index, "unknown", **common)
        # A block that starts with content (never seen, but allowed) streams it as a delta.
        text = block.get("text") or block.get("thinking")
        if isinstance(text, str) and text and start.kind in ("text", "reasoning"):
            self._counts[index] = 1
            first: StreamEvent = (
                TextDelta(index, text, seq=0, raw=raw)
                if start.kind == "text"
                else ReasoningDelta(index, text, seq=0, raw=raw)
            )
            return [replace(start, raw=b""), first]
        return [replace(start, raw=raw)]

    def _delta(self, payload: dict[str, Any], raw: bytes) -> StreamEvent:
        index = self._block_index(payload)
        delta = payload.get("delta")
        if not isinstance(delta, dict):
            raise UpstreamProtocolError(
                "content_block_delta without a delta", rule="stream_malformed"
            )
        seq = self._counts[index]
        self._counts[index] = seq + 1
        block = self._blocks[index]
        kind = delta.get("type")
        if kind == "text_delta" and isinstance(delta.get("text"), str):
            self._grow(index, block, "text", delta["text"])
            return TextDelta(index, delta["text"], seq=seq, raw=raw)
        if kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            self._json[index].append(delta["partial_json"])
            return ArgsDelta(index, delta["partial_json"], seq=seq, raw=raw)
        if kind == "thinking_delta" and isinstance(delta.get("thinking"), str):
            self._grow(index, block, "thinking", delta["thinking"])
            return ReasoningDelta(index, delta["thinking"], seq=seq, raw=raw)
        if kind == "signature_delta" and isinstance(delta.get("signature"), str):
            self._grow(index, block, "signature", delta["signature"])
            return SignatureDelta(index, delta["signature"], seq=seq, raw=raw)
        if kind == "citations_delta" and "citation" in delta:
            citations = block.get("citations")
            block["citations"] = [
                *(citations if isinstance(citations, list) else []),
                delta["citation"],
            ]
            return CitationDelta(index, delta["citation"], seq=seq, raw=raw)
        return OpaqueDelta(index, delta, seq=seq, raw=raw)

    def _grow(self, index: int, block: dict[str, Any], key: str, piece: str) -> None:
        """Add a streamed piece to the block's final ``key``; what the start gave must be
        text."""
        pieces = self._grown.get((index, key))
        if pieces is None:
            previous = block.get(key, "")
            if not isinstance(previous, str):
                raise UpstreamProtocolError(
                    f"content block '{key}' is a {type(previous).__name__}, not a string",
                    rule="stream_malformed",
                )
            pieces = self._grown[(index, key)] = [previous]
        pieces.append(piece)

    def _stop(self, payload: dict[str, Any], raw: bytes) -> StreamEvent:
        index = self._block_index(payload)
        self._template = None
        if payload.get("index") == self._open:
            self._open = None
        block = self._blocks[index]
        for key in ("text", "thinking", "signature"):
            pieces = self._grown.pop((index, key), None)
            if pieces is not None:
                block[key] = "".join(pieces)
        arguments = None
        kind = block.get("type")
        if isinstance(kind, str) and kind in _ARGUMENT_BLOCKS:
            streamed = "".join(self._json[index])
            if streamed.strip():
                try:
                    block["input"] = orjson.loads(streamed)
                except orjson.JSONDecodeError:
                    # Kept as text: the adapter marks such a call incomplete; never run.
                    block["input"] = streamed
            else:
                # No input streamed: the input is the start's (``{}``), as the SDK reads it.
                arguments = orjson.dumps(block.get("input", {})).decode()
        return BlockStop(index, final=block, arguments=arguments, raw=raw)

    def build_block(
        self, start: BlockStart, stop: BlockStop, block_id: str, order: int
    ) -> AnyBlock | None:
        """The committed block, read from its final native object by the adapter's parser."""
        if stop.final is None:
            return None
        blocks = BlockParser().block(block_id, "assistant", stop.final)
        if len(blocks) != 1:
            return None
        return replace(blocks[0], order=order)

    def _block_index(self, payload: dict[str, Any]) -> int:
        native_index = payload.get("index")
        index = self._index.get(native_index) if isinstance(native_index, int) else None
        if index is None:
            raise UpstreamProtocolError(
                f"event for content block {native_index!r}, which never started",
                rule="stream_protocol",
            )
        return index


class AnthropicStreamEncoder(StreamEncoder):
    def __init__(self, marks: MarkStyle | None = None) -> None:
        super().__init__(marks)

    def render(self, event: StreamEvent) -> bytes:
        if isinstance(event, Native):
            return b""
        return super().render(event)

    def commit_held(self, commit: Commit) -> bytes:
        block = commit.block
        if not isinstance(block, ToolCallBlock):
            return b"".join(self._raw(event) for event in commit.held)
        delta = {
            "type": "content_block_delta",
            "index": commit.start.native_index,
            "delta": {"type": "input_json_delta", "partial_json": block.arguments},
        }
        return (
            self._raw(commit.start)
            + encode_frame("content_block_delta", orjson.dumps(delta))
            + self._raw(commit.stop)
        )

    def error_frame(self, error: TurngateError) -> bytes:
        raw = getattr(error, "raw", None)
        if raw and getattr(error, "native", None) is not None:
            return bytes(raw)
        body = {"type": "error", "error": {"type": "api_error", "message": f"turngate: {error}"}}
        return encode_frame("error", orjson.dumps(body))

    def _raw(self, event: StreamEvent) -> bytes:
        if event.raw is None:
            raise UpstreamProtocolError(f"anthropic {type(event).__name__} without its frame")
        return event.raw
