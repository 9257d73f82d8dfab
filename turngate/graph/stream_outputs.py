"""What the ``StreamAssembler`` works with and hands out: the failure rules, its states and
the ``TRANSITIONS`` table that moves them, the outputs the relay encodes (``Preview``,
``Commit``, ``Retract``, ``Quarantine``, ``Complete``, ``Failed``), and the JSON nesting bound
every block that is written back must keep. ``turngate.graph.assembler`` re-exports them.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any

import orjson

from turngate.errors import UpstreamProtocolError
from turngate.graph.events import BlockStart, BlockStop, StreamDone, StreamEvent, event_class
from turngate.graph.model import AnyBlock
from turngate.graph.turn import AssistantTurn

STREAM_TRUNCATED = "stream_truncated"
MISSING_STOP = "missing_stop"
STREAM_PROTOCOL = "stream_protocol"
UPSTREAM_ERROR = "upstream_error"
ARGUMENTS_MISMATCH = "arguments_mismatch"
STREAM_MISMATCH = "stream_mismatch"
UNKNOWN_KIND = "unknown_kind"
ARGUMENTS_TOO_DEEP = "arguments_too_deep"
# Deepest JSON a committed block may hold: orjson reads 1024 levels but writes only 254, and
# checking a value against a recursive schema recurses as deep as the value nests.
MAX_NESTING = 128

# Builds the committed block from the block's final native object, the way the API's own
# response parser does, so a streamed turn equals the same turn read whole. None: the
# assembler's generic construction is used.
BlockBuilder = Callable[[BlockStart, BlockStop, str, int], AnyBlock | None]


class AssemblerState(StrEnum):
    AWAITING_START = "AWAITING_START"
    STREAMING = "STREAMING"
    # The stop reason arrived; waiting for the API's terminator.
    ENDING = "ENDING"
    # Terminator arrived and every block is committed: the turn is canonical.
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


class Signal(StrEnum):
    START = "start"
    BLOCK = "block"
    # Usage and frames with no content of their own.
    META = "meta"
    TURN_END = "turn_end"
    DONE = "done"
    # The provider reported an error, or a block failed its checks.
    ERROR = "error"
    # The connection ended (APIs whose end *is* the connection close signal DONE instead).
    EOF = "eof"


A, G = AssemblerState, Signal

TRANSITIONS: dict[tuple[AssemblerState, Signal], AssemblerState] = {
    (A.AWAITING_START, G.START): A.STREAMING,
    (A.AWAITING_START, G.META): A.AWAITING_START,
    (A.AWAITING_START, G.ERROR): A.FAILED,
    (A.AWAITING_START, G.EOF): A.FAILED,
    (A.STREAMING, G.BLOCK): A.STREAMING,
    (A.STREAMING, G.META): A.STREAMING,
    (A.STREAMING, G.TURN_END): A.ENDING,
    (A.STREAMING, G.ERROR): A.FAILED,
    (A.STREAMING, G.EOF): A.FAILED,
    (A.ENDING, G.META): A.ENDING,
    (A.ENDING, G.DONE): A.COMPLETE,
    (A.ENDING, G.ERROR): A.FAILED,
    (A.ENDING, G.EOF): A.FAILED,
}
TERMINAL: frozenset[AssemblerState] = frozenset({A.COMPLETE, A.FAILED})


class StreamFailed(UpstreamProtocolError):
    """The turn will never be canonical. ``native``/``raw``: the provider's own error, if any."""

    rule = STREAM_TRUNCATED

    def __init__(
        self,
        message: str,
        *,
        rule: str,
        native: dict[str, Any] | None = None,
        raw: bytes | None = None,
        block_index: int | None = None,
    ) -> None:
        super().__init__(message, rule=rule)
        self.native = native
        self.raw = raw
        self.block_index = block_index
        self.retracted: tuple[Retract, ...] = ()


@event_class
class Preview:
    event: StreamEvent
    block_id: str | None = None
    # The first preview of its block (where an explicit ``turngate.preview`` mark goes).
    first: bool = False


@event_class
class Commit:
    block_id: str
    index: int
    block: AnyBlock
    start: BlockStart
    stop: BlockStop
    # The block's events that were held back (held kinds), in arrival order.
    held: tuple[StreamEvent, ...] = ()


@event_class
class Retract:
    block_id: str
    index: int
    reason: str


@event_class
class Quarantine:
    event: StreamEvent
    generation: int
    reason: str


@event_class
class Complete:
    turn: AssistantTurn
    # None when the API's end is the connection close (Gemini).
    event: StreamDone | None


@event_class
class Failed:
    error: StreamFailed


Output = Preview | Commit | Retract | Quarantine | Complete | Failed


def nests_deeper(value: dict[str, Any] | list[Any], limit: int) -> bool:
    """True when containers nest more than ``limit`` deep (``value`` itself is depth 1)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, dict | list):
                if depth >= limit:
                    return True
                stack.append((child, depth + 1))
    return False


def json_nests_deeper(text: str, limit: int) -> bool:
    """Whether JSON text nests more than ``limit`` deep; text that is not JSON does not.
    Counting brackets first keeps the common case to one fast scan."""
    if text.count("{") + text.count("[") <= limit:
        return False
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return isinstance(value, dict | list) and nests_deeper(value, limit)
