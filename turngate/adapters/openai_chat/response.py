"""OpenAI Chat Completions response bodies -> AssistantTurn."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turngate.adapters.openai_chat.request import OrderCounter, parse_message, render_message
from turngate.errors import UpstreamProtocolError
from turngate.graph.model import Message
from turngate.graph.rules.answers import UNSUPPORTED, several_answers
from turngate.graph.turn import AssistantTurn, Usage


def parse_response(body: Mapping[str, Any]) -> AssistantTurn:
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise UpstreamProtocolError("chat completion has no choices")
    choice = choices[0]
    native = choice.get("message")
    if not isinstance(native, dict):
        raise UpstreamProtocolError("chat completion choice has no message")
    if native.get("function_call"):
        # As a stream refuses it: a call turngate cannot check is never delivered.
        raise UpstreamProtocolError(
            "chat answer carries 'function_call', which turngate does not model",
            rule="unknown_kind",
        )
    for other in choices[1:]:
        if isinstance(other, dict) and _calls_tools(other.get("message")):
            raise UpstreamProtocolError(
                several_answers("the answer holds several choices with tool calls (n > 1)"),
                rule=UNSUPPORTED,
            )
    message = parse_message(0, native, OrderCounter())
    usage = body.get("usage")
    handle, model = body.get("id"), body.get("model")
    finish = choice.get("finish_reason")
    return AssistantTurn(
        handle=handle if isinstance(handle, str) else None,
        model=model if isinstance(model, str) else None,
        blocks=message.blocks,
        stop_reason=finish if isinstance(finish, str) else None,
        usage=_usage(usage) if isinstance(usage, dict) else None,
    )


def _usage(usage: Mapping[str, Any]) -> Usage:
    def number(key: str) -> int | None:
        value = usage.get(key)
        return value if isinstance(value, int) else None

    return Usage(
        input_tokens=number("prompt_tokens"),
        output_tokens=number("completion_tokens"),
        total_tokens=number("total_tokens"),
    )


def history_message(message: Message) -> dict[str, Any]:
    """The assistant message a client sends back in its next request for this turn."""
    return render_message(message)


def _calls_tools(message: Any) -> bool:
    return isinstance(message, dict) and bool(
        message.get("tool_calls") or message.get("function_call")
    )
