"""Pure fault injection over a recorded SSE stream: bytes in, broken bytes out.

Independent of turngate's own decoders: frames are split on their blank lines (the
recordings are regularly framed) and classified by reading their JSON directly, so a bug in
the code under test cannot hide in the faults it is tested with.

Each ``API_*`` name is one of turngate's API names (``openai_chat``, ``openai_responses``,
``anthropic``, ``gemini``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from turngate.adapters.relay import StreamRelay
from turngate.graph.model import ApiName, ToolCallBlock

FOLDERS = {
    "openai_chat": "openai-chat",
    "openai_responses": "openai-responses",
    "anthropic": "anthropic",
    "gemini": "gemini",
}
API_OF_FOLDER = {folder: api for api, folder in FOLDERS.items()}
_FRAME_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


@dataclass(frozen=True)
class Frame:
    raw: bytes
    event: str | None
    data: Any


def split_frames(stream: bytes) -> list[Frame]:
    """The stream's frames, each with its closing blank line; trailing bytes are a last frame."""
    frames: list[Frame] = []
    at = 0
    for match in _FRAME_END.finditer(stream):
        frames.append(_frame(stream[at : match.end()]))
        at = match.end()
    if at < len(stream):
        frames.append(_frame(stream[at:]))
    return frames


def _frame(raw: bytes) -> Frame:
    event = None
    data_lines = []
    for line in re.split(rb"\r\n|\n|\r", raw):
        if line.startswith(b"event:"):
            event = line[6:].strip().decode()
        elif line.startswith(b"data:"):
            data_lines.append(line[5:].removeprefix(b" "))
    data: Any = None
    if data_lines:
        text = b"\n".join(data_lines)
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            data = text.decode()
    return Frame(raw, event, data)


def join(frames: list[Frame]) -> bytes:
    return b"".join(f.raw for f in frames)


def frame_ends(stream: bytes) -> list[int]:
    """Byte offsets at which each frame ends."""
    ends, total = [], 0
    for frame in split_frames(stream):
        total += len(frame.raw)
        ends.append(total)
    return ends


# --- classifying frames -------------------------------------------------------------------


def _chat_delta(frame: Frame) -> dict[str, Any]:
    data = frame.data
    if isinstance(data, dict) and data.get("choices"):
        delta = data["choices"][0].get("delta")
        return delta if isinstance(delta, dict) else {}
    return {}


def is_delta(api: str, frame: Frame) -> bool:
    """Frames that carry a content delta (text, arguments, thinking, a streamed part)."""
    data = frame.data
    if api == "openai_chat":
        delta = _chat_delta(frame)
        return bool(delta.get("content") or delta.get("tool_calls") or delta.get("refusal"))
    if api == "anthropic":
        return isinstance(data, dict) and data.get("type") == "content_block_delta"
    if api == "openai_responses":
        return isinstance(data, dict) and str(data.get("type", "")).endswith(".delta")
    if api == "gemini":
        return bool(_gemini_parts(frame))
    raise ValueError(api)


def _gemini_parts(frame: Frame) -> list[Any]:
    data = frame.data
    if not isinstance(data, dict):
        return []
    candidates = data.get("candidates") or [{}]
    return list((candidates[0].get("content") or {}).get("parts") or [])


def block_key(api: str, frame: Frame) -> object | None:
    """Which block a frame belongs to (None: no single block)."""
    data = frame.data
    if not isinstance(data, dict):
        return None
    if api == "anthropic":
        return data.get("index") if str(data.get("type", "")).startswith("content_block") else None
    if api == "openai_responses":
        return data.get("output_index")
    if api == "openai_chat":
        delta = _chat_delta(frame)
        calls = delta.get("tool_calls")
        if calls and len(calls) == 1 and not delta.get("content"):
            return ("tool", calls[0].get("index"))
        return "text" if delta.get("content") and not calls else None
    if api == "gemini":
        parts = _gemini_parts(frame)
        return id(frame) if parts else None
    raise ValueError(api)


def is_terminator(api: str, frame: Frame) -> bool:
    data = frame.data
    if api == "openai_chat":
        return data == "[DONE]"
    if api == "anthropic":
        return isinstance(data, dict) and data.get("type") == "message_stop"
    if api == "openai_responses":
        kind = data.get("type") if isinstance(data, dict) else None
        return kind in ("response.completed", "response.incomplete")
    if api == "gemini":
        candidates = data.get("candidates") if isinstance(data, dict) else None
        return bool(candidates) and "finishReason" in candidates[0]
    raise ValueError(api)


def is_tool_stop(api: str, frame: Frame) -> bool:
    """The frame that completes a client tool call."""
    data = frame.data
    if not isinstance(data, dict):
        return False
    if api == "anthropic":
        return data.get("type") == "content_block_stop"
    if api == "openai_responses":
        item = data.get("item") or {}
        return data.get("type") == "response.output_item.done" and item.get("type") == (
            "function_call"
        )
    if api == "openai_chat":
        choices = data.get("choices") or [{}]
        return choices[0].get("finish_reason") is not None
    if api == "gemini":
        # A call streamed in pieces (Vertex) ends with an empty functionCall part; a whole
        # call has no stop of its own, the turn's finishReason chunk ends it.
        return any(p.get("functionCall") == {} for p in _gemini_parts(frame))
    raise ValueError(api)


