"""Small helpers shared by the proxy tests."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

from tests.proxy.stack import Stack

JSON = {"Content-Type": "application/json"}


async def post(
    stack: Stack,
    path: str,
    body: bytes | dict[str, Any],
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    async with (
        aiohttp.ClientSession() as session,
        session.post(stack.url + path, data=data, headers={**JSON, **(headers or {})}) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.read()


async def get(stack: Stack, path: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(stack.url + path) as resp:
        return resp.status, orjson.loads(await resp.read())


async def operation(stack: Stack, operation_id: str) -> dict[str, Any]:
    status, record = await get(stack, f"/turngate/v1/operations/{operation_id}")
    assert status == 200, record
    assert isinstance(record, dict)
    return record


def states(record: dict[str, Any]) -> list[str]:
    return [change["state"] for change in record["history"]]
