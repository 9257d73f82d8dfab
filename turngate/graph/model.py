"""MessageSequence.v1: the message graph every adapter parses into and renders from.

Blocks are small frozen dataclasses told apart by a ``kind`` literal. Whatever a
provider accepts that the graph does not model is kept, untouched, in ``attrs``
(of the block, the message, a tool, or the request envelope), so rendering a graph
back to the API it came from gives the same JSON value.

Digests (sha256 over canonical JSON) are computed when first asked for: the proxy
needs them for the manifest, a plain validation does not. A sequence of plain messages
may come with an outline instead (graph/outline.py): its ``messages`` are then built on
first read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import cached_property
from operator import attrgetter
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel

from turngate.graph.codec import arguments_complete, digest_of
from turngate.graph.outline import SequenceOutline

JsonValue = Any
Attrs = dict[str, Any]

Role = Literal["system", "developer", "user", "assistant", "tool"]
Trust = Literal["trusted", "untrusted"]
ArgumentState = Literal["complete", "incomplete"]
ResultStatus = Literal["success", "error", "cancel"]
ApiName = Literal["openai_chat", "openai_responses", "anthropic", "gemini"]
# The Google service a Gemini path addresses (they differ on a few rules).
Endpoint = Literal["gemini_api", "vertex"]
MediaSource = Literal["url", "base64", "file", "text"]

SCHEMA_VERSION = "turngate.MessageSequence.v1"
_CONFIG = ConfigDict(alias_generator=to_camel, populate_by_name=True)

# Fields that place a block rather than describe it: left out of its digest.
_PLACEMENT_FIELDS = frozenset({"id", "order", "trust"})


@dataclass(frozen=True)
class _ContentFields:
    """What ``semantic()`` reads of one block class, worked out once per class."""

    # Sorted, as canonical JSON orders them.
    names: tuple[str, ...]
    # All their values in one call, in the order of ``names``.
    values: Callable[[Any], tuple[Any, ...]]
    # Positions in ``names`` of the fields holding a tuple of blocks (a result's parts).
    nested: tuple[int, ...]


_CONTENT_FIELDS: dict[type[Any], _ContentFields] = {}


def _content_fields(cls: type[Any]) -> _ContentFields:
    known = _CONTENT_FIELDS.get(cls)
    if known is None:
        content = sorted(
            (f for f in fields(cls) if f.name not in _PLACEMENT_FIELDS), key=lambda f: f.name
        )
        names = tuple(f.name for f in content)
        nested = tuple(i for i, f in enumerate(content) if str(f.type).startswith("tuple["))
        known = _CONTENT_FIELDS[cls] = _ContentFields(names, attrgetter(*names), nested)
    return known


def content_values(block: _Block) -> list[JsonValue] | tuple[JsonValue, ...]:
    """The values of ``block.semantic()`` without its keys, in sorted key order.

    Within one kind the keys are always the same, so these values (``kind`` among them)
    say everything the dict says; the sequence digest is built from them.
    """
    content = _content_fields(type(block))
    values = content.values(block)
    if not content.nested:
        return values
    out = list(values)
    for i in content.nested:
        out[i] = [content_values(v) if isinstance(v, _Block) else v for v in out[i]]
    return out


# Sets an attribute of a frozen instance: for the constructors below and for the values a
# block works out once (its digest). Never a field after construction.
_set = object.__setattr__


@dataclass(frozen=True, kw_only=True)
class _Block:
    __pydantic_config__: ClassVar[ConfigDict] = _CONFIG

    id: str
    role: Role
    order: int
    trust: Trust
    attrs: Attrs = field(default_factory=dict)

    # The digest once worked out. Not cached_property: that writes the instance __dict__,
    # which on CPython 3.11 turns every later attribute read of the block into a slower
    # dict lookup (about 4x).
    _digest: ClassVar[str | None] = None

    def semantic(self) -> dict[str, JsonValue]:
        """The block's content: every field but those that only place it."""
        content = _content_fields(type(self))
        out = dict(zip(content.names, content.values(self)))  # noqa: B905 - same length
        for i in content.nested:
            name = content.names[i]
            out[name] = [v.semantic() if isinstance(v, _Block) else v for v in out[name]]
        return out

    @property
    def digest(self) -> str:
        """sha256 of the canonical JSON of ``semantic()``."""
        digest = self._digest
        if digest is None:
            digest = digest_of(self.semantic())
            _set(self, "_digest", digest)
        return digest


@dataclass(frozen=True, kw_only=True)
class TextBlock(_Block):
    kind: Literal["text"] = "text"
    text: str


@dataclass(frozen=True, kw_only=True)
class ImageBlock(_Block):
    kind: Literal["image"] = "image"
    source: MediaSource
    data: str
    media_type: str | None = None


