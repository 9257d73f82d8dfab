"""OpenAI Responses streams: named events -> canonical events, and the relay back.

Every event is ``event: <type>`` + ``data: {"type": <type>, "sequence_number": N, …}``
(older recordings have no ``sequence_number``). Output items (``output_index``) stream as
``output_item.added`` … ``output_item.done``; message items hold content parts
(``content_index``), each one text or refusal block; ``function_call`` items stream their
arguments as ``function_call_arguments.delta``; a reasoning item's ``encrypted_content`` is
taken from ``output_item.done`` (the copy in ``added`` can be incomplete). The stream ends
with ``response.completed`` / ``response.incomplete`` (no ``[DONE]``), or fails with an
``error`` event / ``response.failed``. ``sequence_number`` is each event's ``seq``, so a
resumed stream (``starting_after=N``) replaying events is de-duplicated by the assembler;
keep feeding the same decoder across the resume.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

import orjson

from turngate.adapters.openai_chat.stream import openai_stream_error
from turngate.adapters.openai_responses.items import (
    CALL_ITEMS,
    HOSTED_ANSWERS,
    HOSTED_CALLS,
    ItemParser,
)
from turngate.adapters.openai_responses.response import stop_reason
from turngate.adapters.sse import MarkStyle, SSEFrame, StreamEncoder, encode_frame, frame_json
from turngate.adapters.template import FrameTemplate, Hole, QuickDelta, cut, read_with
from turngate.errors import TurngateError, UpstreamProtocolError
from turngate.graph.assembler import Commit
from turngate.graph.events import (
    ArgsDelta,
    BlockStart,
    BlockStop,
    CitationDelta,
    Native,
    ReasoningDelta,
    ResponseStart,
    StreamDone,
    StreamError,
    StreamEvent,
    TextDelta,
    TurnEnd,
    UsageEvent,
)
from turngate.graph.model import AnyBlock, ToolCallBlock
from turngate.graph.turn import Usage

_STARTS = frozenset({"response.created", "response.queued", "response.in_progress"})
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.done"})
_ARGS_DELTAS = frozenset(
    {"response.function_call_arguments.delta", "response.custom_tool_call_input.delta"}
)
_REASONING_DELTAS = frozenset(
    {"response.reasoning_summary_text.delta", "response.reasoning_text.delta"}
)
_TEXT_DELTAS = frozenset({"response.output_text.delta", "response.refusal.delta"})
_SEQUENCE = Hole(b'"sequence_number":', ("sequence_number",), "count")
_DELTA_HOLES = (_SEQUENCE, Hole(b'"delta":', ("delta",), "text"))
_OBFUSCATION = Hole(b'"obfuscation":', ("obfuscation",), "token")
# Templates a content part may cut: a provider whose frames change from delta to delta
# would otherwise pay for a probe on every one.
_TEMPLATES_PER_PART = 4


class ResponsesStreamDecoder:
    api = "openai_responses"
    eof_terminates = False

    def __init__(self) -> None:
        self._started = False
        # output_index -> canonical index (items other than messages).
        self._items: dict[int, int] = {}
        # (output_index, content_index) -> canonical index (message content parts).
        self._parts: dict[tuple[int, int], int] = {}
        self._part_blocks: set[int] = set()
        self._outputs: set[int] = set()
        self._open_item: int | None = None
        self._counts: dict[int, int] = {}
        # The whole frame of the last numbered text or argument delta read in full, its block
        # and whether it holds arguments (adapters/template.py).
        self._template: FrameTemplate | None = None
        self._template_block = -1
        self._template_args = False
        self._templates_left = _TEMPLATES_PER_PART

    def quick_frame(self, frame: bytes) -> QuickDelta | None:
        """``TemplateStreamDecoder.quick_frame``: more text of the same content part, or
        more arguments of the same call, its ``sequence_number`` the delta's sequence."""
        read = read_with(self._template, frame)
        if read is None:
            return None
        return self._template_block, read[0], read[1][0], self._template_args

    def text_run(self) -> tuple[int, FrameTemplate] | None:
        """``TextRunDecoder.text_run``: the open content part and its delta template, when
        it is text."""
        template = self._template
        if template is None or self._template_args:
            return None
        return self._template_block, template

    def took_text(self, index: int, pieces: list[str]) -> None:
        """``TextRunDecoder.took_text``: nothing to take, the frames carry their numbers."""

    def decode(self, frame: SSEFrame) -> list[StreamEvent]:
        if frame.truncated:
            return []
        payload = frame_json(frame.data)
        kind = _name(payload.get("type", frame.event))
        seq = payload.get("sequence_number")
        seq = seq if isinstance(seq, int) else None
        raw = frame.raw
        if kind in _TEXT_DELTAS:
            index = self._part(payload)
            text = _str(payload, "delta")
            if type(seq) is int and self._templates_left:
                self._templates_left -= 1
                self._cut(frame, payload, index, False)
            return [TextDelta(index, text, seq=self._seq(index, seq), raw=raw)]
        if kind in _REASONING_DELTAS:
            index = self._item(payload)
            text = _str(payload, "delta")
            return [ReasoningDelta(index, text, seq=self._seq(index, seq), raw=raw)]
        if kind in _ARGS_DELTAS:
            index = self._item(payload)
            fragment = _str(payload, "delta")
            if type(seq) is int and self._templates_left:
                self._templates_left -= 1
                self._cut(frame, payload, index, True)
            return [ArgsDelta(index, fragment, seq=self._seq(index, seq), raw=raw)]
        if kind == "response.output_item.added":
            return [self._item_added(payload, seq, raw)]
        if kind == "response.output_item.done":
            return [self._item_done(payload, seq, raw)]
        if kind == "response.content_part.added":
            return [self._part_added(payload, seq, raw)]
        if kind == "response.content_part.done":
            index = self._part(payload)
            part = payload.get("part")
            final = part if isinstance(part, dict) else None
            return [BlockStop(index, final=final, seq=seq, raw=raw)]
        if kind == "response.output_text.annotation.added":
            index = self._part(payload)
            annotation = payload.get("annotation")
            return [CitationDelta(index, annotation, seq=self._seq(index, seq), raw=raw)]
        if kind in _STARTS and not self._started:
            return [self._response_start(payload, seq, raw)]
        if kind in _TERMINAL:
            return self._terminal(payload, seq, raw)
        if kind == "response.failed":
            response = payload.get("response")
            error = response.get("error") if isinstance(response, dict) else None
            native = error if isinstance(error, dict) else {"message": "response failed"}
            return [StreamError(_message(native), native=native, seq=seq, raw=raw)]
        if kind == "error":
            nested = payload.get("error")
            native = nested if isinstance(nested, dict) else payload
            return [StreamError(_message(native), native=native, seq=seq, raw=raw)]
        # Everything else (in_progress, *.done of parts, hosted-tool progress, event types
        # added later) carries nothing to assemble; it belongs to its item if it names one.
        return [Native(str(kind), index=self._owner(payload), seq=seq, raw=raw)]

    def _cut(self, frame: SSEFrame, payload: dict[str, Any], index: int, args: bool) -> None:
        """The template of a numbered text (or argument) delta's whole frame (None when it
        cannot be cut). Reading one changes no decoder state: its block and sequence are in
        the frame."""
        obfuscated = type(payload.get("obfuscation")) is str
        holes = (*_DELTA_HOLES, _OBFUSCATION) if obfuscated else _DELTA_HOLES
        template = cut(frame.data, payload, holes)
        self._template = None if template is None else template.framed(frame.raw, frame.data)
        self._template_block = index
        self._template_args = args

    def _response_start(self, payload: dict[str, Any], seq: int | None, raw: bytes) -> StreamEvent:
        self._started = True
        response = payload.get("response")
        response = response if isinstance(response, dict) else {}
        handle, model = response.get("id"), response.get("model")
        return ResponseStart(
            handle=handle if isinstance(handle, str) else None,
            model=model if isinstance(model, str) else None,
            native=response,
            seq=seq,
            raw=raw,
        )

    def _item_added(self, payload: dict[str, Any], seq: int | None, raw: bytes) -> StreamEvent:
        output_index, item = payload.get("output_index"), payload.get("item")
        if not isinstance(output_index, int) or not isinstance(item, dict):
            raise UpstreamProtocolError("malformed output_item.added", rule="stream_malformed")
        if output_index not in self._outputs:
            if output_index != len(self._outputs):
                raise UpstreamProtocolError(
                    f"output item {output_index} started out of order", rule="stream_protocol"
                )
            if self._open_item is not None:
                # Items stream one after another; the SDK places them by output_index.
                raise UpstreamProtocolError(
                    f"output item {output_index} started before item {self._open_item} was done",
                    rule="stream_protocol",
                )
            self._outputs.add(output_index)
            self._open_item = output_index
            self._templates_left = _TEMPLATES_PER_PART
        kind = _name(item.get("type"))
        if kind == "message":
            return Native("response.output_item.added", seq=seq, raw=raw)
        index = self._items.get(output_index)
        if index is None:
            # Not setdefault: a replayed event (a resumed stream) must not use up an index.
            index = self._items[output_index] = self._new()
        native_type = str(kind)
        common: dict[str, Any] = {
            "native_type": native_type,
            "native_index": output_index,
            "seq": seq,
            "raw": raw,
        }
        call_id = item.get("call_id")
        call_id = call_id if isinstance(call_id, str) else None
        if kind in CALL_ITEMS:
            name = item.get("name")
            return BlockStart(
                index,
                "tool_call",
                call_id=call_id,
                name=name if isinstance(name, str) else None,
                tool_type=CALL_ITEMS[native_type],
                **common,
            )
        if kind == "reasoning":
            return BlockStart(index, "reasoning", **common)
        if kind in HOSTED_CALLS or kind in HOSTED_ANSWERS:
            phase: Literal["call", "result"] = "result" if kind in HOSTED_ANSWERS else "call"
            return BlockStart(
                index, "server_tool", call_id=call_id, name=native_type, phase=phase, **common
            )
        return BlockStart(index, "unknown", **common)

    def _item_done(self, payload: dict[str, Any], seq: int | None, raw: bytes) -> StreamEvent:
        output_index, item = payload.get("output_index"), payload.get("item")
        if not isinstance(output_index, int) or not isinstance(item, dict):
            raise UpstreamProtocolError("malformed output_item.done", rule="stream_malformed")
        if output_index == self._open_item:
            self._open_item = None
        kind = _name(item.get("type"))
        if kind == "message":
            return Native("response.output_item.done", seq=seq, raw=raw)
        index = self._item(payload)
        arguments = None
        if kind in CALL_ITEMS:
            data = item.get("arguments" if CALL_ITEMS[str(kind)] == "function" else "input")
            arguments = data if isinstance(data, str) else None
        payload_data = item.get("encrypted_content")
        return BlockStop(
            index,
            final=item,
            arguments=arguments,
            payload=payload_data if isinstance(payload_data, str) else None,
            seq=seq,
            raw=raw,
        )

    def _part_added(self, payload: dict[str, Any], seq: int | None, raw: bytes) -> StreamEvent:
        output_index, content_index = payload.get("output_index"), payload.get("content_index")
        part = payload.get("part")
        if not isinstance(output_index, int) or not isinstance(content_index, int):
            raise UpstreamProtocolError("malformed content_part.added", rule="stream_malformed")
        if output_index not in self._outputs:
            raise UpstreamProtocolError(
                f"content part of output item {output_index}, which never started",
                rule="stream_protocol",
            )
        index = self._parts.get((output_index, content_index))
        if index is None:
            index = self._parts[(output_index, content_index)] = self._new()
        self._part_blocks.add(index)
        self._templates_left = _TEMPLATES_PER_PART
        kind = part.get("type") if isinstance(part, dict) else None
        common: dict[str, Any] = {"native_type": str(kind), "seq": seq, "raw": raw}
        if kind == "output_text":
            return BlockStart(index, "text", **common)
        if kind == "refusal":
            return BlockStart(index, "refusal", **common)
        return BlockStart(index, "unknown", **common)

    def _terminal(self, payload: dict[str, Any], seq: int | None, raw: bytes) -> list[StreamEvent]:
        response = payload.get("response")
        if not isinstance(response, dict):
            raise UpstreamProtocolError(
                "terminal event without a response", rule="stream_malformed"
            )
        if response.get("status") == "failed":
            error = response.get("error")
            native = error if isinstance(error, dict) else {"message": "response failed"}
            return [StreamError(_message(native), native=native, seq=seq, raw=raw)]
        reason = stop_reason(response)
        if reason is None:
            raise UpstreamProtocolError(
                f"terminal event with status {response.get('status')!r}", rule="stream_malformed"
            )
        events: list[StreamEvent] = []
        usage = response.get("usage")
        if isinstance(usage, dict):
            events.append(UsageEvent(usage_of(usage), native=usage, raw=b""))
        details = response.get("incomplete_details")
        extras = {"incomplete_details": details} if isinstance(details, dict) else None
        events.append(TurnEnd(reason, native=extras, raw=b""))
        events.append(StreamDone(seq=seq, raw=raw))
        return events

    def _new(self) -> int:
        index = len(self._counts)
        self._counts[index] = 0
        return index

    def _seq(self, index: int, native: int | None) -> int:
        """The native sequence number; a per-block count in recordings that have none."""
        if native is not None:
            return native
        count = self._counts.get(index, 0)
        self._counts[index] = count + 1
        return count

    def _item(self, payload: dict[str, Any]) -> int:
        output_index = payload.get("output_index")
        index = self._items.get(output_index) if isinstance(output_index, int) else None
        if index is None:
            raise UpstreamProtocolError(
                f"event for output item {output_index!r}, which never started",
                rule="stream_protocol",
            )
        return index

    def _part(self, payload: dict[str, Any]) -> int:
        key = (payload.get("output_index"), payload.get("content_index"))
        index = None
        if isinstance(key[0], int) and isinstance(key[1], int):
            index = self._parts.get((key[0], key[1]))
        if index is None:
            raise UpstreamProtocolError(
                f"event for content part {key!r}, which never started", rule="stream_protocol"
            )
        return index

    def _owner(self, payload: dict[str, Any]) -> int | None:
        output_index = payload.get("output_index")
        if not isinstance(output_index, int):
            return None
        content_index = payload.get("content_index")
        if isinstance(content_index, int):
            part = self._parts.get((output_index, content_index))
            if part is not None:
                return part
        return self._items.get(output_index)

    def build_block(
        self, start: BlockStart, stop: BlockStop, block_id: str, order: int
    ) -> AnyBlock | None:
        """The committed block, read from the final part or item by the adapter's parser."""
        if stop.final is None:
            return None
        parser = ItemParser("output")
        if start.index in self._part_blocks:
            block = parser.part(block_id, "assistant", stop.final)
        else:
            blocks = parser.item(start.native_index or 0, stop.final).blocks
            if len(blocks) != 1:
                return None
            block = blocks[0]
        return replace(block, id=block_id, order=order)


