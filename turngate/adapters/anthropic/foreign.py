"""Rendering a graph parsed from another API as an Anthropic Messages request.

Only modelled fields are used: a foreign graph's attrs and envelope belong to its own API.
``fit_foreign`` first makes the graph sendable and records every change on it as a
``Normalization``: ``fit_to`` refuses what Anthropic cannot carry, puts each turn's results
into one user message ahead of any other block, and rewrites call ids Anthropic refuses;
then empty text blocks (which Anthropic refuses) are dropped and a ``cancel`` result is sent
as an error result. Leading instructions become the top-level ``system``; later ones a
``system`` message.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from turngate.adapters.anthropic import blocks
from turngate.errors import UnsupportedInTarget
from turngate.graph.capabilities import Capabilities
from turngate.graph.codec import arguments_value
from turngate.graph.model import (
    AnyBlock,
    CompressionBlock,
    FileBlock,
    ImageBlock,
    Message,
    MessageSequence,
    Normalization,
    ReasoningBlock,
    ServerToolBlock,
    SnippetBlock,
    TextBlock,
    ToolCallBlock,
    ToolDef,
    ToolResultBlock,
)
from turngate.graph.normalize import fit_to, result_text

# Anthropic requires ``max_tokens``; a graph from an API where it is optional gets this.
DEFAULT_MAX_TOKENS = 4096
_EMPTY_SCHEMA = {"type": "object", "properties": {}}
_INSTRUCTIONS = ("system", "developer")


def render_foreign(seq: MessageSequence, caps: Capabilities) -> dict[str, Any]:
    fitted = fit_foreign(seq, caps)
    body: dict[str, Any] = {
        "model": seq.model or "",
        "max_tokens": seq.max_output_tokens or DEFAULT_MAX_TOKENS,
    }
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    for message in fitted.messages:
        if message.role in _INSTRUCTIONS and not messages:
            system.extend(_block(b, message) for b in message.blocks)
        elif message.role in _INSTRUCTIONS:
            messages.append({"role": "system", "content": _content(message)})
        else:
            role = "assistant" if message.role == "assistant" else "user"
            messages.append({"role": role, "content": _content(message)})
    if system:
        only_text = len(system) == 1 and system[0]["type"] == "text"
        body["system"] = system[0]["text"] if only_text else system
    body["messages"] = messages
    if fitted.tools:
        body["tools"] = [_tool(t) for t in fitted.tools]
    if seq.stream:
        body["stream"] = True
    return body


def fit_foreign(seq: MessageSequence, caps: Capabilities) -> MessageSequence:
    """``seq`` as it will be sent to Anthropic, each change recorded as a normalization."""
    fitted = fit_to(seq, caps)
    notes = list(fitted.normalizations)
    messages: list[Message] = []
    for message in fitted.messages:
        blocks: list[AnyBlock] = []
        for block in message.blocks:
            if isinstance(block, TextBlock) and block.text == "":
                notes.append(
                    Normalization(
                        rule="empty_text_dropped",
                        block_id=block.id,
                        detail=f"an empty text block ({message.location}) is not sent: "
                        "Anthropic refuses empty text blocks",
                    )
                )
                continue
            if isinstance(block, ToolResultBlock) and block.status == "cancel":
                notes.append(
                    Normalization(
                        rule="result_status_mapped",
                        block_id=block.id,
                        detail=f"cancelled tool result '{block.call_id}' is sent as an error "
                        "result (is_error): Anthropic has no cancelled status",
                    )
                )
                blocks.append(dataclasses.replace(block, status="error"))
                continue
            blocks.append(block)
        if blocks:
            messages.append(dataclasses.replace(message, blocks=tuple(blocks)))
    return dataclasses.replace(fitted, messages=tuple(messages), normalizations=tuple(notes))


def _content(message: Message) -> Any:
    if len(message.blocks) == 1 and isinstance(message.blocks[0], TextBlock):
        return message.blocks[0].text
    return [_block(b, message) for b in message.blocks]


def _block(block: AnyBlock, message: Message) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ImageBlock | FileBlock):
        return _media(block, message)
    if isinstance(block, SnippetBlock):
        return {
            "type": "search_result",
            "source": block.source or "",
            "title": block.title or "",
            "content": [{"type": "text", "text": block.text}],
        }
    if isinstance(block, ToolCallBlock):
        return _call(block, message)
    if isinstance(block, ToolResultBlock):
        return _result(block, message)
    if isinstance(block, ReasoningBlock | ServerToolBlock | CompressionBlock):
        # fit_to let these through only when made by Anthropic: their attrs are Anthropic's.
        rendered: dict[str, Any] = blocks.render_block(block)
        return rendered
    raise _unsupported(block, message, f"a {block.kind} block")


def _media(block: ImageBlock | FileBlock, message: Message) -> dict[str, Any]:
    kind = "image" if isinstance(block, ImageBlock) else "document"
    source: dict[str, Any]
    if block.source == "url":
        source = {"type": "url", "url": block.data}
    elif block.source == "base64" and block.media_type is not None:
        if kind == "document" and block.media_type != "application/pdf":
            raise _unsupported(block, message, f"a {block.media_type} document as base64")
        source = {"type": "base64", "media_type": block.media_type, "data": block.data}
    elif block.source == "text" and kind == "document":
        source = {
            "type": "text",
            "media_type": block.media_type or "text/plain",
            "data": block.data,
        }
    elif block.source == "file":
        raise _unsupported(block, message, f"a {block.kind} given by another provider's file id")
    else:
        raise _unsupported(block, message, f"a {block.kind} block with {block.source} data")
    out: dict[str, Any] = {"type": kind, "source": source}
    if isinstance(block, FileBlock) and block.filename is not None:
        out["title"] = block.filename
    return out


def _call(call: ToolCallBlock, message: Message) -> dict[str, Any]:
    arguments: Any = None
    if call.tool_type == "function":
        arguments = arguments_value(call.arguments)
    if not isinstance(arguments, dict):
        what = "a free-form (custom) tool call" if call.tool_type == "custom" else "a tool call"
        raise _unsupported(
            call, message, f"{what} '{call.call_id}' whose arguments are not one JSON object"
        )
    return {"type": "tool_use", "id": call.call_id, "name": call.name, "input": arguments}


def _result(result: ToolResultBlock, message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": result.call_id}
    parts = result.content
    if len(parts) == 1 and isinstance(parts[0], TextBlock):
        out["content"] = parts[0].text
    elif parts:
        out["content"] = [_block(p, message) for p in parts]
    elif result.value is not None:
        out["content"] = result_text(result)
    if result.status == "error":
        out["is_error"] = True
    return out


def _tool(tool: ToolDef) -> dict[str, Any]:
    if tool.tool_type != "function":
        raise UnsupportedInTarget(
            f"turngate: {tool.tool_type} tool '{tool.name}' cannot be offered to anthropic; "
            "it is refused rather than dropped"
        )
    parameters = tool.parameters if isinstance(tool.parameters, dict) else _EMPTY_SCHEMA
    out: dict[str, Any] = {"name": tool.name, "input_schema": parameters}
    if tool.description is not None:
        out["description"] = tool.description
    return out


def _unsupported(block: AnyBlock, message: Message, what: str) -> UnsupportedInTarget:
    return UnsupportedInTarget(
        f"turngate: {what} (block '{block.id}', {message.location}) cannot be sent to "
        "anthropic; it is refused rather than dropped"
    )