@dataclass(frozen=True, kw_only=True)
class AudioBlock(_Block):
    kind: Literal["audio"] = "audio"
    source: MediaSource
    data: str
    media_type: str | None = None


@dataclass(frozen=True, kw_only=True)
class FileBlock(_Block):
    kind: Literal["file"] = "file"
    source: MediaSource
    data: str
    media_type: str | None = None
    filename: str | None = None


@dataclass(frozen=True, kw_only=True)
class ReasoningBlock(_Block):
    """Thinking or reasoning. ``signature`` and ``payload`` are opaque and kept byte-exact."""

    kind: Literal["reasoning"] = "reasoning"
    provider: ApiName
    text: str = ""
    signature: str | None = None
    payload: str | None = None
    redacted: bool = False


@dataclass(frozen=True, kw_only=True)
class RefusalBlock(_Block):
    kind: Literal["refusal"] = "refusal"
    text: str


@dataclass(frozen=True, kw_only=True)
class ToolCallBlock(_Block):
    """A call of a client-side tool. ``arguments`` is JSON text exactly as sent."""

    kind: Literal["tool_call"] = "tool_call"
    call_id: str
    name: str
    arguments: str
    argument_state: ArgumentState
    tool_type: Literal["function", "custom"] = "function"

    _arguments_checked: ClassVar[bool | None] = None

    @property
    def arguments_are_an_object(self) -> bool:
        """Whether ``arguments`` is exactly one JSON object, worked out once per block."""
        checked = self._arguments_checked
        if checked is None:
            checked = arguments_complete(self.arguments)
            _set(self, "_arguments_checked", checked)
        return checked


@dataclass(frozen=True, kw_only=True)
class SnippetBlock(_Block):
    """A retrieved snippet: scoped input that must stay in the role it was admitted under."""

    kind: Literal["snippet"] = "snippet"
    text: str
    scope: Role
    source: str | None = None
    title: str | None = None


# An adapter's note (in ``attrs``) on a CompressionBlock that stands for an item of its API
# (a reference to a stored item, an instruction to the provider), not a compaction.
ITEM_NOTE = "$item"
# An UnknownBlock's note of the usual fix, added to its refusal.
UNKNOWN_HINT = "$hint"


@dataclass(frozen=True, kw_only=True)
class CompressionBlock(_Block):
    """A compression or compaction artifact: scoped, opaque."""

    kind: Literal["compression"] = "compression"
    provider: ApiName
    payload: str
    scope: Role

    @property
    def compaction(self) -> bool:
        """The provider's compaction of what came before it (OpenAI's ``compaction`` item,
        Anthropic's ``compaction`` block), not a stand-in for an item (``ITEM_NOTE``)."""
        return ITEM_NOTE not in self.attrs


@dataclass(frozen=True, kw_only=True)
class ServerToolBlock(_Block):
    """A provider-run (hosted) tool call or result: opaque and provider-bound."""

    kind: Literal["server_tool"] = "server_tool"
    provider: ApiName
    name: str
    phase: Literal["call", "result"]
    call_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class UnknownBlock(_Block):
    """A content kind the adapter does not know. The validator refuses it (``unknown_kind``),
    adding what the adapter knows of the usual fix (``UNKNOWN_HINT`` in attrs), if anything."""

    kind: Literal["unknown"] = "unknown"
    native_type: str


# What a tool result may hold: media, snippets, and an item standing for one of its API's
# own (an Anthropic ``tool_reference`` naming a tool for the provider to load).
ContentBlock = Annotated[
    TextBlock
    | ImageBlock
    | AudioBlock
    | FileBlock
    | SnippetBlock
    | CompressionBlock
    | UnknownBlock,
    Field(discriminator="kind"),
]


@dataclass(frozen=True, kw_only=True)
class ToolResultBlock(_Block):
    """The answer to one tool call. ``content`` holds its parts; ``value`` a structured answer."""

    kind: Literal["tool_result"] = "tool_result"
    call_id: str
    status: ResultStatus = "success"
    name: str | None = None
    content: tuple[ContentBlock, ...] = ()
    value: JsonValue = None


Block = Annotated[
    TextBlock
    | ImageBlock
    | AudioBlock
    | FileBlock
    | ReasoningBlock
    | RefusalBlock
    | ToolCallBlock
    | ToolResultBlock
    | SnippetBlock
    | CompressionBlock
    | ServerToolBlock
    | UnknownBlock,
    Field(discriminator="kind"),
]
AnyBlock = (
    TextBlock
    | ImageBlock
    | AudioBlock
    | FileBlock
    | ReasoningBlock
    | RefusalBlock
    | ToolCallBlock
    | ToolResultBlock
    | SnippetBlock
    | CompressionBlock
    | ServerToolBlock
    | UnknownBlock
)
BLOCK_KINDS: frozenset[str] = frozenset(
    {
        "text",
        "image",
        "audio",
        "file",
        "reasoning",
        "refusal",
        "tool_call",
        "tool_result",
        "snippet",
        "compression",
        "server_tool",
    }
)


