"""Gemini ``streamGenerateContent?alt=sse``: chunks -> canonical events, and the relay back.

Every frame is ``data: <GenerateContentResponse>`` (CRLF framing, no event names, no
terminator): the turn ends with the chunk whose candidate has ``finishReason`` and then the
connection close. Parts are incremental, one block each (a ``thoughtSignature`` is bound to
the part it sits on, so parts are never merged). A ``functionCall`` part arrives whole; on
Vertex with ``streamFunctionCallArguments`` a call streams as ``{name, willContinue}``, then
``partialArgs`` (JSON paths), then an empty ``functionCall`` that ends it. ``{"error": …}``
is an in-band error. ``build_block`` reads each final part with the adapter's own parser.

google-genai parses every line that does not start with ``data: `` as JSON, so this encoder
writes no commit marks unless asked.
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass, replace
from typing import Any, Literal

import orjson

from turngate.adapters.gemini.parts import OrderCounter, parse_part, snake_of
from turngate.adapters.sse import (
    MarkStyle,
    SSEFrame,
    StreamEncoder,
    encode_frame,
    frame_json,
    own_frame,
)
from turngate.adapters.template import (
    FrameTemplate,
    HeldArgs,
    Hole,
    TextPart,
    cut,
    frame_around,
    replaced_at,
    value_at,
    value_start,
)
from turngate.errors import TurngateError, UpstreamProtocolError
from turngate.graph.assembler import MAX_NESTING, Commit, Output, Preview
from turngate.graph.events import (
    BlockKind,
    BlockStart,
    BlockStop,
    Native,
    ReasoningDelta,
    ResponseStart,
    StreamError,
    StreamEvent,
    TextDelta,
    TurnEnd,
    UsageEvent,
)
from turngate.graph.model import AnyBlock
from turngate.graph.turn import Usage

_CRLF = b"\r\n"
_ENVELOPE = ("responseId", "modelVersion", "createTime")
_SERVER_PARTS: dict[str, Literal["call", "result"]] = {
    "executableCode": "call",
    "codeExecutionResult": "result",
    "toolCall": "call",
    "toolResponse": "result",
}
_TEXT_HOLES: tuple[Hole, ...] = (
    Hole(b'"text":', ("candidates", 0, "content", "parts", 0, "text"), "text"),
)
# Templates a stream may cut: a provider whose frames change from chunk to chunk (a usage
# count that grows with each) would otherwise pay for a probe on every one.
_TEMPLATES_PER_STREAM = 4
# Array entries a partialArgs path may skip (left null) past the end of what arrived.
_MAX_SKIPPED = 1024
# Where a last chunk's usage rides on its finish (``_with_finish``) to the encoder.
_USAGE = "$usageMetadata"
# At most 9 digits in an index: int() refuses more than 4300, and no array is that long.
_PATH_STEP = re.compile(r"\.([A-Za-z_][\w-]*)|\[(\d{1,9})\]|\['([^']*)'\]|\[\"([^\"]*)\"\]")


class GeminiStreamDecoder:
    api = "gemini"
    eof_terminates = True

    def __init__(self) -> None:
        self._started = False
        self._next = 0
        # The call streaming its arguments (Vertex ``partialArgs``), until its empty end part.
        self._streaming: dict[str, Any] | None = None
        self._call_names: dict[str, int] = {}
        # The whole frame of a chunk that was one plain text part read in full, its usage
        # (as sent, and counted) and the usage fields that are holes, in the frame's order
        # (adapters/template.py): some models count their tokens anew in every chunk, others
        # repeat the prompt's count, so the same frame with the counts as they were
        # (``_same_counts``) is tried first.
        self._template: FrameTemplate | None = None
        self._same_counts: FrameTemplate | None = None
        self._template_usage: tuple[dict[str, Any] | None, Usage | None] = (None, None)
        self._counted: tuple[str, ...] = ()
        self._templates_left = _TEMPLATES_PER_STREAM
        # The frame of a chunk that was only more arguments of the call streaming them, with
        # its ``partialArgs`` array as the hole (``quick_args``).
        self._args: ArgsTemplate | None = None
        self._args_templates_left = _TEMPLATES_PER_STREAM

    def quick_block(self, frame: bytes) -> TextPart | None:
        """``BlockStreamDecoder.quick_block``: a whole frame that fits the template of a
        plain text chunk read before, as its block's index (taken), its text and the
        chunk's usage, as decoding it gives them (``events`` of these are the events it
        gives). None: nothing taken."""
        template = self._template
        if template is None or self._streaming is not None:
            return None
        native, usage = self._template_usage
        same = self._same_counts
        read = None if same is None else same.read(frame)
        if read is None:
            read = template.read(frame)
            if read is None:
                return None
            counts = read[1]
            if native is not None and counts != tuple(native[key] for key in self._counted):
                native = {**native, **dict(zip(self._counted, counts, strict=True))}
                usage = usage_of(native)
        return self._new(), read[0], native, usage

    def quick_args(self, frame: bytes) -> HeldArgs | None:
        """``BlockStreamDecoder.quick_args``: a whole frame that is the last chunk of more
        arguments read in full with another ``partialArgs`` array, its pieces applied to
        the call streaming them, and the usage event decoding it gives (its only event).
        None: nothing taken. Raises as decoding does for a piece that does
        not fit the arguments (the stream then fails)."""
        template, streaming = self._args, self._streaming
        if template is None or streaming is None:
            return None
        pieces = template.read(frame)
        if pieces is None:
            return None
        for arg in pieces:
            _apply_partial(streaming, arg)
        return (template.usage,)

    def text_start(self, index: int) -> BlockStart:
        """The start of the text block at ``index``, as ``_part`` gives it for a text part
        of a chunk that is nothing else."""
        return BlockStart(index, "text", native_type="text", raw=b"")

    def events(self, part: TextPart, frame: bytes) -> list[StreamEvent]:
        """The events of a chunk ``quick_block`` took, the chunk's bytes on the last."""
        index, text, native, usage = part
        start = self.text_start(index)
        delta = TextDelta(index, text, seq=0, raw=b"")
        if usage is None:
            return [start, delta, BlockStop(index, final={"text": text}, raw=frame)]
        counted = UsageEvent(usage, native=native, raw=frame)
        return [start, delta, BlockStop(index, final={"text": text}, raw=b""), counted]

    def decode(self, frame: SSEFrame) -> list[StreamEvent]:
        if frame.truncated:
            return []
        chunk = frame_json(frame.data)
        continuing = self._streaming is not None
        events = self._decode(frame, chunk)
        if self._templates_left and _plain_text(events):
            self._templates_left -= 1
            self._cut(frame, chunk, events)
        elif (
            continuing
            and self._streaming is not None
            and self._args_templates_left
            and all(type(e) is UsageEvent for e in events)
        ):
            # Only more arguments (and the usage): the next such chunk may differ only there.
            self._args_templates_left -= 1
            usage = next((e for e in events if isinstance(e, UsageEvent)), None)
            self._args = cut_args(frame, chunk, usage)
        return events

    def _cut(self, frame: SSEFrame, chunk: dict[str, Any], events: list[StreamEvent]) -> None:
        """The template of a chunk whose events were those of one plain text part (and its
        usage): its whole frame with the text and the usage's counts as holes."""
        self._template = None
        stop = events[2]
        assert isinstance(stop, BlockStop)
        if not (isinstance(stop.final, dict) and list(stop.final) == ["text"]):
            return  # a thought, a signature: parts that are not plain text
        usage = events[3] if len(events) == 4 else None
        native = usage.native if isinstance(usage, UsageEvent) else None
        holes = _TEXT_HOLES
        key = "usageMetadata" if "usageMetadata" in chunk else "usage_metadata"
        if native is not None:
            counted = tuple(k for k, v in native.items() if type(v) is int and v >= 0)
            holes += tuple(Hole(orjson.dumps(k) + b":", (key, k), "count") for k in counted)
        template = cut(frame.data, chunk, holes)
        if template is None:
            return
        self._template = template.framed(frame.raw, frame.data)
        same = cut(frame.data, chunk, _TEXT_HOLES) if len(holes) > 1 else None
        self._same_counts = None if same is None else same.framed(frame.raw, frame.data)
        self._counted = tuple(str(h.path[-1]) for h in template.holes if h.kind == "count")
        self._template_usage = (native, usage.usage if isinstance(usage, UsageEvent) else None)

    def _decode(self, frame: SSEFrame, chunk: dict[str, Any]) -> list[StreamEvent]:
        error = chunk.get("error")
        if error is not None:
            native = error if isinstance(error, dict) else {"message": str(error)}
            message = native.get("message")
            text = message if isinstance(message, str) else "upstream stream error"
            return [StreamError(text, native=chunk, raw=frame.raw)]
        candidates = _get(chunk, "candidates")
        candidates = candidates if isinstance(candidates, list) else []
        if len(candidates) > 1:
            raise UpstreamProtocolError(
                "a Gemini stream with several candidates cannot be committed as one turn",
                rule="unsupported_in_target",
            )
        candidate = candidates[0] if candidates and isinstance(candidates[0], dict) else None
        content = _get(candidate, "content") if candidate else None
        parts = _get(content, "parts") if isinstance(content, dict) else None
        parts = parts if isinstance(parts, list) else []
        # A chunk of whole parts (no call streaming its arguments) goes out as it came, once
        # its held parts are committed: split into frames of their own, its finish reason
        # and usage would reach the client in chunks without content, which google-genai's
        # chat takes for an invalid turn and leaves out of the history it sends next.
        whole = self._streaming is None and all(_whole(p) for p in parts)
        raw: bytes | None = b"" if whole else None
        events: list[StreamEvent] = []
        if not self._started:
            self._started = True
            handle, model = _get(chunk, "responseId"), _get(chunk, "modelVersion")
            envelope = {k: chunk[k] for k in _ENVELOPE if k in chunk}
            events.append(
                ResponseStart(
                    handle=handle if isinstance(handle, str) else None,
                    model=model if isinstance(model, str) else None,
                    native=envelope,
                    raw=raw,
                )
            )
        for part in parts:
            self._part(part, events, raw)
        if candidate is not None:
            finish = _get(candidate, "finishReason")
            if isinstance(finish, str):
                extras = {k: v for k, v in candidate.items() if k not in ("content", "index")}
                if not whole:
                    _with_finish(events, extras, _get(chunk, "usageMetadata"))
                events.append(TurnEnd(finish, native=extras, raw=raw))
        feedback = _get(chunk, "promptFeedback")
        if not candidates and isinstance(feedback, dict):
            reason = _get(feedback, "blockReason")
            if isinstance(reason, str):
                events.append(TurnEnd(reason, native={"promptFeedback": feedback}, raw=raw))
        usage = _get(chunk, "usageMetadata")
        if isinstance(usage, dict):
            events.append(UsageEvent(usage_of(usage), native=usage, raw=raw))
        # A chunk of nothing to assemble goes out as it came, unless it holds a part that
        # must wait (a call streaming its arguments: never relayed in pieces).
        return own_frame(events, frame.raw, whole)

    def _part(self, part: Any, events: list[StreamEvent], raw: bytes | None) -> None:
        if not isinstance(part, dict):
            raise UpstreamProtocolError("gemini part is not an object", rule="stream_malformed")
        call = _get(part, "functionCall")
        if isinstance(call, dict):
            self._call(part, call, events, raw)
            return
        if self._streaming is not None:
            raise UpstreamProtocolError(
                "gemini part arrived while a function call was still streaming its arguments",
                rule="stream_protocol",
            )
        index = self._new()
        text = _text(part)
        if text is not None:
            thought = _get(part, "thought") is True
            kind: BlockKind = "reasoning" if thought else "text"
            events.append(BlockStart(index, kind, native_type="text", raw=raw))
            delta_type = ReasoningDelta if thought else TextDelta
            events.append(delta_type(index, text, seq=0, raw=raw))
            events.append(BlockStop(index, final=part, raw=raw))
            return
        field = next((k for k in _SERVER_PARTS if _get(part, k) is not None), None)
        if field is not None:
            start = BlockStart(
                index, "server_tool", name=field, native_type=field, phase=_SERVER_PARTS[field]
            )
        else:
            start = BlockStart(index, "unknown", native_type=",".join(sorted(part)) or "empty")
        events.append(replace(start, raw=raw))
        events.append(BlockStop(index, final=part, raw=raw))

    def _call(
        self,
        part: dict[str, Any],
        call: dict[str, Any],
        events: list[StreamEvent],
        raw: bytes | None,
    ) -> None:
        name, streaming = call.get("name"), self._streaming
        partial = _get(call, "partialArgs")
        if streaming is not None:
            if isinstance(name, str):
                raise UpstreamProtocolError(
                    f"gemini call '{name}' started before '{streaming['name']}' finished",
                    rule="stream_protocol",
                )
            if isinstance(partial, list):
                for arg in partial:
                    _apply_partial(streaming, arg)
            if _get(call, "willContinue") is True:
                return
            self._streaming = None
            final_call: dict[str, Any] = {"name": streaming["name"], "args": streaming["args"]}
            if streaming["id"] is not None:
                final_call["id"] = streaming["id"]
            final = {**streaming["part"], "functionCall": final_call}
            events.append(BlockStop(streaming["index"], final=final, raw=raw))
            return
        index = self._new()
        call_id = call.get("id")
        start = BlockStart(
            index,
            "tool_call",
            call_id=call_id if isinstance(call_id, str) and call_id else None,
            name=name if isinstance(name, str) else None,
            native_type="functionCall",
            raw=raw,
        )
        events.append(start)
        if _get(call, "willContinue") is True and "args" not in call:
            extras = {k: v for k, v in part.items() if k != "functionCall"}
            self._streaming = {
                "index": index,
                "name": name,
                "id": start.call_id,
                "args": {},
                "part": extras,
                # The path of the string the last entry left open; and, when that entry
                # wrote its ``jsonPath`` in camelCase, that text and the container the
                # string sits in (``_apply_partial``'s shortcut).
                "open": None,
                "open_at": None,
            }
            if isinstance(partial, list):
                for arg in partial:
                    _apply_partial(self._streaming, arg)
            return
        events.append(BlockStop(index, final=part, raw=raw))

    def _new(self) -> int:
        self._next += 1
        return self._next - 1

    def build_block(
        self, start: BlockStart, stop: BlockStop, block_id: str, order: int
    ) -> AnyBlock | None:
        """The committed block, read from its final part by the adapter's own parser."""
        if stop.final is None:
            return None
        block = parse_part(block_id, "assistant", stop.final, OrderCounter(order), self._call_names)
        return block if block.order == order else replace(block, order=order)


