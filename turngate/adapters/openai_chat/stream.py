"""OpenAI Chat Completions streams: chunks -> canonical events, and the relay back.

The stream is data-only ``chat.completion.chunk`` JSON ending with ``data: [DONE]``. Text
arrives as ``delta.content`` (refusals as ``delta.refusal``); tool calls as
``delta.tool_calls[]`` fragments keyed by ``index``, with ``id``/``type``/``name`` on the
first fragment. Chat has no block-stop event: like the SDK, a call is complete when a
fragment for another index arrives or the choice's ``finish_reason`` is set. Usage comes in
an extra chunk with ``choices: []`` (and after it, for some models, a moderation chunk);
Azure sends a first chunk with an empty id and ``choices: []``.
"""

from __future__ import annotations

from typing import Any

import orjson

from turngate.adapters.sse import (
    MarkStyle,
    SSEFrame,
    StreamEncoder,
    check_nesting,
    encode_frame,
    frame_object,
    own_frame,
)
from turngate.adapters.template import FrameTemplate, Hole, QuickDelta, cut
from turngate.errors import TurngateError, UpstreamProtocolError
from turngate.graph.assembler import Commit
from turngate.graph.events import (
    ArgsDelta,
    BlockStart,
    BlockStop,
    Native,
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

_DONE = b"[DONE]"
_ENVELOPE_SKIP = frozenset({"choices", "usage", "obfuscation"})
# Templates a stream may cut (adapters/template.py): a provider whose envelope changes from
# chunk to chunk would otherwise pay for a probe on every text chunk.
_TEMPLATES_PER_STREAM = 4
_TEXT_HOLES = (
    Hole(b'"content":', ("choices", 0, "delta", "content"), "text"),
    Hole(b'"obfuscation":', ("obfuscation",), "token"),
)


class ChatStreamDecoder:
    api = "openai_chat"
    eof_terminates = False

    def __init__(self) -> None:
        self._started = False
        self._next = 0
        self._text: int | None = None
        self._refusal: int | None = None
        # Native tool_calls index -> canonical block index.
        self._calls: dict[int, int] = {}
        self._open_call: int | None = None
        self._stopped: set[int] = set()
        self._counts: dict[int, int] = {}
        self._template: FrameTemplate | None = None
        # The same template for the chunk's whole frame (``FrameTemplate.framed``).
        self._frame_template: FrameTemplate | None = None
        self._templates_left = _TEMPLATES_PER_STREAM

    def decode(self, frame: SSEFrame) -> list[StreamEvent]:
        if frame.truncated:
            return []
        return self.decode_data(frame.data, frame.raw)

    def quick_text(self, data: bytes) -> QuickDelta | None:
        """A frame's ``data`` that fits the template of the text chunk before it (another
        text, nothing else changed), as the (block index, text, sequence number) of the
        ``TextDelta`` that ``decode_data`` gives for it; the number is taken. None: not
        such a chunk, nothing taken."""
        return self._take(self._template, data)

    def quick_frame(self, frame: bytes) -> QuickDelta | None:
        """``quick_text`` of a whole frame, ``data: `` and blank line included, read at a
        frame boundary (``SSEDecoder.at_boundary``): a frame that fits is one frame of one
        ``data`` line, so the SSE decoder need not look at it."""
        return self._take(self._frame_template, frame)

    def text_run(self) -> tuple[int, FrameTemplate] | None:
        """``TextRunDecoder.text_run``: the open text block and its whole-frame template."""
        index, template = self._text, self._frame_template
        return None if index is None or template is None else (index, template)

    def took_text(self, index: int, pieces: list[str]) -> int:
        """``TextRunDecoder.took_text``: the pieces' sequence numbers taken."""
        seq = self._counts[index]
        self._counts[index] = seq + len(pieces)
        return seq

    def _take(self, template: FrameTemplate | None, data: bytes) -> QuickDelta | None:
        index = self._text
        if template is None or index is None:
            return None
        read = template.read(data)
        if read is None or not read[0]:
            return None
        text = read[0]
        seq = self._counts[index]
        self._counts[index] = seq + 1
        return index, text, seq, False

    def decode_data(self, data: bytes, whole: bytes) -> list[StreamEvent]:
        """``decode`` of a whole frame given as its ``data`` and its bytes (the relay reads
        a one-line frame without building the ``SSEFrame``)."""
        taken = self.quick_text(data)
        if taken is not None:
            index, text, seq, _args = taken
            return [TextDelta(index, text, seq, whole)]
        return self.parse_data(data, whole)

    def parse_data(self, data: bytes, whole: bytes) -> list[StreamEvent]:
        """``decode_data`` of a frame that ``quick_text`` did not take: read in full."""
        if data == _DONE:
            return [StreamDone(raw=whole)]
        chunk = frame_object(data)
        fast = self._one_delta(chunk, whole)
        if fast is not None:
            if type(fast) is TextDelta and self._templates_left:
                self._templates_left -= 1
                obfuscated = type(chunk.get("obfuscation")) is str
                holes = _TEXT_HOLES if obfuscated else _TEXT_HOLES[:1]
                template = self._template = cut(data, chunk, holes)
                self._frame_template = None if template is None else template.framed(whole, data)
            # Only its one string is kept, and the frame is relayed as it came (text) or not
            # at all (arguments): nothing of it is written back, so its nesting is no risk.
            return [fast]
        check_nesting(data, chunk)
        error = chunk.get("error")
        if error:
            native = error if isinstance(error, dict) else {"message": str(error)}
            return [StreamError(_message(native), native=native, raw=whole)]
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise UpstreamProtocolError("chat chunk has no 'choices' list", rule="stream_malformed")
        pure = not any(
            isinstance(c, dict)
            and isinstance(c.get("delta"), dict)
            and c["delta"].get("tool_calls")
            for c in choices
        )
        raw: bytes | None = b"" if pure else None
        events: list[StreamEvent] = []
        if not self._started and (choices or chunk.get("id")):
            self._started = True
            envelope = {k: v for k, v in chunk.items() if k not in _ENVELOPE_SKIP}
            handle, model = chunk.get("id"), chunk.get("model")
            events.append(
                ResponseStart(
                    handle=handle if isinstance(handle, str) and handle else None,
                    model=model if isinstance(model, str) and model else None,
                    native=envelope,
                    raw=raw,
                )
            )
        for choice in choices:
            self._choice(choice, events, raw)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            events.append(UsageEvent(usage_of(usage), native=usage, raw=raw))
        return own_frame(events, whole, pure)

    def _one_delta(self, chunk: dict[str, Any], raw: bytes) -> StreamEvent | None:
        """The chunk of nearly every read, decoded without the general walk: one choice whose
        delta is only more text of the open text block or only more arguments of the open
        call, with no finish reason, usage or error. None: anything else (the general path
        decides, and raises where it must)."""
        choices = chunk.get("choices")
        if not self._started or type(choices) is not list or len(choices) != 1:
            return None
        choice = choices[0]
        if (
            type(choice) is not dict
            or choice.get("finish_reason") is not None
            or choice.get("index", 0) != 0
            or chunk.get("usage") is not None
            or chunk.get("error")
        ):
            return None
        delta = choice.get("delta")
        if type(delta) is not dict or len(delta) != 1:
            return None
        content = delta.get("content")
        if content is not None:
            index = self._text
            if type(content) is not str or not content or index is None:
                return None
            seq = self._counts[index]
            self._counts[index] = seq + 1
            return TextDelta(index, content, seq, raw)
        calls = delta.get("tool_calls")
        if type(calls) is not list or len(calls) != 1:
            return None
        call = calls[0]
        if type(call) is not dict or len(call) != 2:
            return None
        native, function = call.get("index"), call.get("function")
        if type(native) is not int or native != self._open_call or type(function) is not dict:
            return None
        fragment = function.get("arguments")
        if len(function) != 1 or type(fragment) is not str or not fragment:
            return None
        index = self._calls[native]
        seq = self._counts[index]
        self._counts[index] = seq + 1
        # The frame carries a call still being assembled: never relayed as it came.
        return ArgsDelta(index, fragment, seq, None)

    def build_block(
        self, start: BlockStart, stop: BlockStop, block_id: str, order: int
    ) -> AnyBlock | None:
        """Chat blocks are plain (text, refusal, call): the assembler builds them itself."""
        return None

    def _choice(self, choice: Any, events: list[StreamEvent], raw: bytes | None) -> None:
        if not isinstance(choice, dict):
            raise UpstreamProtocolError(
                "chat chunk choice is not an object", rule="stream_malformed"
            )
        if choice.get("index", 0) != 0:
            raise UpstreamProtocolError(
                "a chat stream with more than one choice (n > 1) cannot be committed as one turn",
                rule="unsupported_in_target",
            )
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
            if isinstance(content, str) and content:
                if self._text is None:
                    self._text = self._open(events, BlockStart(self._next, "text", raw=raw))
                events.append(self._text_delta(self._text, content, raw))
            refusal = delta.get("refusal")
            if isinstance(refusal, str) and refusal:
                if self._refusal is None:
                    self._refusal = self._open(events, BlockStart(self._next, "refusal", raw=raw))
                events.append(self._text_delta(self._refusal, refusal, raw))
            calls = delta.get("tool_calls")
            if isinstance(calls, list):
                for call in calls:
                    self._call(call, events, raw)
            # An audio answer's ``audio`` deltas (data, transcript, id) go out as they came:
            # no block of the turn, as a non-streamed answer's ``message.audio`` is none (a
            # later history names it by id alone).
            if delta.get("function_call"):
                raise UpstreamProtocolError(
                    "chat stream carries 'function_call', which turngate does not model",
                    rule="unknown_kind",
                )
        finish = choice.get("finish_reason")
        if isinstance(finish, str):
            for index in sorted(set(self._counts) - self._stopped):
                self._stopped.add(index)
                events.append(BlockStop(index, raw=raw))
            self._open_call = None
            events.append(TurnEnd(finish, raw=raw))

    def _open(self, events: list[StreamEvent], start: BlockStart) -> int:
        events.append(start)
        self._next += 1
        self._counts[start.index] = 0
        return start.index

    def _text_delta(self, index: int, text: str, raw: bytes | None) -> TextDelta:
        seq = self._counts.get(index, 0)
        self._counts[index] = seq + 1
        return TextDelta(index, text, seq=seq, raw=raw)

    def _call(self, call: Any, events: list[StreamEvent], raw: bytes | None) -> None:
        if not isinstance(call, dict) or not isinstance(call.get("index"), int):
            raise UpstreamProtocolError(
                "chat tool_calls fragment without an integer index", rule="stream_malformed"
            )
        native_index = call["index"]
        custom = call.get("custom")
        kind = call.get("type") or ("custom" if isinstance(custom, dict) else "function")
        body = custom if kind == "custom" else call.get("function")
        body = body if isinstance(body, dict) else {}
        index = self._calls.get(native_index)
        if index is None:
            if native_index != len(self._calls):
                raise UpstreamProtocolError(
                    f"tool call {native_index} started out of order", rule="stream_protocol"
                )
            if self._open_call is not None and self._open_call != native_index:
                previous = self._calls[self._open_call]
                self._stopped.add(previous)
                events.append(BlockStop(previous, raw=raw))
            self._open_call = native_index
            call_id, name = call.get("id"), body.get("name")
            index = self._open(
                events,
                BlockStart(
                    self._next,
                    "tool_call",
                    call_id=call_id if isinstance(call_id, str) else None,
                    name=name if isinstance(name, str) else None,
                    native_type=kind,
                    tool_type="custom" if kind == "custom" else "function",
                    raw=raw,
                ),
            )
            self._calls[native_index] = index
        fragment = body.get("input" if kind == "custom" else "arguments")
        if isinstance(fragment, str) and fragment:
            seq = self._counts[index]
            self._counts[index] = seq + 1
            events.append(ArgsDelta(index, fragment, seq=seq, raw=raw))


def usage_of(native: dict[str, Any]) -> Usage:
    def number(key: str) -> int | None:
        value = native.get(key)
        return value if isinstance(value, int) else None

    return Usage(
        input_tokens=number("prompt_tokens"),
        output_tokens=number("completion_tokens"),
        total_tokens=number("total_tokens"),
    )


def _message(native: dict[str, Any]) -> str:
    message = native.get("message")
    return message if isinstance(message, str) and message else "upstream stream error"


class ChatStreamEncoder(StreamEncoder):
    def __init__(self, marks: MarkStyle | None = None) -> None:
        super().__init__(marks)
        self._envelope: dict[str, Any] = {"object": "chat.completion.chunk"}
        self._role_sent = False
        self._tool_index = 0

    def started(self, event: ResponseStart) -> None:
        if event.native:
            self._envelope = dict(event.native)
        self._role_sent = event.raw is not None

    def render(self, event: StreamEvent) -> bytes:
        match event:
            case ResponseStart():
                self._role_sent = True
                return self._chunk({"role": "assistant", "content": None})
            case TextDelta():
                key = "refusal" if self.kind_of(event.index) == "refusal" else "content"
                return self._chunk({key: event.text})
            case BlockStart() | BlockStop() | Native():
                return b""
            case TurnEnd():
                return self._chunk({}, finish_reason=event.stop_reason)
            case UsageEvent():
                return self._data({**self._envelope, "choices": [], "usage": event.native})
            case StreamDone():
                return b"data: [DONE]\n\n"
            case _:
                return super().render(event)

    def commit_held(self, commit: Commit) -> bytes:
        block = commit.block
        if not isinstance(block, ToolCallBlock):
            return super().commit_held(commit)
        body: dict[str, Any]
        if block.tool_type == "custom":
            body = {"custom": {"name": block.name, "input": block.arguments}}
        else:
            body = {"function": {"name": block.name, "arguments": block.arguments}}
        call = {"index": self._tool_index, "id": block.call_id, "type": block.tool_type, **body}
        self._tool_index += 1
        delta: dict[str, Any] = {}
        if not self._role_sent:
            self._role_sent = True
            delta["role"] = "assistant"
        delta["tool_calls"] = [call]
        return self._chunk(delta)

    def error_frame(self, error: TurngateError) -> bytes:
        native = getattr(error, "native", None)
        raw = getattr(error, "raw", None)
        if native is not None and raw:
            return bytes(raw)
        return self._data(openai_stream_error(error))

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return self._data({**self._envelope, "choices": [choice]})

    def _data(self, payload: dict[str, Any]) -> bytes:
        return encode_frame(None, orjson.dumps(payload))


def openai_stream_error(error: TurngateError) -> dict[str, Any]:
    """The in-band error both OpenAI SDKs raise ``APIError`` on: ``{"error": {…}}``."""
    native = getattr(error, "native", None)
    message = f"turngate: {error.message}"
    if isinstance(native, dict) and isinstance(native.get("message"), str):
        message = f"turngate: upstream error: {native['message']}"
    return {
        "error": {
            "message": message,
            "type": "server_error",
            "param": None,
            "code": error.rule,
        }
    }