@dataclass(frozen=True, kw_only=True)
class Message:
    """One entry of the API's message list (or its system slot).

    ``origin`` names the list it came from (``messages``, ``input``, ``contents``, ``system``…)
    and ``index`` its position there; ``shape`` is the adapter's note of how the content was
    written (a string, a list of parts…), so rendering gives the same JSON back.
    """

    __pydantic_config__: ClassVar[ConfigDict] = _CONFIG

    index: int
    role: Role
    blocks: tuple[Block, ...]
    origin: str = "messages"
    shape: str = "parts"
    attrs: Attrs = field(default_factory=dict)

    @property
    def location(self) -> str:
        return f"{self.origin}[{self.index}]"


@dataclass(frozen=True, kw_only=True)
class ToolDef:
    __pydantic_config__: ClassVar[ConfigDict] = _CONFIG

    name: str
    tool_type: Literal["function", "custom", "hosted"] = "function"
    description: str | None = None
    parameters: JsonValue = None
    attrs: Attrs = field(default_factory=dict)

    @cached_property
    def schema_digest(self) -> str:
        return digest_of({"name": self.name, "parameters": self.parameters})


@dataclass(frozen=True, kw_only=True)
class ToolEdge:
    """A tool call and what answers it."""

    __pydantic_config__: ClassVar[ConfigDict] = _CONFIG

    call_id: str
    tool_name: str
    schema_digest: str | None
    argument_state: ArgumentState
    call_block_id: str
    result_block_id: str | None = None
    result_status: ResultStatus | None = None


@dataclass(frozen=True, kw_only=True)
class Normalization:
    """A change rendering made to fit the target API (moving results, never dropping them)."""

    __pydantic_config__: ClassVar[ConfigDict] = _CONFIG

    rule: str
    block_id: str
    detail: str


@dataclass(frozen=True, kw_only=True)
class MessageSequence:
    __pydantic_config__: ClassVar[ConfigDict] = _CONFIG

    schema_version: Literal["turngate.MessageSequence.v1"] = "turngate.MessageSequence.v1"
    api: ApiName
    adapter: str
    model: str | None
    messages: tuple[Message, ...]
    tools: tuple[ToolDef, ...] = ()
    envelope: Attrs = field(default_factory=dict)
    max_output_tokens: int | None = None
    stream: bool = False
    history: Literal["complete", "partial"] = "complete"
    normalizations: tuple[Normalization, ...] = ()
    # What the request's headers ask of the API (Anthropic's ``anthropic-beta`` features and
    # ``anthropic-version``): they change what it accepts, and are not part of the body, so
    # never rendered.
    betas: tuple[str, ...] = ()
    api_version: str | None = None
    # The service the path addresses, where it changes what is accepted (Gemini's API or
    # Vertex AI: RouteInfo.endpoint); never rendered either.
    endpoint: Endpoint | None = None

    # Set by an adapter that parsed plain messages (graph/outline.py): ``messages`` is then
    # built from it on first read. Never set on a sequence built any other way, so a
    # ``dataclasses.replace`` of an outlined sequence is an ordinary one.
    _outline: ClassVar[SequenceOutline | None] = None

    if not TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any:
            # Only reached while ``messages`` is not built yet.
            outline = self._outline
            if name != "messages" or outline is None:
                raise AttributeError(name)
            messages = outline.build()
            _set(self, "messages", messages)
            return messages

    @property
    def outline(self) -> SequenceOutline | None:
        """The outline this sequence was parsed with, if any (see graph/outline.py)."""
        return self._outline

    @cached_property
    def conversation_revision(self) -> int:
        """The number of assistant turns (maximal runs of assistant messages) in the history."""
        if self._outline is not None:
            return self._outline.conversation_revision()
        turns = 0
        previous: Role | None = None
        for message in self.messages:
            if message.role == "assistant" and previous != "assistant":
                turns += 1
            previous = message.role
        return turns

    @cached_property
    def edges(self) -> tuple[ToolEdge, ...]:
        from turngate.graph.edges import build_edges

        return build_edges(self)

    @cached_property
    def toolset_digest(self) -> str:
        return digest_of([[t.name, t.tool_type, t.parameters] for t in self.tools])

    @cached_property
    def sequence_digest(self) -> str:
        """sha256 of one canonical dump: each message's role and its blocks' content values.

        As binding as hashing each block's ``semantic()`` dict, since ``kind`` is among the
        values and fixes which keys they belong to; a third of the cost: no dict per block,
        one sha256 in all. The exact definition is in docs/architecture.md.
        """
        if self._outline is not None:
            return self._outline.sequence_digest()
        return digest_of([[m.role, [content_values(b) for b in m.blocks]] for m in self.messages])

    @property
    def adapter_digest(self) -> str:
        return digest_of(self.adapter)

    @property
    def model_revision(self) -> str | None:
        return self.model

    def blocks(self) -> list[tuple[Message, AnyBlock]]:
        return [(m, b) for m in self.messages for b in m.blocks]

    def tool(self, name: str) -> ToolDef | None:
        for tool in self.tools:
            if tool.name == name:
                return tool
        return None


