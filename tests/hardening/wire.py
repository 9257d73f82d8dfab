"""Raw sockets for what an HTTP client will not send, RSS, and the three APIs' routes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from tests.graph.chat_builders import body, user
from tests.proxy.stack import Stack

ROUTES = {
    "openai_chat": "/openai/v1/chat/completions",
    "openai_responses": "/openai/v1/responses",
    "anthropic": "/anthropic/v1/messages",
    "gemini": "/gemini/v1beta/models/gemini-2.0-flash:generateContent",
}


def valid_body(api: str) -> dict[str, Any]:
    if api == "openai_chat":
        return body(user("hi"))
    if api == "openai_responses":
        return {"model": "gpt-4o", "input": "hi"}
    if api == "anthropic":
        return {
            "model": "claude-sonnet-4-5",
            "max_tokens": 16,
            "messages": [{"role": "user", "content": "hi"}],
        }
    if api == "gemini":
        return {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    raise AssertionError(api)


def rejection_code(api: str, answer: bytes) -> str:
    """The rule named in the API's own envelope (checked for its shape)."""
    value = orjson.loads(answer)
    error = value["error"]
    if api == "anthropic":
        assert value["type"] == "error"
        assert isinstance(error["type"], str)
    elif api == "gemini":
        assert isinstance(error["code"], int)
        assert isinstance(error["status"], str)
    else:
        assert error["code"] == error["message"].split("[", 1)[1].split("]", 1)[0]
    message = str(error["message"])
    assert message.startswith("turngate [")
    return message.split("[", 1)[1].split("]", 1)[0]


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@dataclass
class RawResult:
    data: bytes
    # Seconds from the first byte sent until the server closed the connection.
    closed_after: float

    @property
    def status(self) -> int | None:
        if not self.data.startswith(b"HTTP/1."):
            return None
        return int(self.data.split(b" ", 2)[1])


async def raw_exchange(
    port: int, pieces: list[bytes], *, pause: float = 0.0, wait: float = 10.0
) -> RawResult:
    """Send ``pieces`` (``pause`` seconds apart), then read until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    received = bytearray()

    async def read_all() -> None:
        while chunk := await reader.read(65536):
            received.extend(chunk)

    reading = asyncio.create_task(read_all())
    try:
        for piece in pieces:
            if reading.done():
                break
            writer.write(piece)
            try:
                await writer.drain()
            except ConnectionError:
                break
            if pause:
                await asyncio.sleep(pause)
        with contextlib.suppress(ConnectionError):
            await asyncio.wait_for(reading, wait)
    finally:
        reading.cancel()
        writer.close()
    return RawResult(bytes(received), time.monotonic() - started)


async def healthy(stack: Stack) -> bool:
    async with aiohttp.ClientSession() as session, session.get(stack.url + "/healthz") as resp:
        return resp.status == 200