def has_tool_call(api: str, stream: bytes) -> bool:
    marker = {
        "openai_chat": b'"tool_calls"',
        "anthropic": b'"type":"tool_use"',
        "openai_responses": b'"type":"function_call"',
        "gemini": b'"functionCall"',
    }[api]
    return marker in stream


# --- the faults ---------------------------------------------------------------------------


def truncate(stream: bytes, offset: int) -> bytes:
    return stream[:offset]


def duplicate_deltas(api: str, stream: bytes) -> bytes:
    """Every content delta frame sent twice in a row."""
    out = []
    for frame in split_frames(stream):
        out.append(frame.raw)
        if is_delta(api, frame):
            out.append(frame.raw)
    return b"".join(out)


def reorder_blocks(api: str, stream: bytes) -> bytes | None:
    """The frames of the first two blocks swapped (None when the stream has fewer)."""
    frames = split_frames(stream)
    runs: list[tuple[object, int, int]] = []
    for at, frame in enumerate(frames):
        key = block_key(api, frame)
        if key is None:
            continue
        if runs and runs[-1][0] == key and runs[-1][2] == at:
            runs[-1] = (key, runs[-1][1], at + 1)
        else:
            runs.append((key, at, at + 1))
    if len(runs) < 2 or runs[0][0] == runs[1][0] or runs[0][2] != runs[1][1]:
        return None
    (_a, a0, a1), (_b, b0, b1) = runs[0], runs[1]
    swapped = frames[:a0] + frames[b0:b1] + frames[a0:a1] + frames[b1:]
    return join(swapped)


def drop_frames(api: str, stream: bytes, which: Callable[[str, Frame], bool]) -> bytes | None:
    """The stream without the first frame ``which`` picks (None when there is none)."""
    frames = split_frames(stream)
    for at, frame in enumerate(frames):
        if which(api, frame):
            return join(frames[:at] + frames[at + 1 :])
    return None


def drop_tool_stop(api: str, stream: bytes) -> bytes | None:
    """Remove the stop of the first client tool call (Anthropic: its content_block_stop)."""
    if api == "gemini" and has_tool_call(api, stream):
        return drop_frames(api, stream, is_tool_stop) or drop_terminator(api, stream)
    if api != "anthropic":
        return drop_frames(api, stream, is_tool_stop)
    frames = split_frames(stream)
    tool_index = None
    for at, frame in enumerate(frames):
        data = frame.data if isinstance(frame.data, dict) else {}
        block = data.get("content_block") or {}
        if data.get("type") == "content_block_start" and block.get("type") == "tool_use":
            tool_index = data.get("index")
        is_stop = data.get("type") == "content_block_stop"
        if tool_index is not None and is_stop and data.get("index") == tool_index:
            return join(frames[:at] + frames[at + 1 :])
    return None


def drop_terminator(api: str, stream: bytes) -> bytes | None:
    return drop_frames(api, stream, is_terminator)


def cut_mid_arguments(api: str, stream: bytes) -> bytes | None:
    """The connection dropped halfway through the first tool call's argument bytes."""
    marker = {
        "openai_chat": rb'"arguments":"[^"]',
        "anthropic": rb'"partial_json":"[^"]',
        "openai_responses": rb'"type":"response\.function_call_arguments\.delta"',
        "gemini": rb'"(args|partialArgs)":',
    }[api]
    match = re.search(marker, stream)
    if match is None:
        return None
    return stream[: match.end() + 2]


def old_generation_schedule(stream: bytes, cut: int) -> list[tuple[int, bytes]]:
    """Generation 1 sends ``cut`` bytes and stalls; generation 2 replays the whole stream;
    the rest of generation 1 arrives late, interleaved frame by frame with generation 2."""
    late = split_frames(stream[cut:])
    fresh = split_frames(stream)
    schedule: list[tuple[int, bytes]] = [(1, stream[:cut])]
    for k, frame in enumerate(fresh):
        schedule.append((2, frame.raw))
        if k < len(late):
            schedule.append((1, late[k].raw))
    schedule.extend((1, frame.raw) for frame in late[len(fresh) :])
    return schedule


def first_tool_call_end(api: ApiName, stream: bytes) -> int:
    """Where the frame ends that makes the stream's first tool call whole, as the relay
    sees it: cut there, the client got a call it may be running."""
    relay, start = StreamRelay(api), 0
    for end in frame_ends(stream):
        relay.feed(stream[start:end])
        start = end
        if any(isinstance(block, ToolCallBlock) for block in relay.assembler.committed):
            return end
    raise AssertionError("no tool call in the stream")