_PARTIAL_ARGS_PATH = ("candidates", 0, "content", "parts", 0, "functionCall", "partialArgs")
_PARTIAL_ARGS_KEY = b'"partialArgs":'


@dataclass(frozen=True, slots=True)
class ArgsTemplate:
    """A whole frame of more streamed arguments, its ``partialArgs`` array the hole: the
    bytes before the array (the SSE field, the envelope, the key) and after it (the rest of
    the chunk, the blank line)."""

    before: bytes
    after: bytes
    # The usage event of the chunk (its usage is in the fixed bytes): every chunk that fits
    # gives it.
    usage: UsageEvent | None

    def read(self, frame: bytes) -> list[Any] | None:
        """The ``partialArgs`` array of ``frame`` when it is this template with another
        array in the hole; None for anything else. Exact as ``FrameTemplate.read`` is: a
        JSON value replaced by another leaves every other token as it was, and a hole
        without a line break keeps the frame one frame."""
        before, after = self.before, self.after
        if not (frame.startswith(before) and frame.endswith(after)):
            return None
        hole = frame[len(before) : len(frame) - len(after)]
        if b"\n" in hole or b"\r" in hole:
            return None
        try:
            value = orjson.loads(hole)
        except orjson.JSONDecodeError:
            return None
        return value if type(value) is list else None


