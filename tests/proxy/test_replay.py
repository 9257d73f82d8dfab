"""Idempotent replay: a retry gets the committed answer again with no upstream call, as a
stream or a body as it asked; an Idempotency-Key is bound to one body; nothing crosses
credentials; kept answers expire."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from aiohttp.test_utils import TestServer

from tests.adapters.test_stream_encoders import sdk_read
from tests.clock import Clock
from tests.fixtures_dir import COUNTS, FIXTURES_PRESENT
from tests.proxy.fake_upstream import FakeUpstream, Reply
from tests.proxy.helpers import CHAT_ANSWER, post
from tests.proxy.stack import OPENAI_KEY, Stack
from tests.proxy.stream_support import StreamStack, recorded_request, stream_stacks
from tests.proxy.stream_upstream import Script
from tests.proxy.test_stream_recovery import tool_stream
from turngate.proxy import conflicts
from turngate.proxy.app import create_app
from turngate.proxy.upstream import UpstreamTimeouts
from turngate.settings import Settings

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")

CHAT = "/openai/v1/chat/completions"
APIS = ["openai_chat", "openai_responses", "anthropic", "gemini"]
OTHER_KEY = "sk-test-OTHER-TENANT-0000000000"
QUESTION: dict[str, Any] = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]}


def caller(key: str = OPENAI_KEY, **more: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **more}


@pytest.fixture
async def streams(aiohttp_server: Any, tmp_path: Path) -> AsyncIterator[Any]:
    async with stream_stacks(aiohttp_server, tmp_path) as make:
        yield make


@pytest.fixture
async def timed(aiohttp_server: Any, tmp_path: Path) -> tuple[Stack, Clock]:
    """A stack on SQLite whose clock the test moves; answers are kept 60 s."""
    upstream = FakeUpstream()
    upstream_server: TestServer = await aiohttp_server(upstream.app())
    base = f"http://127.0.0.1:{upstream_server.port}"
    clock = Clock(1_800_000_000.0)
    settings = dataclasses.replace(
        Settings(upstream_openai=base), state=f"sqlite://{tmp_path / 'state.db'}", replay_ttl=60.0
    )
    app = create_app(
        settings, clock=clock, credential_secret="s", timeouts=UpstreamTimeouts(read=5.0)
    )
    server: TestServer = await aiohttp_server(app)
    stack = Stack(
        f"http://127.0.0.1:{server.port}", upstream, app, f"127.0.0.1:{upstream_server.port}"
    )
    upstream.reply(CHAT_ANSWER)
    return stack, clock


async def answering(make_stack: Any, tmp_path: Path, state: str) -> Stack:
    """A stack on ``state`` (memory or an SQLite file) whose upstream answers every chat."""
    chosen = "memory://" if state == "memory" else f"sqlite://{tmp_path / 'state.db'}"
    stack: Stack = await make_stack(state=chosen)
    stack.upstream.reply(CHAT_ANSWER)
    return stack


@pytest.mark.parametrize("state", ["memory", "sqlite"])
async def test_a_retry_of_a_committed_revision_gets_the_same_answer(
    make_stack: Any, tmp_path: Path, state: str
) -> None:
    stack = await answering(make_stack, tmp_path, state)
    headers = caller(**{"Turngate-Conversation-Id": "conv-retry"})
    first = await post(stack, CHAT, QUESTION, headers)
    again = await post(stack, CHAT, QUESTION, headers)
    assert first[0] == again[0] == 200
    assert again[2] == first[2] == CHAT_ANSWER.body
    assert again[1]["Turngate-Replay"] == "1"
    assert "Turngate-Replay" not in first[1]
    assert again[1]["Turngate-Operation-Id"] == first[1]["Turngate-Operation-Id"]
    assert len(stack.upstream.received) == 1
    COUNTS["replay: committed answers replayed without an upstream call"] += 1


@pytest.mark.parametrize("api", APIS)
async def test_a_streamed_answer_is_replayed_as_the_same_stream(streams: Any, api: str) -> None:
    path = tool_stream(api)
    stack: StreamStack = await streams(sqlite=True)
    stack.upstream.default = Script(path.read_bytes())
    headers = {"Turngate-Conversation-Id": f"conv-stream-{api}"}
    first = await stack.post(api, recorded_request(path), headers)
    again = await stack.post(api, recorded_request(path), headers)
    assert (first.status, first.broken, again.status, again.broken) == (200, False, 200, False)
    assert again.body == first.body
    assert again.headers["Turngate-Replay"] == "1"
    assert again.headers["Content-Type"].startswith("text/event-stream")
    assert len(stack.upstream.received) == 1
    assert sdk_read(api, again.body).error is None
    COUNTS["replay: committed streams replayed byte for byte"] += 1


async def kept(stack: Any, operation_id: str, *, within: float = 0.0) -> bool:
    """Whether the store keeps an answer for ``operation_id`` (waiting ``within`` seconds for
    a streamed one, kept right after its end reached the client)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        if await stack.store.load_response(operation_id, now=0.0) is not None:
            return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("state", ["memory", "sqlite"])
