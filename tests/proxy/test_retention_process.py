"""A real `turngate serve` on a SQLite file forgets an operation and its conversation once
``--operation-ttl`` has passed: what an operator sees at the operations endpoint and in the
file, with the official SDK as the client."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestServer

from tests.proxy.fake_upstream import FakeUpstream
from tests.proxy.helpers import CHAT_ANSWER
from tests.proxy.serve_process import ServeProcess, conversation_client, eventually
from tests.state.redis_server import free_port

CONVERSATION = "conv-kept-briefly"


def ask(url: str) -> str:
    """One chat turn through the SDK; the operation id turngate answered with."""
    client = conversation_client(url, CONVERSATION)
    try:
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=[{"role": "user", "content": "Hi"}]
        )
    finally:
        client.close()
    assert raw.status_code == 200
    return raw.headers["Turngate-Operation-Id"]


def rows(path: Path, table: str) -> int:
    db = sqlite3.connect(path)
    try:
        count: int = db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        return count
    finally:
        db.close()


async def test_an_operation_and_its_conversation_go_after_the_ttl(
    aiohttp_server: Any, tmp_path: Path
) -> None:
    upstream = FakeUpstream()
    upstream.reply(CHAT_ANSWER)
    server: TestServer = await aiohttp_server(upstream.app())
    state = tmp_path / "state.db"
    turngate = ServeProcess(
        free_port(),
        f"sqlite://{state}",
        f"http://127.0.0.1:{server.port}",
        tmp_path / "serve.log",
        # The shortest TTL the settings allow: replays and UNKNOWN deadlines of a second.
        *("--operation-ttl", "2", "--replay-ttl", "1", "--unknown-deadline", "1"),
    )
    await turngate.start()
    try:
        operation = await asyncio.to_thread(ask, turngate.url)
        status, found = await turngate.get(f"/turngate/v1/operations/{operation}")
        assert (status, found["state"]) == (200, "COMMITTED")
        assert (await turngate.conversation(CONVERSATION))["revision"] == 1
        assert rows(state, "operations") == rows(state, "conversations") == 1

        async def forgotten() -> bool:
            status, _ = await turngate.get(f"/turngate/v1/operations/{operation}")
            return status == 404

        async def conversation_gone() -> bool:
            return rows(state, "conversations") == 0

        await eventually(forgotten, timeout=20.0)
        await eventually(conversation_gone)
        assert rows(state, "operations") == rows(state, "history") == 0
        assert rows(state, "canonical_turns") == 0
        # The conversation starts afresh: the same request is sent again and committed.
        await asyncio.to_thread(ask, turngate.url)
        assert len(upstream.received) == 2
    finally:
        turngate.kill()