def cut_args(
    frame: SSEFrame, chunk: dict[str, Any], usage: UsageEvent | None
) -> ArgsTemplate | None:
    """The template of a chunk of one part, a streaming call's ``partialArgs``, over its
    whole frame; None when the frame is not one ``data`` line ending in a blank line
    (``frame_around``), holds the key more than once, or a probe with an empty array does
    not give the chunk back with that array."""
    data, raw = frame.data, frame.raw
    parts = value_at(chunk, _PARTIAL_ARGS_PATH[:4])
    if not (isinstance(parts, list) and len(parts) == 1) or data.count(_PARTIAL_ARGS_KEY) != 1:
        return None
    around = frame_around(raw, data)
    if around is None:
        return None
    head, tail = around
    start = value_start(data, _PARTIAL_ARGS_KEY)
    end = _array_end(data, start)
    if end < 0:
        return None
    template = ArgsTemplate(head + data[:start], data[end:] + tail, usage)
    try:
        probed = orjson.loads(data[:start] + b"[]" + data[end:])
    except orjson.JSONDecodeError:
        return None
    return template if probed == replaced_at(chunk, _PARTIAL_ARGS_PATH, []) else None


def _array_end(data: bytes, start: int) -> int:
    """The offset just past the JSON array that opens at ``start``; -1 when none does."""
    if data[start : start + 1] != b"[":
        return -1
    depth, in_string, escaped = 0, False, False
    for at in range(start, len(data)):
        byte = data[at]
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
            if depth == 0:
                return at + 1
    return -1


