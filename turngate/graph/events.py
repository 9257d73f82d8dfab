"""Canonical stream events: what each API's stream decoder turns provider frames into.

Every API streams differently (data-only chunks, named events, whole parts); the decoders in
``turngate/adapters/<api>/stream.py`` map each SSE frame to a short list of these small
frozen events, and the ``StreamAssembler`` consumes only these.

``index`` is the canonical block index: the decoder numbers blocks 0, 1, 2… in the order
they start, whatever the provider's own index (Chat ``tool_calls[].index``, Responses
``output_index``/``content_index``, Anthropic ``index``, Gemini part position).

``seq`` is the delta sequence used for de-duplication, strictly increasing within a block:
the provider's own counter where it has one (Responses ``sequence_number``, on every event),
else the decoder's count of that block's deltas (``None`` on non-delta events).

``raw`` says how an encoder relays the event to the client:

- ``bytes`` (non-empty): the exact bytes of the frame the event came from; relay them as is.
- ``b""``: a sibling event of the same frame carries the frame's bytes; nothing to write.
- ``None``: the frame also holds something that must not be relayed as it came (a tool call
  still being assembled), so the encoder renders this event in the API's own form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, dataclass_transform

from turngate.graph.turn import Usage

_Class = TypeVar("_Class")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def event_class(cls: type[_Class]) -> type[_Class]:
    """A small value class of the per-chunk path: frozen for the type checker (mypy rejects
    any assignment) and hashable by its fields like a frozen dataclass, but built with plain
    slot stores: a frozen dataclass's ``__init__`` goes through ``object.__setattr__`` per
    field, about five times the cost, and a streamed answer builds several per chunk."""
    return dataclass(slots=True, unsafe_hash=True)(cls)


Attrs = dict[str, Any]
BlockKind = Literal["text", "refusal", "reasoning", "tool_call", "server_tool", "unknown"]
ToolType = Literal["function", "custom"]
# Kinds whose events are held back until the block is complete and validated; the others
# are relayed as previews while they stream.
HELD_KINDS: frozenset[str] = frozenset({"tool_call", "server_tool", "unknown"})


@event_class
class ResponseStart:
    # The provider's response handle: chatcmpl-…, resp_…, msg_…, Gemini's responseId.
    handle: str | None
    model: str | None
    # The response envelope as the provider sent it (Chat chunk fields, Responses response…).
    native: Attrs | None = None
    seq: int | None = None
    raw: bytes | None = None


@event_class
class BlockStart:
    index: int
    kind: BlockKind
    call_id: str | None = None
    name: str | None = None
    # The provider's own type name for the block (``tool_use``, ``function_call``, …) and
    # its own index or key (Anthropic ``index``, Chat ``tool_calls[].index``, Responses
    # ``output_index``), which an encoder needs to write the block back.
    native_type: str | None = None
    native_index: int | None = None
    tool_type: ToolType = "function"
    # server_tool blocks: a provider-run call, or its result.
    phase: Literal["call", "result"] = "call"
    # An opaque payload known at start (Anthropic ``redacted_thinking.data``).
    payload: str | None = None
    redacted: bool = False
    # Native fields the graph does not model, kept for the committed block.
    attrs: Attrs = field(default_factory=dict)
    seq: int | None = None
    raw: bytes | None = None


@event_class
class TextDelta:
    index: int
    text: str
    seq: int | None = None
    raw: bytes | None = None


@event_class
class ArgsDelta:
    """A fragment of a tool call's JSON arguments (or a server tool's input)."""

    index: int
    fragment: str
    seq: int | None = None
    raw: bytes | None = None


@event_class
class ReasoningDelta:
    index: int
    text: str
    seq: int | None = None
    raw: bytes | None = None


@event_class
class SignatureDelta:
    """An opaque signature fragment of a reasoning block, kept byte-exact."""

    index: int
    signature: str
    seq: int | None = None
    raw: bytes | None = None


@event_class
class CitationDelta:
    """A citation or annotation attached to a text block."""

    index: int
    citation: Any
    seq: int | None = None
    raw: bytes | None = None


@event_class
class OpaqueDelta:
    """A delta of a kind the decoder does not model; allowed only in ``unknown`` blocks."""

    index: int
    native: Attrs
    seq: int | None = None
    raw: bytes | None = None


@event_class
class BlockStop:
    index: int
    # The block's final native object when the provider sends one (Responses
    # ``output_item.done`` item, Gemini's whole part).
    final: Attrs | None = None
    # Complete arguments when the provider states them at the end (Responses item
    # ``arguments``, Gemini ``functionCall.args``, Anthropic's ``{}`` for a call with none).
    arguments: str | None = None
    # An opaque payload known only at the end (Responses ``encrypted_content``).
    payload: str | None = None
    attrs: Attrs = field(default_factory=dict)
    seq: int | None = None
    raw: bytes | None = None


@event_class
class TurnEnd:
    """The turn's stop reason arrived (finish_reason, stop_reason, status, finishReason)."""

    stop_reason: str
    native: Attrs | None = None
    seq: int | None = None
    raw: bytes | None = None


@event_class
class UsageEvent:
    usage: Usage
    native: Attrs | None = None
    seq: int | None = None
    raw: bytes | None = None


@event_class
class StreamDone:
    """The API's normal terminator: ``[DONE]``, ``message_stop``, ``response.completed``."""

    seq: int | None = None
    raw: bytes | None = None


@event_class
class StreamError:
    """An error the provider reported inside the stream."""

    message: str
    native: Attrs | None = None
    seq: int | None = None
    raw: bytes | None = None


@event_class
class Native:
    """A frame with no content of its own (``ping``, ``response.in_progress``, …).

    Relayed as it came, unless it belongs to a held block (``index``), whose frames wait
    for the commit.
    """

    name: str
    index: int | None = None
    seq: int | None = None
    raw: bytes | None = None


DeltaEvent = TextDelta | ArgsDelta | ReasoningDelta | SignatureDelta | CitationDelta | OpaqueDelta
BlockEvent = BlockStart | DeltaEvent | BlockStop
StreamEvent = ResponseStart | BlockEvent | TurnEnd | UsageEvent | StreamDone | StreamError | Native
