"""Two `turngate serve` processes sharing one Redis, many official-SDK clients sending the
same conversation revision at once: exactly one upstream send, one canonical turn, and every
other client gets the committed answer replayed or a 409."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
from aiohttp.test_utils import TestServer

from tests.fixtures_dir import COUNTS
from tests.proxy.fake_upstream import FakeUpstream
from tests.proxy.helpers import CHAT_ANSWER
from tests.proxy.serve_process import ServeProcess, conversation_client
from tests.state.redis_server import free_port, key_prefix, redis_url

CLIENTS = 20
CONVERSATION = "conv-two-replicas"


@pytest.fixture
async def replicas(aiohttp_server: Any, tmp_path: Path) -> AsyncIterator[Any]:
    upstream = FakeUpstream()
    # Slow enough that the first wave of clients all arrive while it is in flight.
    upstream.reply(dataclasses.replace(CHAT_ANSWER, delay=0.6))
    server: TestServer = await aiohttp_server(upstream.app())
    base = f"http://127.0.0.1:{server.port}"
    prefix = key_prefix(tmp_path / uuid.uuid4().hex)
    state = f"{redis_url()}?key_prefix={prefix}"
    started = [
        ServeProcess(free_port(), state, base, tmp_path / f"serve-{n}.log") for n in range(2)
    ]
    try:
        await asyncio.gather(*(p.start() for p in started))
        yield upstream, started
    finally:
        for process in started:
            process.kill()


def ask(url: str) -> tuple[int, bool, str]:
    """One SDK client: (status, replayed?, answer text or error code)."""
    client = conversation_client(url, CONVERSATION)
    try:
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=[{"role": "user", "content": "Hi"}]
        )
    except openai.ConflictError as exc:
        return 409, False, str(exc.code)
    finally:
        client.close()
    answer = raw.parse().choices[0].message.content or ""
    return raw.status_code, raw.headers.get("Turngate-Replay") == "1", answer


async def test_one_send_and_one_turn_across_two_replicas(replicas: Any) -> None:
    upstream, processes = replicas
    urls = [processes[n % 2].url for n in range(CLIENTS)]

    async def client(n: int) -> tuple[int, bool, str]:
        await asyncio.sleep(0.05 * (n % 5))  # a spread: all while the first is in flight
        return await asyncio.to_thread(ask, urls[n])

    first_wave = await asyncio.gather(*(client(n) for n in range(CLIENTS)))
    sent = [r for r in first_wave if r[0] == 200 and not r[1]]
    assert len(sent) == 1
    assert all(r == (409, False, "dispatch_conflict") or r[1] for r in first_wave if r not in sent)
    assert len(upstream.received) == 1

    # Once committed, every retry on either replica is the same answer, replayed.
    second_wave = await asyncio.gather(*(asyncio.to_thread(ask, url) for url in urls))
    assert set(second_wave) == {(200, True, "hello")}
    assert len(upstream.received) == 1
    for process in processes:
        shown = await process.conversation(CONVERSATION)
        assert shown["revision"] == 1
        assert len(shown["turns"]) == 1
        assert [op["state"] for op in shown["operations"]] == ["COMMITTED"]
    COUNTS["replay: SDK clients across two replicas (one send, one turn)"] += 2 * CLIENTS
