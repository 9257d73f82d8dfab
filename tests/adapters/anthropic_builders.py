"""Anthropic Messages request bodies written the way the API takes them, for the tests."""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Any

from turngate.adapters.anthropic import ADAPTER, CAPABILITIES
from turngate.graph.model import MessageSequence
from turngate.graph.validator import Verdict, validate

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": value, **extra}


def tool_use(
    call_id: str, name: str = "get_weather", input: Any = None, **extra: Any
) -> dict[str, Any]:
    arguments = {"city": "Paris"} if input is None else input
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments, **extra}


def tool_result(call_id: str, content: Any = "sunny", **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content, **extra}


def thinking(value: str = "let me think", signature: str | None = "c2lnbmVk") -> dict[str, Any]:
    block: dict[str, Any] = {"type": "thinking", "thinking": value}
    if signature is not None:
        block["signature"] = signature
    return block


def server_tool_use(call_id: str, name: str = "web_search") -> dict[str, Any]:
    return {"type": "server_tool_use", "id": call_id, "name": name, "input": {"query": "news"}}


def web_search_result(call_id: str) -> dict[str, Any]:
    return {
        "type": "web_search_tool_result",
        "tool_use_id": call_id,
        "content": [
            {
                "type": "web_search_result",
                "title": "News",
                "url": "https://example.com/news",
                "encrypted_content": "RXhhbXBsZQ==",
            }
        ],
    }


def user(*content: Any) -> dict[str, Any]:
    """A user message; one string argument is sent as string content."""
    if len(content) == 1 and isinstance(content[0], str):
        return {"role": "user", "content": content[0]}
    return {"role": "user", "content": list(content)}


def assistant(*content: Any) -> dict[str, Any]:
    if len(content) == 1 and isinstance(content[0], str):
        return {"role": "assistant", "content": content[0]}
    return {"role": "assistant", "content": list(content)}


def body(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "messages": list(messages),
        "tools": [WEATHER_TOOL],
        **extra,
    }


def parse(request: dict[str, Any]) -> MessageSequence:
    return ADAPTER.parse_request(request)


def verdict_of(request: dict[str, Any]) -> Verdict:
    return validate(parse(request), CAPABILITIES)


def scanned_pdf(pages: int, image_bytes: int) -> bytes:
    """A PDF as a scanner writes one: a page object per page, each drawing one large image."""
    parts = [b"%PDF-1.4\n"]
    for page in range(pages):
        parts.append(b"%d 0 obj << /Type /Page /Parent 1 0 R /Resources 9 0 R >> endobj\n" % page)
        parts.append(b"<< /Type /XObject /Subtype /Image /Length %d >>\nstream\n" % image_bytes)
        parts.append(bytes(image_bytes // pages) + b"\nendstream\n")
    parts.append(b"1 0 obj << /Type /Pages /Count %d >> endobj\n%%%%EOF\n" % pages)
    return b"".join(parts)


def png_bytes(width: int = 1, height: int = 1) -> bytes:
    """A whole PNG of ``width`` x ``height`` as its header says (one row of pixels drawn: only
    the header matters to the rules), as a screenshot tool writes one."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def image(media_type: str | None, data: bytes | None = None) -> dict[str, Any]:
    """A base64 image block; a PNG's bytes unless told otherwise."""
    source: dict[str, Any] = {
        "type": "base64",
        "data": base64.b64encode(data or png_bytes()).decode(),
    }
    if media_type is not None:
        source["media_type"] = media_type
    return {"type": "image", "source": source}