def usage_of(usage: dict[str, Any]) -> Usage:
    """Output counts thinking tokens too, as the adapter's response parser does."""

    def number(camel: str) -> int | None:
        value = _get(usage, camel)
        return value if isinstance(value, int) else None

    candidates, thoughts = number("candidatesTokenCount"), number("thoughtsTokenCount")
    output = (
        None if candidates is None and thoughts is None else (candidates or 0) + (thoughts or 0)
    )
    return Usage(
        input_tokens=number("promptTokenCount"),
        output_tokens=output,
        total_tokens=number("totalTokenCount"),
    )


def _get(obj: Any, camel: str) -> Any:
    """A field read in lowerCamelCase or snake_case (proto3 JSON allows both)."""
    if not isinstance(obj, dict):
        return None
    if camel in obj:
        return obj[camel]
    # ``snake_of`` is cached: most fields a chunk is asked for are absent, and working out
    # each spelling anew was about half a text chunk's cost.
    return obj.get(snake_of(camel))


def _plain_text(events: list[StreamEvent]) -> bool:
    """Whether ``events`` are those of a chunk that is one text part (then its usage)."""
    first = events[0] if events else None
    kinds = tuple(type(event) for event in events)
    return kinds in _PLAIN_TEXT and isinstance(first, BlockStart) and first.kind == "text"


