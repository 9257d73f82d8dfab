"""The tools an Anthropic request offers: those it declares, and those its messages define
inline (a ``tool_addition`` with a ``tool_definition``, the inline-tools beta)."""

from __future__ import annotations

from turngate.adapters.anthropic.request import parse_tool
from turngate.graph.model import ITEM_NOTE, CompressionBlock, MessageSequence, ToolDef


def callable_tools(seq: MessageSequence) -> dict[str, ToolDef]:
    """Tool name -> its definition; one defined inline later wins over an earlier one. A
    ``tool_removal`` is the model's to honour: a call to a removed tool is still checked
    against its schema, not refused."""
    found = {tool.name: tool for tool in seq.tools}
    for _message, block in seq.blocks():
        if not isinstance(block, CompressionBlock) or block.attrs.get(ITEM_NOTE) != "tool_addition":
            continue
        tool = block.attrs.get("tool")
        if isinstance(tool, dict) and tool.get("type") == "tool_definition":
            defined = parse_tool(tool.get("definition"))
            found[defined.name] = defined
    return found