# Constructors for the adapters' hot path, at about 60% of a class call's cost (which
# passes keywords through a dict to a generated __init__ that looks up object.__setattr__
# for every field). Each sets every field, in field order (tests/graph/test_model_fast_paths.py
# holds them to it).
_new = object.__new__


def new_text_block(
    *, id: str, role: Role, order: int, trust: Trust, text: str, attrs: Attrs | None = None
) -> TextBlock:
    block = _new(TextBlock)
    _set(block, "id", id)
    _set(block, "role", role)
    _set(block, "order", order)
    _set(block, "trust", trust)
    _set(block, "attrs", {} if attrs is None else attrs)
    _set(block, "kind", "text")
    _set(block, "text", text)
    return block


def new_tool_call(
    *,
    id: str,
    order: int,
    call_id: str,
    name: str,
    arguments: str,
    attrs: Attrs | None = None,
    tool_type: Literal["function", "custom"] = "function",
    role: Role = "assistant",
    trust: Trust = "untrusted",
) -> ToolCallBlock:
    """A call, by default an assistant's, untrusted like all model output.

    A function call's arguments are complete when they are one JSON object, a custom
    tool's input always is; the check is kept, so the validator does not parse them again.
    """
    block = _new(ToolCallBlock)
    complete = tool_type == "custom" or arguments_complete(arguments)
    _set(block, "id", id)
    _set(block, "role", role)
    _set(block, "order", order)
    _set(block, "trust", trust)
    _set(block, "attrs", {} if attrs is None else attrs)
    _set(block, "kind", "tool_call")
    _set(block, "call_id", call_id)
    _set(block, "name", name)
    _set(block, "arguments", arguments)
    _set(block, "argument_state", "complete" if complete else "incomplete")
    _set(block, "tool_type", tool_type)
    if tool_type == "function":
        _set(block, "_arguments_checked", complete)
    return block


def new_tool_result(
    *,
    id: str,
    role: Role,
    order: int,
    trust: Trust,
    call_id: str,
    content: tuple[ContentBlock, ...],
    attrs: Attrs | None = None,
    status: ResultStatus = "success",
    name: str | None = None,
) -> ToolResultBlock:
    """A result with its parts (no structured value)."""
    block = _new(ToolResultBlock)
    _set(block, "id", id)
    _set(block, "role", role)
    _set(block, "order", order)
    _set(block, "trust", trust)
    _set(block, "attrs", {} if attrs is None else attrs)
    _set(block, "kind", "tool_result")
    _set(block, "call_id", call_id)
    _set(block, "status", status)
    _set(block, "name", name)
    _set(block, "content", content)
    _set(block, "value", None)
    return block


def new_message(
    *,
    index: int,
    role: Role,
    blocks: tuple[Block, ...],
    shape: str,
    attrs: Attrs | None = None,
    origin: str = "messages",
) -> Message:
    message = _new(Message)
    _set(message, "index", index)
    _set(message, "role", role)
    _set(message, "blocks", blocks)
    _set(message, "origin", origin)
    _set(message, "shape", shape)
    _set(message, "attrs", {} if attrs is None else attrs)
    return message


def new_outlined_sequence(
    *,
    api: ApiName,
    adapter: str,
    model: str | None,
    outline: SequenceOutline,
    tools: tuple[ToolDef, ...],
    envelope: Attrs,
    max_output_tokens: int | None,
    stream: bool,
) -> MessageSequence:
    """A sequence whose messages are built from ``outline`` when first read."""
    seq = _new(MessageSequence)
    _set(seq, "schema_version", SCHEMA_VERSION)
    _set(seq, "api", api)
    _set(seq, "adapter", adapter)
    _set(seq, "model", model)
    _set(seq, "tools", tools)
    _set(seq, "envelope", envelope)
    _set(seq, "max_output_tokens", max_output_tokens)
    _set(seq, "stream", stream)
    _set(seq, "history", "complete")
    _set(seq, "normalizations", ())
    _set(seq, "_outline", outline)
    return seq