async def test_an_answer_no_retry_can_reach_is_not_kept(
    make_stack: Any, tmp_path: Path, state: str
) -> None:
    # Without a conversation id or an Idempotency-Key each request is its own operation:
    # the same request again is sent again, so keeping its answer would only cost a write.
    stack = await answering(make_stack, tmp_path, state)
    first = await post(stack, CHAT, QUESTION, caller())
    again = await post(stack, CHAT, QUESTION, caller())
    assert first[0] == again[0] == 200
    assert "Turngate-Replay" not in again[1]
    assert len(stack.upstream.received) == 2
    assert not await kept(stack, first[1]["Turngate-Operation-Id"])
    keyed = await post(stack, CHAT, QUESTION, caller(**{"Idempotency-Key": "k-1"}))
    assert await kept(stack, keyed[1]["Turngate-Operation-Id"])
    talk = await post(stack, CHAT, QUESTION, caller(**{"Turngate-Conversation-Id": "c-1"}))
    assert await kept(stack, talk[1]["Turngate-Operation-Id"])


async def test_a_stream_no_retry_can_reach_is_not_kept(streams: Any) -> None:
    path = tool_stream("openai_chat")
    stack: StreamStack = await streams(sqlite=True)
    stack.upstream.default = Script(path.read_bytes())
    runs = [
        await stack.post("openai_chat", recorded_request(path), headers)
        for headers in ({"Idempotency-Key": "k-1"}, {}, {"Idempotency-Key": "k-2"})
    ]
    assert all((run.status, run.broken) == (200, False) for run in runs)
    first, anonymous, last = (run.headers["Turngate-Operation-Id"] for run in runs)
    assert await kept(stack, first, within=5.0)
    # The store's writes run in order: once the last is kept, one for the anonymous
    # stream, had there been one, would have landed before it.
    assert await kept(stack, last, within=5.0)
    assert not await kept(stack, anonymous)


async def test_an_idempotency_key_replays_its_answer_and_refuses_another_body(
    make_stack: Any,
) -> None:
    stack: Stack = await make_stack()
    stack.upstream.reply(CHAT_ANSWER)
    key = {"Idempotency-Key": "order-42"}
    async with openai.AsyncOpenAI(
        api_key=OPENAI_KEY, base_url=stack.base("/openai/v1"), max_retries=0
    ) as client:
        first = await client.chat.completions.with_raw_response.create(
            **QUESTION, extra_headers=key
        )
        again = await client.chat.completions.with_raw_response.create(
            **QUESTION, extra_headers=key
        )
        assert again.headers["Turngate-Replay"] == "1"
        assert again.parse().model_dump() == first.parse().model_dump()
        with pytest.raises(openai.ConflictError) as raised:
            await client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "Bye"}], extra_headers=key
            )
    assert raised.value.code == "idempotency_key_reused"
    assert len(stack.upstream.received) == 1
    COUNTS["replay: Idempotency-Key replays"] += 1


async def test_one_api_key_never_gets_another_keys_answer(make_stack: Any) -> None:
    stack: Stack = await make_stack()
    secret = orjson.loads(CHAT_ANSWER.body)
    secret["choices"][0]["message"]["content"] = "tenant A's secret"
    stack.upstream.reply(Reply.json(secret))
    key = {"Idempotency-Key": "shared-key"}
    status, first, body = await post(stack, CHAT, QUESTION, caller(**key))
    assert status == 200
    assert b"tenant A's secret" in body

    # Same Idempotency-Key value, another credential: its own request, answered upstream.
    stack.upstream.reply(CHAT_ANSWER)
    status, other, body = await post(stack, CHAT, QUESTION, caller(OTHER_KEY, **key))
    assert status == 200
    assert b"secret" not in body
    assert "Turngate-Replay" not in other
    assert other["Turngate-Operation-Id"] != first["Turngate-Operation-Id"]

    # Same conversation revision, another credential: refused, never replayed.
    conv = {"Turngate-Conversation-Id": "conv-tenant"}
    stack.upstream.reply(Reply.json(secret))
    assert (await post(stack, CHAT, QUESTION, caller(**conv)))[0] == 200
    status, refused, body = await post(stack, CHAT, QUESTION, caller(OTHER_KEY, **conv))
    assert (status, refused["Turngate-Rejection"]) == (409, "dispatch_conflict")
    assert b"secret" not in body
    assert len(stack.upstream.received) == 3