_PLAIN_TEXT = (
    (BlockStart, TextDelta, BlockStop),
    (BlockStart, TextDelta, BlockStop, UsageEvent),
)


def _with_finish(events: list[StreamEvent], extras: dict[str, Any], usage: Any) -> None:
    """A last chunk written in frames of turngate's own (a call that streamed its arguments
    ends in it): its parts, its finish reason and its usage go out as one chunk, the
    finish's, as the provider sent them. A finish reason in a chunk of its own would have
    no content, and google-genai's chat drops a turn with such a chunk from its history."""
    finals: list[Any] = []
    for position, event in enumerate(events):
        if isinstance(event, BlockStop) and event.final is not None:
            finals.append(event.final)
            events[position] = replace(event, raw=b"")
    if finals:
        extras["content"] = {"parts": finals, "role": "model"}
    if isinstance(usage, dict):
        extras[_USAGE] = usage


def _whole(part: Any) -> bool:
    """A part complete in its chunk: anything but a piece of a call that streams its
    arguments (Vertex ``streamFunctionCallArguments``)."""
    if not isinstance(part, dict):
        return False
    call = _get(part, "functionCall")
    if not isinstance(call, dict):
        return True
    return _get(call, "willContinue") is not True and _get(call, "partialArgs") is None


def _text(part: Any) -> str | None:
    """The part's text when text is its only data field."""
    if not isinstance(part, dict):
        return None
    text = part.get("text")
    if not isinstance(text, str):
        return None
    others = ("functionCall", "functionResponse", "inlineData", "fileData", *_SERVER_PARTS)
    return None if any(_get(part, k) is not None for k in others) else text


