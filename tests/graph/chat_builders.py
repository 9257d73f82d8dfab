"""Small builders for OpenAI Chat request bodies used across the graph tests."""

from __future__ import annotations

from typing import Any

import orjson

from tests.fixtures_dir import FIXTURES_DIR, FIXTURES_PRESENT


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def system(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


def assistant(text: str | None = None, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    return message


def call(
    call_id: str, name: str = "get_weather", arguments: str = '{"city":"Paris"}'
) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def tool(call_id: str, content: str = "sunny") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def body(*messages: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": "gpt-4o",
        "messages": list(messages),
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
            }
        ],
    }


def streamed_chat_arguments(relative: str) -> list[str]:
    """The tool-call argument strings a recorded Chat stream carries, joined per call index."""
    if not FIXTURES_PRESENT:
        return []
    joined: dict[int, str] = {}
    for line in (FIXTURES_DIR / relative).read_bytes().splitlines():
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = orjson.loads(line[6:])
        for choice in chunk.get("choices", []):
            for fragment in (choice.get("delta") or {}).get("tool_calls") or []:
                piece = (fragment.get("function") or {}).get("arguments") or ""
                joined[fragment["index"]] = joined.get(fragment["index"], "") + piece
    return [joined[i] for i in sorted(joined)]
