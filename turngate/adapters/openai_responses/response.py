"""OpenAI Responses response bodies (`object: "response"`) -> AssistantTurn."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turngate.adapters.openai_responses.items import ItemParser
from turngate.errors import UpstreamProtocolError
from turngate.graph.model import AnyBlock
from turngate.graph.turn import AssistantTurn, Usage

# Statuses of a response that is still running (background mode): no stop reason yet.
RUNNING = frozenset({"queued", "in_progress"})


def parse_response(body: Mapping[str, Any]) -> AssistantTurn:
    output = body.get("output")
    if body.get("object", "response") != "response" or not isinstance(output, list):
        raise UpstreamProtocolError("Responses body is not a response object with an output list")
    parser = ItemParser("output")
    blocks: list[AnyBlock] = []
    for index, item in enumerate(output):
        blocks.extend(parser.item(index, item).blocks)
    handle, model, usage = body.get("id"), body.get("model"), body.get("usage")
    return AssistantTurn(
        handle=handle if isinstance(handle, str) else None,
        model=model if isinstance(model, str) else None,
        blocks=tuple(blocks),
        stop_reason=stop_reason(body),
        usage=_usage(usage) if isinstance(usage, dict) else None,
    )


def stop_reason(body: Mapping[str, Any]) -> str | None:
    """``status``; for an incomplete response, why (``max_output_tokens``, ``content_filter``)."""
    status = body.get("status")
    if not isinstance(status, str) or status in RUNNING:
        return None
    details = body.get("incomplete_details")
    if status == "incomplete" and isinstance(details, dict):
        reason = details.get("reason")
        if isinstance(reason, str):
            return reason
    return status


def _usage(usage: Mapping[str, Any]) -> Usage:
    def number(key: str) -> int | None:
        value = usage.get(key)
        return value if isinstance(value, int) else None

    return Usage(
        input_tokens=number("input_tokens"),
        output_tokens=number("output_tokens"),
        total_tokens=number("total_tokens"),
    )
