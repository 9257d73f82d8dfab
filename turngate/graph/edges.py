"""Tool edges: each tool call paired with the result that answers it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from turngate.graph.model import MessageSequence, ToolEdge


def build_edges(seq: MessageSequence) -> tuple[ToolEdge, ...]:
    """Pair each call with the first later result carrying its call id.

    This describes the graph; whether each pairing sits where the API allows is the
    validator's question.
    """
    from turngate.graph.model import ToolCallBlock, ToolEdge, ToolResultBlock

    edges: list[ToolEdge] = []
    open_calls: dict[str, list[int]] = {}
    for _message, block in seq.blocks():
        if isinstance(block, ToolCallBlock):
            tool = seq.tool(block.name)
            open_calls.setdefault(block.call_id, []).append(len(edges))
            edges.append(
                ToolEdge(
                    call_id=block.call_id,
                    tool_name=block.name,
                    schema_digest=tool.schema_digest if tool else None,
                    argument_state=block.argument_state,
                    call_block_id=block.id,
                )
            )
        elif isinstance(block, ToolResultBlock):
            waiting = open_calls.get(block.call_id)
            if waiting:
                position = waiting.pop(0)
                edge = edges[position]
                edges[position] = ToolEdge(
                    call_id=edge.call_id,
                    tool_name=edge.tool_name,
                    schema_digest=edge.schema_digest,
                    argument_state=edge.argument_state,
                    call_block_id=edge.call_block_id,
                    result_block_id=block.id,
                    result_status=block.status,
                )
    return tuple(edges)
