"""Gemini generateContent response bodies -> AssistantTurn.

The turn is ``candidates[0].content``; ``responseId`` is the handle and ``modelVersion``
the model. A prompt blocked before generation has no candidates: its stop reason is
``promptFeedback.blockReason``. Output tokens count the thinking tokens too (Gemini's
``totalTokenCount`` is prompt + candidates + thoughts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turngate.adapters.gemini.parts import OrderCounter, Spelling
from turngate.adapters.gemini.request import parse_content, render_content
from turngate.errors import BadRequestBody, UpstreamProtocolError
from turngate.graph.model import Message
from turngate.graph.rules.answers import UNSUPPORTED, several_answers
from turngate.graph.turn import AssistantTurn, Usage


def parse_response(body: Mapping[str, Any]) -> AssistantTurn:
    spelling = Spelling()
    candidates = body.get(spelling.read(body, "candidates") or "")
    feedback = body.get(spelling.read(body, "promptFeedback") or "")
    handle = body.get(spelling.read(body, "responseId") or "")
    model = body.get(spelling.read(body, "modelVersion") or "")
    usage = body.get(spelling.read(body, "usageMetadata") or "")
    if isinstance(candidates, list) and any(_calls_tools(c) for c in candidates[1:]):
        raise UpstreamProtocolError(
            several_answers("the answer holds several candidates with function calls"),
            rule=UNSUPPORTED,
        )
    if isinstance(candidates, list) and candidates and isinstance(candidates[0], dict):
        candidate = candidates[0]
        content = candidate.get("content", {"role": "model", "parts": []})
        if not isinstance(content, dict):
            raise UpstreamProtocolError("gemini candidate content is not an object")
        try:
            message = parse_content(0, {"role": "model", **content}, OrderCounter())
        except BadRequestBody as exc:
            # The part parser is shared with requests; here the upstream sent the bad part.
            raise UpstreamProtocolError(f"gemini candidate: {exc.message}", rule=exc.rule) from exc
        if message.role != "assistant":
            # An unknown role, or no list of parts: the parser keeps either as an opaque
            # user message, which is no answer.
            role = content.get("role", "model")
            what = f"has role {role!r}" if role != "model" else "holds no list of parts"
            raise UpstreamProtocolError(f"gemini candidate content {what}")
        blocks = message.blocks
        reason = candidate.get(spelling.read(candidate, "finishReason") or "")
    elif isinstance(feedback, dict):
        blocks = ()
        reason = feedback.get(spelling.read(feedback, "blockReason") or "")
    else:
        raise UpstreamProtocolError("gemini response has neither candidates nor promptFeedback")
    return AssistantTurn(
        handle=handle if isinstance(handle, str) else None,
        model=model if isinstance(model, str) else None,
        blocks=blocks,
        stop_reason=reason if isinstance(reason, str) else None,
        usage=_usage(usage) if isinstance(usage, dict) else None,
    )


def _usage(usage: Mapping[str, Any]) -> Usage:
    def number(camel: str) -> int | None:
        value = usage.get(Spelling().read(usage, camel) or "")
        return value if isinstance(value, int) else None

    candidates, thoughts = number("candidatesTokenCount"), number("thoughtsTokenCount")
    output = (
        None if candidates is None and thoughts is None else (candidates or 0) + (thoughts or 0)
    )
    return Usage(
        input_tokens=number("promptTokenCount"),
        output_tokens=output,
        total_tokens=number("totalTokenCount"),
    )


def history_content(message: Message) -> dict[str, Any]:
    """The model content a client sends back in its next request for this turn."""
    rendered = render_content(message)
    assert isinstance(rendered, dict)
    return rendered


def _calls_tools(candidate: Any) -> bool:
    content = candidate.get("content") if isinstance(candidate, dict) else None
    parts = content.get("parts") if isinstance(content, dict) else None
    return isinstance(parts, list) and any(
        isinstance(p, dict) and ("functionCall" in p or "function_call" in p) for p in parts
    )