def _apply_partial(streaming: dict[str, Any], arg: Any) -> None:
    """Set one ``partialArgs`` value at its JSON path; continued strings are appended."""
    at = streaming["open_at"]
    if at is not None and type(arg) is dict and arg.get("jsonPath") == at[0]:
        # More of the string the last entry left open, at the same path as written: nothing
        # was assigned since (every other entry clears ``open_at``), so the string is still
        # where that entry put it. Nearly every chunk of a streamed argument is one of these.
        value = arg.get("stringValue")
        if type(value) is str:
            node, last = at[1], at[2]
            node[last] += value
            going = arg["willContinue"] if "willContinue" in arg else arg.get("will_continue")
            if going is not True:
                streaming["open"] = streaming["open_at"] = None
            return
    streaming["open_at"] = None
    if not isinstance(arg, dict) or not isinstance(_get(arg, "jsonPath"), str):
        raise UpstreamProtocolError("gemini partialArgs entry without a jsonPath")
    path = _json_path(_get(arg, "jsonPath"))
    if "stringValue" in arg or "string_value" in arg:
        value = _get(arg, "stringValue")
        if not isinstance(value, str):
            raise UpstreamProtocolError("gemini partialArgs stringValue is not a string")
        if streaming["open"] == path:
            value = _lookup(streaming["args"], path) + value
        going = _get(arg, "willContinue") is True
        streaming["open"] = path if going else None
        node = _assign(streaming["args"], path, value)
        if going and "jsonPath" in arg:
            streaming["open_at"] = (arg["jsonPath"], node, path[-1])
        return
    if "numberValue" in arg or "number_value" in arg:
        value = _get(arg, "numberValue")
        if isinstance(value, float) and value.is_integer():
            value = int(value)
    elif "boolValue" in arg or "bool_value" in arg:
        value = _get(arg, "boolValue")
    elif "nullValue" in arg or "null_value" in arg:
        value = None
    else:
        raise UpstreamProtocolError(f"gemini partialArgs entry of an unknown kind: {sorted(arg)}")
    _assign(streaming["args"], path, value)


@functools.lru_cache(maxsize=1024)
def _json_path(text: str) -> tuple[str | int, ...]:
    # Remembered: a string argument streams in many pieces, each naming the same path.
    if not text.startswith("$"):
        raise UpstreamProtocolError(f"unsupported gemini partialArgs jsonPath {text!r}")
    steps: list[str | int] = []
    at = 1
    while at < len(text):
        match = _PATH_STEP.match(text, at)
        if match is None:
            raise UpstreamProtocolError(f"unsupported gemini partialArgs jsonPath {text!r}")
        key, number, quoted, double = match.groups()
        steps.append(int(number) if number is not None else (key or quoted or double or ""))
        at = match.end()
    if not steps:
        raise UpstreamProtocolError("gemini partialArgs jsonPath names no argument")
    if len(steps) > MAX_NESTING:
        raise UpstreamProtocolError(f"gemini partialArgs jsonPath deeper than {MAX_NESTING}")
    return tuple(steps)


def _lookup(root: Any, path: tuple[str | int, ...]) -> str:
    """The string a continued ``stringValue`` extends (a later entry may have replaced it)."""
    for step in path:
        fits = (isinstance(root, dict) and isinstance(step, str) and step in root) or (
            isinstance(root, list) and isinstance(step, int) and step < len(root)
        )
        root = root[step] if fits else None
    if not isinstance(root, str):
        raise UpstreamProtocolError("gemini partialArgs continues a string that is not there")
    return root


def _assign(root: dict[str, Any], path: tuple[str | int, ...], value: Any) -> Any:
    """Put ``value`` at ``path``; the container it went into."""
    node: Any = root
    for step, following in itertools.pairwise(path):
        child_default: Any = [] if isinstance(following, int) else {}
        node = _child(node, step, child_default)
    last = path[-1]
    if isinstance(node, list) and isinstance(last, int):
        _pad(node, last)
        node[last] = value
    elif isinstance(node, dict) and isinstance(last, str):
        node[last] = value
    else:
        raise UpstreamProtocolError("gemini partialArgs jsonPath does not fit the arguments")
    return node


