"""Wire-API adapters: pure codecs between each provider API and the message graph."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from turngate.adapters.base import Adapter
from turngate.graph.model import ApiName

_MODULES: dict[str, str] = {
    "openai_chat": "turngate.adapters.openai_chat",
    "openai_responses": "turngate.adapters.openai_responses",
    "anthropic": "turngate.adapters.anthropic",
    "gemini": "turngate.adapters.gemini",
}
API_NAMES: tuple[ApiName, ...] = ("openai_chat", "openai_responses", "anthropic", "gemini")


def get_adapter(api: str) -> Adapter:
    """The adapter for ``api``; ``KeyError`` for an unknown name, ``ImportError`` if not built."""
    module = importlib.import_module(_MODULES[api])
    adapter: Adapter = module.ADAPTER
    return adapter


def available_apis() -> list[str]:
    out = []
    for api, module in _MODULES.items():
        try:
            importlib.import_module(module)
        except ModuleNotFoundError:
            continue
        out.append(api)
    return out


_ANTHROPIC_BLOCKS = frozenset(
    {"tool_use", "tool_result", "thinking", "redacted_thinking", "server_tool_use", "document"}
)
_OPENAI_CHAT_HINTS = frozenset(
    {"max_completion_tokens", "stream_options", "n", "response_format", "logprobs", "seed"}
)


def detect_api(body: Mapping[str, Any]) -> ApiName | None:
    """Guess which API a request body is written for, from its shape alone."""
    if "contents" in body:
        return "gemini"
    if "input" in body or "instructions" in body or "previous_response_id" in body:
        return "openai_responses"
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    if "system" in body or "stop_sequences" in body or "thinking" in body:
        return "anthropic"
    if _OPENAI_CHAT_HINTS & body.keys():
        return "openai_chat"
    for message in messages:
        if not isinstance(message, dict):
            continue
        if message.get("role") in ("system", "developer", "tool") or "tool_calls" in message:
            return "openai_chat"
        content = message.get("content")
        if isinstance(content, list):
            for part in content:
                kind = part.get("type") if isinstance(part, dict) else None
                if not isinstance(kind, str):
                    continue
                if kind in _ANTHROPIC_BLOCKS or (kind == "image" and "source" in part):
                    return "anthropic"
                if kind in ("image_url", "input_audio", "refusal"):
                    return "openai_chat"
    return "anthropic" if "max_tokens" in body and "model" in body else "openai_chat"