def usage_of(usage: dict[str, Any]) -> Usage:
    def number(key: str) -> int | None:
        value = usage.get(key)
        return value if isinstance(value, int) else None

    return Usage(
        input_tokens=number("input_tokens"),
        output_tokens=number("output_tokens"),
        total_tokens=number("total_tokens"),
    )


def _name(value: Any) -> str | None:
    """A type name as sent; any other JSON value names no type (and is not hashable)."""
    return value if isinstance(value, str) else None


def _str(payload: dict[str, Any], key: str) -> str:
    value = payload.get(key)
    if not isinstance(value, str):
        raise UpstreamProtocolError(f"{payload.get('type')} without a '{key}' string")
    return value


def _message(native: dict[str, Any]) -> str:
    message = native.get("message")
    return message if isinstance(message, str) and message else "upstream stream error"


class ResponsesStreamEncoder(StreamEncoder):
    def __init__(self, marks: MarkStyle | None = None) -> None:
        super().__init__(marks)

    def render(self, event: StreamEvent) -> bytes:
        if isinstance(event, Native):
            return b""
        return super().render(event)

    def commit_held(self, commit: Commit) -> bytes:
        block = commit.block
        if not isinstance(block, ToolCallBlock):
            return b"".join(_raw(event) for event in commit.held)
        item = commit.stop.final or {}
        kind = (
            "response.custom_tool_call_input.delta"
            if block.tool_type == "custom"
            else "response.function_call_arguments.delta"
        )
        delta: dict[str, Any] = {"type": kind}
        first = next((e for e in commit.held if isinstance(e, ArgsDelta)), None)
        if first is not None and first.seq is not None and commit.start.seq is not None:
            delta["sequence_number"] = first.seq
        delta.update(
            {
                "item_id": item.get("id"),
                "output_index": commit.start.native_index,
                "delta": block.arguments,
            }
        )
        closing = [e for e in commit.held if isinstance(e, Native) and e.name.endswith(".done")]
        return (
            _raw(commit.start)
            + encode_frame(kind, orjson.dumps(delta))
            + b"".join(_raw(e) for e in closing)
            + _raw(commit.stop)
        )

    def error_frame(self, error: TurngateError) -> bytes:
        envelope = openai_stream_error(error)
        body = {"type": "error", **envelope["error"], **envelope}
        return encode_frame("error", orjson.dumps(body))


def _raw(event: StreamEvent) -> bytes:
    if event.raw is None:
        raise UpstreamProtocolError(f"responses {type(event).__name__} without its frame")
    return event.raw
