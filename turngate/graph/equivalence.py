"""When two graphs say the same thing, whichever API they were parsed from.

``semantic_view`` flattens a graph to what a model would read: roles (system and
developer are both instructions), block kinds, texts, tool calls with their arguments as
JSON values and results as their payload, and call ids replaced by their order of first
appearance (targets may rewrite ids). Native extras (attrs), ids and shapes are left out.
"""

from __future__ import annotations

from typing import Any

import orjson

from turngate.graph.model import (
    AnyBlock,
    AudioBlock,
    FileBlock,
    ImageBlock,
    MessageSequence,
    RefusalBlock,
    SnippetBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from turngate.graph.normalize import result_text

_ROLE_CLASS = {
    "system": "instructions",
    "developer": "instructions",
    "user": "user",
    "tool": "tool",
    "assistant": "assistant",
}


def semantic_view(seq: MessageSequence) -> list[tuple[Any, ...]]:
    call_numbers: dict[str, int] = {}
    view: list[tuple[Any, ...]] = []
    for _message, block in seq.blocks():
        view.append(_view(block, call_numbers))
    return view


def _number(call_id: str, numbers: dict[str, int]) -> str:
    return f"call#{numbers.setdefault(call_id, len(numbers))}"


def _view(block: AnyBlock, numbers: dict[str, int]) -> tuple[Any, ...]:
    role = _ROLE_CLASS[block.role]
    if isinstance(block, TextBlock | RefusalBlock):
        return (role, block.kind, block.text)
    if isinstance(block, ImageBlock | AudioBlock | FileBlock):
        return (role, block.kind, block.data)
    if isinstance(block, SnippetBlock):
        return (role, block.kind, block.text, block.source)
    if isinstance(block, ToolCallBlock):
        arguments: Any = block.arguments
        if block.tool_type == "function":
            arguments = orjson.loads(block.arguments) if block.arguments.strip() else {}
        return (role, block.kind, _number(block.call_id, numbers), block.name, arguments)
    if isinstance(block, ToolResultBlock):
        status = "error" if block.status == "error" else "ok"
        view: tuple[Any, ...] = (
            "tool",
            block.kind,
            _number(block.call_id, numbers),
            status,
            result_text(block),
        )
        if any(not isinstance(p, TextBlock) for p in block.content):
            # A result carrying media (Anthropic: images, documents): every part is read.
            view += tuple(_view(p, numbers) for p in block.content)
        return view
    return (role, block.kind, block.semantic())