def _child(node: Any, step: str | int, default: Any) -> Any:
    if isinstance(node, dict) and isinstance(step, str):
        return node.setdefault(step, default)
    if isinstance(node, list) and isinstance(step, int):
        _pad(node, step)
        if node[step] is None:
            node[step] = default
        return node[step]
    raise UpstreamProtocolError("gemini partialArgs jsonPath does not fit the arguments")


def _pad(node: list[Any], index: int) -> None:
    """Make room for ``index``; an index far past the end would fill memory with nulls."""
    if index - len(node) > _MAX_SKIPPED:
        raise UpstreamProtocolError(f"gemini partialArgs index {index} skips past the array end")
    node.extend([None] * (index + 1 - len(node)))


class GeminiStreamEncoder(StreamEncoder):
    line_end = _CRLF
    default_marks: MarkStyle = "none"

    def __init__(self, marks: MarkStyle | None = None) -> None:
        super().__init__(marks)
        self._envelope: dict[str, Any] = {}
        self._usage: dict[str, Any] | None = None
        # The latest usage has not been written yet (it rides with the next frame).
        self._unsent = False

    def encode(self, output: Output) -> bytes:
        if type(output) is Preview and type(output.event) is UsageEvent and output.event.raw:
            # The usage went out in the provider's own chunk.
            self._usage, self._unsent = output.event.native, False
        return super().encode(output)

    def started(self, event: ResponseStart) -> None:
        self._envelope = dict(event.native or {})

    def render(self, event: StreamEvent) -> bytes:
        match event:
            case ResponseStart() | BlockStart() | TextDelta() | ReasoningDelta() | Native():
                # A part is written whole when it stops: its modifiers stay on it.
                return b""
            case BlockStop():
                return self._parts([event.final]) if event.final is not None else b""
            case TurnEnd():
                candidate = {**(event.native or {}), "finishReason": event.stop_reason}
                candidate.pop("promptFeedback", None)
                usage = candidate.pop(_USAGE, None)
                if usage is not None and usage != self._usage:
                    self._usage, self._unsent = usage, True
                return self._data({"candidates": [{**candidate, "index": 0}], **self._envelope})
            case UsageEvent():
                # Every chunk repeats the usage so far. Never a chunk of its own (one without
                # a candidate's content is an invalid turn to google-genai's chat): it rides
                # with the next frame turngate writes.
                if event.native != self._usage:
                    self._usage, self._unsent = event.native, True
                return b""
            case _:
                return super().render(event)

    def writes_nothing(self, event: UsageEvent) -> bool:
        """A usage ``render`` would not write: the one written last."""
        return event.raw is None and (event.native is self._usage or event.native == self._usage)

    def commit_held(self, commit: Commit) -> bytes:
        if commit.stop.raw is not None:
            # A part of a chunk relayed as it came: the chunk's frame (its last event's).
            return commit.stop.raw
        if commit.stop.final is None:
            return super().commit_held(commit)
        return self._parts([commit.stop.final])

    def error_frame(self, error: TurngateError) -> bytes:
        raw = getattr(error, "raw", None)
        if raw and getattr(error, "native", None) is not None:
            return bytes(raw)
        status = error.status if error.status >= 500 else 502
        body = {
            "error": {
                "code": status,
                "message": f"turngate: {error}",
                "status": "UNAVAILABLE" if status == 503 else "INTERNAL",
            }
        }
        return self._data(body)

    def _parts(self, parts: list[Any]) -> bytes:
        candidate = {"content": {"parts": parts, "role": "model"}, "index": 0}
        return self._data({"candidates": [candidate], **self._envelope})

    def _data(self, payload: dict[str, Any]) -> bytes:
        if self._unsent and "candidates" in payload:
            payload["usageMetadata"] = self._usage
            self._unsent = False
        return encode_frame(None, orjson.dumps(payload), line_end=_CRLF)