Posted = tuple[int, dict[str, str], bytes]


async def again_while_first_runs(
    stack: Stack, first_reply: Reply, key: str
) -> tuple[asyncio.Task[Posted], Posted]:
    """The question with Idempotency-Key ``key`` (the upstream answers ``first_reply``), and
    the same request again once the upstream has the first."""
    stack.upstream.reply(first_reply)
    headers = caller(**{"Idempotency-Key": key})
    first = asyncio.create_task(post(stack, CHAT, QUESTION, headers))
    await asyncio.wait_for(stack.upstream.got_request.wait(), 5)
    stack.upstream.reply(CHAT_ANSWER)
    return first, await post(stack, CHAT, QUESTION, headers)


async def test_a_retry_while_the_first_is_in_flight_waits_and_gets_its_answer(
    make_stack: Any,
) -> None:
    stack: Stack = await make_stack()
    slow = dataclasses.replace(CHAT_ANSWER, delay=0.5)
    first, (status, out, body) = await again_while_first_runs(stack, slow, "slow-1")
    assert (status, out["Turngate-Replay"]) == (200, "1")
    assert body == (await first)[2]
    assert len(stack.upstream.received) == 1


async def test_a_retry_waiting_on_a_first_attempt_that_fails_is_sent(make_stack: Any) -> None:
    stack: Stack = await make_stack()
    failing = Reply.json({"error": {"message": "overloaded"}}, status=500, delay=0.5)
    first, (status, out, _body) = await again_while_first_runs(stack, failing, "slow-3")
    assert (status, "Turngate-Replay" in out) == (200, False)
    assert (await first)[0] == 500
    assert len(stack.upstream.received) == 2


async def test_a_retry_that_outwaits_the_join_gets_409_with_retry_after(
    make_stack: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(conflicts, "JOIN_WAIT", 0.3)
    stack: Stack = await make_stack()
    slow = dataclasses.replace(CHAT_ANSWER, delay=1.5)
    first, (status, out, body) = await again_while_first_runs(stack, slow, "slow-2")
    assert (status, out["Retry-After"], out["x-should-retry"]) == (409, "1", "true")
    assert orjson.loads(body)["error"]["code"] == "dispatch_conflict"
    assert (await first)[0] == 200
    status, out, _body = await post(stack, CHAT, QUESTION, caller(**{"Idempotency-Key": "slow-2"}))
    assert (status, out["Turngate-Replay"]) == (200, "1")
    assert len(stack.upstream.received) == 1


async def test_kept_answers_and_keys_expire(timed: tuple[Stack, Clock]) -> None:
    stack, clock = timed
    conv = caller(**{"Turngate-Conversation-Id": "conv-ttl"})
    key = caller(**{"Idempotency-Key": "ttl-key"})
    assert (await post(stack, CHAT, QUESTION, conv))[0] == 200
    assert (await post(stack, CHAT, QUESTION, key))[0] == 200
    clock.now += 59
    assert (await post(stack, CHAT, QUESTION, conv))[1]["Turngate-Replay"] == "1"
    assert (await post(stack, CHAT, QUESTION, key))[1]["Turngate-Replay"] == "1"
    clock.now += 2
    status, out, body = await post(stack, CHAT, QUESTION, conv)
    # The revision keeps its one canonical turn; only its answer is no longer kept.
    assert (status, out["Turngate-Rejection"]) == (409, "dispatch_conflict")
    assert "no longer" in orjson.loads(body)["error"]["message"]
    # An expired key is a new request.
    status, out, _body = await post(stack, CHAT, QUESTION, key)
    assert status == 200
    assert "Turngate-Replay" not in out
    assert len(stack.upstream.received) == 3


async def test_a_malformed_idempotency_key_is_refused(make_stack: Any) -> None:
    stack: Stack = await make_stack()
    status, out, _body = await post(stack, CHAT, QUESTION, caller(**{"Idempotency-Key": "k" * 256}))
    assert (status, out["Turngate-Rejection"]) == (400, "invalid_idempotency_key")
    assert stack.upstream.received == []
