"""A full adversarial run with known keys, on SQLite and on a real Redis, enforcing and in
shadow mode: valid and refused requests of all four APIs, streams, upstream errors, hostile
bodies, relayed routes, ``?key=``. Then every output is grepped for the keys: log records of
every logger, the SQLite files (db, WAL, SHM) or every Redis key and value under the run's
prefix, ``/metrics``, the operations and shadow endpoints' JSON, and every body and header
turngate answered with."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from redis.asyncio import Redis

from tests.fixtures_dir import COUNTS, FIXTURES_DIR, FIXTURES_PRESENT
from tests.hardening.conftest import HardFactory, HardStack
from tests.hardening.wire import ROUTES, valid_body
from tests.proxy.fake_upstream import Reply
from tests.proxy.sdk_support import GENAI_AIOHTTP_WARNING
from tests.proxy.stack import ANTHROPIC_KEY, GEMINI_KEY, OPENAI_KEY, SECRETS
from tests.proxy.test_secrets import record_text, run_every_path
from tests.state.redis_server import key_prefix, redis_url
from turngate.proxy.app import SERVICES

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")

AUTH = {
    "openai_chat": {"Authorization": f"Bearer {OPENAI_KEY}"},
    "openai_responses": {"Authorization": f"Bearer {OPENAI_KEY}"},
    "anthropic": {"x-api-key": ANTHROPIC_KEY, "Authorization": f"Bearer {ANTHROPIC_KEY}"},
    "gemini": {"x-goog-api-key": GEMINI_KEY},
}
STREAMS = {
    "openai_chat": "openai-chat/pai-long-tool-args.sse",
    "anthropic": "anthropic/lla-parallel-2-tool-use-no-args.sse",
}


class Answers:
    """Every status line, header and body turngate answered with."""

    def __init__(self) -> None:
        self.text: list[str] = []

    async def send(self, stack: HardStack, method: str, path: str, **kwargs: Any) -> int:
        async with aiohttp.ClientSession() as session:
            try:
                async with session.request(method, stack.url + path, **kwargs) as resp:
                    try:
                        data = await resp.read()
                    except aiohttp.ClientPayloadError:
                        data = b"(cut)"
                    text = data.decode(errors="replace")
                    self.text.append(f"{resp.status} {dict(resp.headers)} {text}")
                    return resp.status
            except aiohttp.ServerDisconnectedError:
                # A stream cut before its first byte reached the client.
                self.text.append("(disconnected)")
                return 0


async def adversarial_run(stack: HardStack, answers: Answers, mode: str) -> None:
    if mode == "enforce":
        # The official SDKs through every path (it expects refusals, so enforcing only).
        await run_every_path(stack, "async")
    for api, path in ROUTES.items():
        headers = {**AUTH[api], "Content-Type": "application/json"}
        key_qs = f"?key={GEMINI_KEY}" if api == "gemini" else f"?api_key={OPENAI_KEY}"
        stack.upstream.reply(Reply.json({"error": {"message": "upstream says no"}}, status=401))
        await answers.send(stack, "POST", path, json=valid_body(api), headers=headers)
        await answers.send(stack, "POST", path + key_qs, json=valid_body(api), headers=headers)
        for raw in (b"{nope", b'{"a":1,"a":2}', b'{"x":"\xff"}', b"[" * 5000):
            await answers.send(stack, "POST", path + key_qs, data=raw, headers=headers)
        refused = dict(valid_body(api), messages=[{"role": "tool", "content": OPENAI_KEY}])
        await answers.send(stack, "POST", path, json=refused, headers=headers)
        await answers.send(stack, "TRACE", path + key_qs, headers=headers)
    for api, recording in STREAMS.items():
        stack.upstream.reply(Reply.fixture(recording))
        request = orjson.loads(
            (FIXTURES_DIR / recording.replace(".sse", ".request.json")).read_bytes()
        )
        request["stream"] = True
        headers = {**AUTH[api], "Content-Type": "application/json"}
        await answers.send(stack, "POST", ROUTES[api], json=request, headers=headers)
        cut = Reply.fixture(recording, drop_after=300)
        stack.upstream.reply(cut)
        await answers.send(stack, "POST", ROUTES[api], json=request, headers=headers)
    stack.upstream.reply(Reply(status=302, headers={"Location": "http://elsewhere.invalid/"}))
    await answers.send(
        stack, "GET", f"/gemini/v1beta/models?key={GEMINI_KEY}", allow_redirects=False
    )
    await answers.send(stack, "GET", f"/openai/v1/../models?key={GEMINI_KEY}")


async def redis_dump(prefix: str) -> bytes:
    client: Any = Redis.from_url(redis_url())
    out: list[Any] = []
    try:
        async for key in client.scan_iter(match=prefix + "*"):
            out.append(key)
            kind = (await client.type(key)).decode()
            if kind == "string":
                out.append(await client.get(key) or b"")
            elif kind == "hash":
                for field, value in (await client.hgetall(key)).items():
                    out += [field, value]
            elif kind == "list":
                out += await client.lrange(key, 0, -1)
            elif kind == "set":
                out += list(await client.smembers(key))
            elif kind == "zset":
                out += [member for member, _ in await client.zrange(key, 0, -1, withscores=True)]
            elif kind == "stream":
                for _id, fields in await client.xrange(key):
                    for field, value in fields.items():
                        out += [field, value]
            else:
                raise AssertionError(f"unexpected Redis type {kind} at {key!r}")
    finally:
        await client.aclose()
    return b"\n".join(x if isinstance(x, bytes) else str(x).encode() for x in out)


@GENAI_AIOHTTP_WARNING
@pytest.mark.parametrize("mode", ["enforce", "shadow"])
@pytest.mark.parametrize("store", ["sqlite", "redis"])
async def test_no_key_in_any_output_of_an_adversarial_run(
    make_hard_stack: HardFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    store: str,
    mode: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    prefix = key_prefix(tmp_path) + "secrets:"
    state = (
        f"sqlite://{tmp_path / 'state.db'}"
        if store == "sqlite"
        else f"{redis_url()}?key_prefix={prefix}"
    )
    stack = await make_hard_stack(state=state, mode=mode)
    answers = Answers()
    await adversarial_run(stack, answers, mode)
    await stack.app[SERVICES].drain()

    upstream_saw = "".join(str(r.headers) + r.path_qs for r in stack.upstream.received)
    for secret in SECRETS:
        assert secret in upstream_saw, "every key must have gone through"

    outputs: dict[str, str] = {}
    outputs["logs"] = "\n".join(record_text(r) for r in caplog.records)
    assert len(caplog.records) > 20
    if store == "sqlite":
        files = sorted(tmp_path.glob("state.db*"))
        assert files
        outputs["sqlite"] = b"".join(p.read_bytes() for p in files).decode("latin-1")
    else:
        dumped = await redis_dump(prefix)
        assert dumped, "the run stored nothing in Redis"
        outputs["redis"] = dumped.decode("latin-1")
    outputs["answers"] = "\n".join(answers.text)
    async with aiohttp.ClientSession() as session:
        async with session.get(stack.url + "/metrics") as resp:
            outputs["metrics"] = f"{resp.status} {await resp.text()}"
        async with session.get(stack.url + "/turngate/v1/shadow?examples=50") as resp:
            assert resp.status == 200
            outputs["shadow"] = await resp.text()
        operations = []
        for operation_id in dict.fromkeys(stack.operation_ids):
            async with session.get(f"{stack.url}/turngate/v1/operations/{operation_id}") as r:
                operations.append(await r.text())
        assert len(operations) >= 10
        outputs["operations"] = "\n".join(operations)

    for where, text in outputs.items():
        for secret in SECRETS:
            assert secret not in text, f"{secret[:12]}… found in {where}"
        COUNTS[f"secrets: bytes grepped in {where}"] += len(text)
