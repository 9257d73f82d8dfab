"""Anthropic Messages response bodies (``{"type": "message", …}``) -> AssistantTurn."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turngate.adapters.anthropic.blocks import BlockParser, render_blocks
from turngate.errors import BadRequestBody, UpstreamProtocolError
from turngate.graph.model import AnyBlock
from turngate.graph.turn import AssistantTurn, Usage


def parse_response(body: Mapping[str, Any]) -> AssistantTurn:
    if body.get("type") != "message" or body.get("role", "assistant") != "assistant":
        raise UpstreamProtocolError("anthropic response body is not an assistant message")
    content = body.get("content")
    if not isinstance(content, list):
        raise UpstreamProtocolError("anthropic message has no content list")
    parser = BlockParser()
    blocks: list[AnyBlock] = []
    try:
        for j, part in enumerate(content):
            blocks.extend(parser.block(f"m0.b{j}", "assistant", part))
    except BadRequestBody as exc:
        # The block parser is shared with requests; here the upstream sent the bad block.
        raise UpstreamProtocolError(f"anthropic message: {exc.message}", rule=exc.rule) from exc
    handle, model, stop = body.get("id"), body.get("model"), body.get("stop_reason")
    usage = body.get("usage")
    return AssistantTurn(
        handle=handle if isinstance(handle, str) else None,
        model=model if isinstance(model, str) else None,
        blocks=tuple(blocks),
        stop_reason=stop if isinstance(stop, str) else None,
        usage=usage_of(usage) if isinstance(usage, Mapping) else None,
    )


def usage_of(usage: Mapping[str, Any]) -> Usage:
    """Anthropic counts cache reads and writes apart from ``input_tokens``; the graph's
    ``input_tokens`` is the whole prompt, as the other APIs count it."""

    def number(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) else 0

    uncached, output = usage.get("input_tokens"), usage.get("output_tokens")
    prompt = (
        number("input_tokens")
        + number("cache_creation_input_tokens")
        + number("cache_read_input_tokens")
        if isinstance(uncached, int)
        else None
    )
    out = output if isinstance(output, int) else None
    total = prompt + out if prompt is not None and out is not None else None
    return Usage(input_tokens=prompt, output_tokens=out, total_tokens=total)


def history_message(blocks: tuple[AnyBlock, ...] | list[AnyBlock]) -> dict[str, Any]:
    """The assistant message a client sends back in its next request for this turn."""
    return {"role": "assistant", "content": render_blocks(blocks)}
