"""Anthropic content blocks <-> graph blocks, shared by requests and responses.

A block's unmodelled fields stay in its ``attrs`` as a remainder; keys starting with ``$``
there are this adapter's notes (how content was written), never sent. Server-tool blocks
(``server_tool_use``, ``mcp_tool_use``, every ``*_tool_result``, and ``container_upload``)
are provider-bound ``ServerToolBlock``s with their native fields in ``attrs``; ``thinking``
and ``redacted_thinking`` are ``ReasoningBlock``s kept byte-exact; ``search_result`` becomes
one ``SnippetBlock`` per text, scoped to the role it was admitted under.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any, cast

import orjson

from turngate.adapters.base import (
    UNTYPED_PART_FIX,
    default_trust,
    merged,
    remainder,
    with_hint,
    without_hint,
)
from turngate.errors import BadRequestBody
from turngate.graph.codec import arguments_value, json_type
from turngate.graph.model import (
    ITEM_NOTE,
    AnyBlock,
    ApiName,
    CompressionBlock,
    ContentBlock,
    FileBlock,
    ImageBlock,
    MediaSource,
    ReasoningBlock,
    Role,
    ServerToolBlock,
    SnippetBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    UnknownBlock,
    new_text_block,
    new_tool_call,
    new_tool_result,
)

API: ApiName = "anthropic"
SERVER_CALL_TYPES = frozenset({"server_tool_use", "mcp_tool_use"})
CONTAINER_UPLOAD = "container_upload"
# Blocks the provider puts in a turn that are neither a call nor a result, sent back as they
# came: a file handed to the code-execution container, the tools an MCP server listed, the
# point where a fallback model took over from one that declined.
PROVIDER_MARKS = frozenset({CONTAINER_UPLOAD, "mcp_tool_listing", "fallback"})
# A client's directive about the tools offered from that point on (the inline-tools beta):
# no part of the conversation itself, kept as it came, noted with its type (``ITEM_NOTE``),
# as the Responses adapter keeps ``configuration_update``.
TOOL_CHANGES = frozenset({"tool_addition", "tool_removal"})
# Blocks of Anthropic's own that a client's tool_result may hold, carried as they came: a
# client-run tool search's ``tool_reference`` (the provider loads the named tool, declared
# with ``defer_loading``) and a browser toolset member's ``browser_state`` (the provider
# renders the tabs for the model).
RESULT_ITEMS = frozenset({"tool_reference", "browser_state"})

_TEXT_FIELDS = frozenset({"type", "text"})
_MEDIA_FIELDS = frozenset({"type", "source"})
_THINKING_FIELDS = frozenset({"type", "thinking", "signature"})
_REDACTED_FIELDS = frozenset({"type", "data"})
_TOOL_USE_FIELDS = frozenset({"type", "id", "name", "input"})
_TOOL_RESULT_FIELDS = frozenset({"type", "tool_use_id", "content", "is_error"})
_SERVER_CALL_FIELDS = frozenset({"type", "id", "name"})
_SERVER_RESULT_FIELDS = frozenset({"type", "tool_use_id"})
_SEARCH_RESULT_FIELDS = frozenset({"type", "source", "title", "content"})
_COMPACTION_FIELDS = frozenset({"type", "encrypted_content"})
_TYPE_FIELD = frozenset({"type"})
# Adapter note on a compaction block without ``encrypted_content``: its fields are its attrs.
PLAIN_NOTE = "$plain"
_SOURCE_DATA = {"base64": "data", "url": "url", "file": "file_id", "text": "data"}


def is_server_result_type(kind: str) -> bool:
    """``web_search_tool_result``, ``code_execution_tool_result``… (never ``tool_result``)."""
    return kind.endswith("_tool_result") and kind != "tool_result"


class Absent:
    pass


ABSENT = Absent()


class BlockParser:
    """Native content blocks -> graph blocks, numbering ``order`` across the whole sequence."""

    def __init__(self) -> None:
        self._order = itertools.count()

    def common(self, block_id: str, role: Role) -> dict[str, Any]:
        return {
            "id": block_id,
            "role": role,
            "order": next(self._order),
            "trust": default_trust(role),
        }

    def block(self, block_id: str, role: Role, part: Any) -> list[AnyBlock]:
        """One native content block of a ``role`` message as graph blocks (several only for a
        ``search_result`` holding several texts: one snippet each, never joined)."""
        if not isinstance(part, dict):
            return [
                UnknownBlock(
                    native_type=type(part).__name__,
                    attrs={"$value": part},
                    **self.common(block_id, role),
                )
            ]
        kind = part.get("type")
        if kind == "tool_result":
            return [self._tool_result(block_id, part)]
        if kind == "tool_use":
            return [self._tool_use(block_id, role, part)]
        if kind in ("thinking", "redacted_thinking"):
            return [self._thinking(block_id, role, part)]
        if isinstance(kind, str) and (kind in SERVER_CALL_TYPES or kind in PROVIDER_MARKS):
            return [self._server_call(block_id, role, part, kind)]
        if isinstance(kind, str) and is_server_result_type(kind):
            return [self._server_result(block_id, role, part, kind)]
        if kind == "compaction":
            return [self._compaction(block_id, role, part)]
        if isinstance(kind, str) and kind in TOOL_CHANGES:
            attrs = {**part, ITEM_NOTE: kind}
            return [
                CompressionBlock(
                    provider=API, payload="", scope=role, attrs=attrs, **self.common(block_id, role)
                )
            ]
        if kind == "search_result":
            return list(self._search_result(block_id, role, part))
        return [self.content_part(block_id, role, part)]

    def _compaction(self, block_id: str, role: Role, part: dict[str, Any]) -> CompressionBlock:
        """A compaction: its ``encrypted_content`` is the payload; one without (a summary in
        ``content`` only, or null for a failed compaction the server treats as a no-op) has
        none, and keeps every field as it came (``PLAIN_NOTE``)."""
        encrypted = part.get("encrypted_content")
        if isinstance(encrypted, str):
            payload, attrs = encrypted, remainder(part, _COMPACTION_FIELDS)
        else:
            payload, attrs = "", {**remainder(part, _TYPE_FIELD), PLAIN_NOTE: True}
        return CompressionBlock(
            provider=API, payload=payload, scope=role, attrs=attrs, **self.common(block_id, role)
        )

    def content_part(self, block_id: str, role: Role, part: dict[str, Any]) -> AnyBlock:
        """Text, image, document: the kinds that may also sit inside a tool result."""
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            return new_text_block(
                id=block_id,
                role=role,
                order=next(self._order),
                trust=default_trust(role),
                text=part["text"],
                attrs=remainder(part, _TEXT_FIELDS),
            )
        if kind in ("image", "document"):
            media = self._media(block_id, role, part, kind)
            if media is not None:
                return media
        return UnknownBlock(
            native_type=_native_type(part),
            attrs=with_hint(dict(part), _part_hint(part)),
            **self.common(block_id, role),
        )

    def _media(self, block_id: str, role: Role, part: dict[str, Any], kind: str) -> AnyBlock | None:
        source = part.get("source")
        if not isinstance(source, dict):
            return None
        source_type = source.get("type")
        key = _SOURCE_DATA.get(source_type) if isinstance(source_type, str) else None
        if key is None or not isinstance(source.get(key), str):
            return None
        if kind == "image" and source_type == "text":
            return None
        media_type = source.get("media_type")
        attrs = remainder(part, _MEDIA_FIELDS)
        attrs["source"] = remainder(source, frozenset({"type", key, "media_type"}))
        if media_type is not None and not isinstance(media_type, str):
            attrs["source"]["media_type"] = media_type
            media_type = None
        common = self.common(block_id, role)
        data = source[key]
        media_source = cast(MediaSource, source_type)
        if kind == "image":
            return ImageBlock(
                source=media_source, data=data, media_type=media_type, attrs=attrs, **common
            )
        return FileBlock(
            source=media_source, data=data, media_type=media_type, attrs=attrs, **common
        )

    def _search_result(self, block_id: str, role: Role, part: dict[str, Any]) -> list[AnyBlock]:
        content, source, title = part.get("content"), part.get("source"), part.get("title")
        texts = content if isinstance(content, list) else None
        if (
            not texts
            or not isinstance(source, str)
            or not isinstance(title, str)
            or not all(
                isinstance(t, dict) and t.get("type") == "text" and isinstance(t.get("text"), str)
                for t in texts
            )
        ):
            return [
                UnknownBlock(
                    native_type="search_result", attrs=dict(part), **self.common(block_id, role)
                )
            ]
        out: list[AnyBlock] = []
        for k, text in enumerate(texts):
            attrs: dict[str, Any] = (
                remainder(part, _SEARCH_RESULT_FIELDS) if k == 0 else {"$continues": True}
            )
            extra = remainder(text, _TEXT_FIELDS)
            if extra:
                attrs["$text"] = extra
            out.append(
                SnippetBlock(
                    text=text["text"],
                    scope=role,
                    source=source,
                    title=title,
                    attrs=attrs,
                    **self.common(block_id if k == 0 else f"{block_id}.c{k}", role),
                )
            )
        return out

    def _tool_use(self, block_id: str, role: Role, part: dict[str, Any]) -> AnyBlock:
        call_id, name, arguments = part.get("id"), part.get("name"), part.get("input", ABSENT)
        if not isinstance(name, str):
            return UnknownBlock(
                native_type="tool_use", attrs=dict(part), **self.common(block_id, role)
            )
        if isinstance(arguments, dict):
            # An object's dump is one JSON object: the call is complete.
            return new_tool_call(
                id=block_id,
                order=next(self._order),
                call_id=call_id if isinstance(call_id, str) else "",
                name=name,
                arguments=_dumps(arguments),
                attrs=remainder(part, _TOOL_USE_FIELDS),
                role=role,
                trust=default_trust(role),
            )
        # ``input`` must be an object. Anything else (often a JSON string cut off by a broken
        # gateway) is kept as sent and marked incomplete, so the call never runs.
        attrs = with_hint(remainder(part, _TOOL_USE_FIELDS - {"input"}), _input_hint(arguments))
        return ToolCallBlock(
            call_id=call_id if isinstance(call_id, str) else "",
            name=name,
            arguments=arguments if isinstance(arguments, str) else "",
            argument_state="incomplete",
            attrs=attrs,
            **self.common(block_id, role),
        )

    def _tool_result(self, block_id: str, part: dict[str, Any]) -> AnyBlock:
        call_id = part.get("tool_use_id")
        attrs = remainder(part, _TOOL_RESULT_FIELDS)
        is_error = part.get("is_error", ABSENT)
        if not isinstance(is_error, Absent) and not isinstance(is_error, bool):
            attrs["is_error"] = is_error
        elif is_error is False:
            attrs["$is_error"] = False
        content = part.get("content", ABSENT)
        parts: list[AnyBlock] = []
        if isinstance(content, str):
            attrs["$content"] = "string"
            parts.append(
                new_text_block(
                    id=f"{block_id}.c0",
                    role="tool",
                    order=next(self._order),
                    trust=default_trust("tool"),
                    text=content,
                )
            )
        elif isinstance(content, list):
            for k, item in enumerate(content):
                parts.extend(self._result_part(f"{block_id}.c{k}", item))
        elif isinstance(content, Absent):
            attrs["$content"] = "absent"
        else:
            attrs["content"] = content
            attrs["$content"] = "absent"
            if content is not None:
                # Named as the part it is not; rendered back from attrs all the same.
                parts.append(self._opaque_result(f"{block_id}.c0", content))
        return new_tool_result(
            id=block_id,
            role="tool",
            order=next(self._order),
            trust=default_trust("tool"),
            call_id=call_id if isinstance(call_id, str) else "",
            content=cast(tuple[ContentBlock, ...], tuple(parts)),
            attrs=attrs,
            status="error" if is_error is True else "success",
        )

    def _opaque_result(self, block_id: str, content: Any) -> AnyBlock:
        kind = json_type(content)
        hint = (
            f"tool_result content must be a string or a list of blocks, not a JSON {kind}; "
            'Anthropic: "tool_result.content: Input should be a valid string" (send the '
            "tool's result as text: json.dumps of it)"
        )
        return UnknownBlock(
            native_type=f"content:{kind}",
            attrs=with_hint({"$value": content}, hint),
            **self.common(block_id, "tool"),
        )

    def _result_part(self, block_id: str, item: Any) -> list[AnyBlock]:
        if isinstance(item, dict) and item.get("type") == "search_result":
            return self._search_result(block_id, "tool", item)
        if isinstance(item, dict) and (kind := item.get("type")) in RESULT_ITEMS:
            attrs = {**item, ITEM_NOTE: kind}
            common = self.common(block_id, "tool")
            return [CompressionBlock(provider=API, payload="", scope="tool", attrs=attrs, **common)]
        if isinstance(item, dict):
            return [self.content_part(block_id, "tool", item)]
        return [
            UnknownBlock(
                native_type=type(item).__name__,
                attrs={"$value": item},
                **self.common(block_id, "tool"),
            )
        ]

    def _thinking(self, block_id: str, role: Role, part: dict[str, Any]) -> AnyBlock:
        common = self.common(block_id, role)
        if part.get("type") == "redacted_thinking":
            data = part.get("data")
            if isinstance(data, str):
                return ReasoningBlock(
                    provider=API,
                    payload=data,
                    redacted=True,
                    attrs=remainder(part, _REDACTED_FIELDS),
                    **common,
                )
            return UnknownBlock(native_type="redacted_thinking", attrs=dict(part), **common)
        text, signature = part.get("thinking"), part.get("signature")
        if not isinstance(text, str):
            return UnknownBlock(native_type="thinking", attrs=dict(part), **common)
        attrs = remainder(part, _THINKING_FIELDS)
        if "signature" in part and not isinstance(signature, str):
            attrs["signature"] = signature
        return ReasoningBlock(
            provider=API,
            text=text,
            signature=signature if isinstance(signature, str) else None,
            attrs=attrs,
            **common,
        )

    def _server_call(self, block_id: str, role: Role, part: dict[str, Any], kind: str) -> AnyBlock:
        """``server_tool_use``/``mcp_tool_use``, and the provider's marks (``PROVIDER_MARKS``:
        no call id, every field kept)."""
        common = self.common(block_id, role)
        if kind in PROVIDER_MARKS:
            attrs = remainder(part, frozenset({"type"}))
            return ServerToolBlock(provider=API, name=kind, phase="call", attrs=attrs, **common)
        call_id, name = part.get("id"), part.get("name")
        if not isinstance(call_id, str) or not isinstance(name, str):
            return UnknownBlock(native_type=kind, attrs=dict(part), **common)
        attrs = remainder(part, _SERVER_CALL_FIELDS)
        if kind != "server_tool_use":
            attrs["$type"] = kind
        return ServerToolBlock(
            provider=API, name=name, phase="call", call_id=call_id, attrs=attrs, **common
        )

    def _server_result(
        self, block_id: str, role: Role, part: dict[str, Any], kind: str
    ) -> AnyBlock:
        call_id = part.get("tool_use_id")
        if not isinstance(call_id, str):
            return UnknownBlock(native_type=kind, attrs=dict(part), **self.common(block_id, role))
        return ServerToolBlock(
            provider=API,
            name=kind,
            phase="result",
            call_id=call_id,
            attrs=remainder(part, _SERVER_RESULT_FIELDS),
            **self.common(block_id, role),
        )


def _input_hint(arguments: object) -> str:
    """The fix for a ``tool_use`` whose ``input`` is not an object: often the arguments as
    OpenAI writes them, a JSON string (claude-code #6695)."""
    if isinstance(arguments, Absent):
        return (
            'its input is missing; Anthropic: "tool_use.input: Field required" (send {} for none)'
        )
    return (
        f"its input is a JSON {json_type(arguments)}, not an object; Anthropic: "
        '"tool_use.input: Input should be a valid dictionary" (send the arguments as an object: '
        "json.loads of a string)"
    )


def _part_hint(part: dict[str, Any]) -> str | None:
    """The usual fix for a block of no kind turngate reads: one without its type, or text
    without its text."""
    if "type" not in part:
        return f"the block has no type {UNTYPED_PART_FIX}"
    kind = part.get("type")
    if kind == "text" and not isinstance(part.get("text"), str):
        return f"a text block's text must be a string, not a JSON {json_type(part.get('text'))}"
    if isinstance(kind, str) and kind in _FOREIGN_BLOCKS:
        return (
            f"Anthropic: \"Input tag '{kind}' found using 'type' does not match any of the "
            f"expected tags: 'text', 'image', 'document', …\" ({_FOREIGN_BLOCKS[kind]})"
        )
    return None


_AS_TEXT = "type it 'text'"
_AS_IMAGE = (
    'send it as {"type": "image", "source": {"type": "base64", ...} or {"type": "url", ...}}'
)
_AS_DOCUMENT = 'send it as {"type": "document", "source": ...}'
_NO_REASONING = (
    "Claude takes back only the thinking blocks it answered with; another model's reasoning "
    "has no place in the history: leave it out"
)
_AS_CALL = "send a call as a tool_use block in the assistant message"
_AS_RESULT = "send a result as a tool_result block (its tool_use_id) in the next user message"
# Blocks of the other APIs, in a history carried over from another provider (or a framework's
# own), and what Anthropic takes for each.
_FOREIGN_BLOCKS = {
    "input_text": _AS_TEXT,
    "output_text": _AS_TEXT,
    "image_url": _AS_IMAGE,
    "input_image": _AS_IMAGE,
    "file": _AS_DOCUMENT,
    "input_file": _AS_DOCUMENT,
    "reasoning": _NO_REASONING,
    "function_call": _AS_CALL,
    "functionCall": _AS_CALL,
    "function_call_output": _AS_RESULT,
    "functionResponse": _AS_RESULT,
}


def _native_type(part: dict[str, Any]) -> str:
    kind = part.get("type")
    source = part.get("source")
    if kind in ("image", "document") and isinstance(source, dict):
        return f"{kind}(source={source.get('type')})"
    return str(kind)


# --- rendering ---------------------------------------------------------------------------


def render_blocks(blocks: tuple[AnyBlock, ...] | list[AnyBlock]) -> list[Any]:
    """Content blocks, joining the snippets a parsed ``search_result`` was split into."""
    out: list[Any] = []
    for block in blocks:
        if isinstance(block, SnippetBlock) and block.attrs.get("$continues") and out:
            previous = out[-1]
            if isinstance(previous, dict) and previous.get("type") == "search_result":
                previous["content"].append(_snippet_text(block))
                continue
        out.append(render_block(block))
    return out


def render_block(block: AnyBlock) -> Any:
    attrs = native_fields(block.attrs)
    if isinstance(block, TextBlock):
        return merged({"type": "text", "text": block.text}, attrs)
    if isinstance(block, ImageBlock | FileBlock):
        kind = "image" if isinstance(block, ImageBlock) else "document"
        source: dict[str, Any] = {"type": block.source, _SOURCE_DATA[block.source]: block.data}
        if block.media_type is not None:
            source["media_type"] = block.media_type
        return merged({"type": kind, "source": source}, attrs)
    if isinstance(block, SnippetBlock):
        native = {
            "type": "search_result",
            "source": block.source,
            "title": block.title,
            "content": [_snippet_text(block)],
        }
        return merged(native, attrs)
    if isinstance(block, ReasoningBlock):
        if block.redacted:
            return merged({"type": "redacted_thinking", "data": block.payload}, attrs)
        thinking: dict[str, Any] = {"type": "thinking", "thinking": block.text}
        if block.signature is not None:
            thinking["signature"] = block.signature
        return merged(thinking, attrs)
    if isinstance(block, ToolCallBlock):
        call: dict[str, Any] = {"type": "tool_use", "id": block.call_id, "name": block.name}
        if block.argument_state == "complete":
            call["input"] = arguments_value(block.arguments)
        # An incomplete call keeps whatever ``input`` it was sent with in its remainder.
        return merged(call, attrs)
    if isinstance(block, ToolResultBlock):
        return _render_result(block)
    if isinstance(block, ServerToolBlock):
        return _render_server_block(block)
    if isinstance(block, CompressionBlock):
        if ITEM_NOTE in block.attrs:
            return attrs
        if block.attrs.get(PLAIN_NOTE):
            return merged({"type": "compaction"}, attrs)
        return merged({"type": "compaction", "encrypted_content": block.payload}, attrs)
    if isinstance(block, UnknownBlock):
        return block.attrs["$value"] if "$value" in block.attrs else without_hint(block.attrs)
    raise BadRequestBody(f"block kind {block.kind} cannot be an Anthropic content block")


def _snippet_text(block: SnippetBlock) -> dict[str, Any]:
    extra = block.attrs.get("$text")
    return merged({"type": "text", "text": block.text}, extra if isinstance(extra, dict) else {})


def _render_result(block: ToolResultBlock) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.call_id}
    shape = block.attrs.get("$content")
    if shape == "string" and len(block.content) == 1 and isinstance(block.content[0], TextBlock):
        out["content"] = block.content[0].text
    elif shape != "absent":
        out["content"] = render_blocks(block.content)
    if block.status != "success":
        out["is_error"] = True
    elif block.attrs.get("$is_error") is False:
        out["is_error"] = False
    return merged(out, native_fields(block.attrs))


def _render_server_block(block: ServerToolBlock) -> dict[str, Any]:
    attrs = native_fields(block.attrs)
    if block.name in PROVIDER_MARKS and block.call_id is None:
        return merged({"type": block.name}, attrs)
    if block.phase == "call":
        kind = block.attrs.get("$type", "server_tool_use")
        return merged({"type": kind, "id": block.call_id, "name": block.name}, attrs)
    return merged({"type": block.name, "tool_use_id": block.call_id}, attrs)


def native_fields(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The native fields of a remainder: adapter notes (``$…``) left out."""
    return {k: v for k, v in attrs.items() if not k.startswith("$")}


def _dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError as exc:  # nested deeper than orjson writes (254 levels)
        raise BadRequestBody(
            f"tool_use input cannot be written: {exc}", rule="json_too_deep"
        ) from exc
