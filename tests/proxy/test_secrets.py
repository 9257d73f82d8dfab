"""Known API keys go through every path; none shows up in a log record or in stored state."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import aiohttp
import anthropic
import openai
import orjson
import pytest
from google import genai
from google.genai import types

from tests.fixtures_dir import FIXTURES_DIR, FIXTURES_PRESENT
from tests.graph.chat_builders import assistant, body, tool, user
from tests.proxy.conftest import StackFactory
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import CHAT_ANSWER, JSON, operation
from tests.proxy.sdk_support import GENAI_AIOHTTP_WARNING, call
from tests.proxy.stack import ANTHROPIC_KEY, GEMINI_KEY, OPENAI_KEY, SECRETS, Stack
from turngate.proxy.logs import REDACTED

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")


def record_text(record: logging.LogRecord) -> str:
    text = record.getMessage()
    if record.exc_info:
        text += logging.Formatter().formatException(record.exc_info)
    return text + repr(record.__dict__.get("args"))


async def run_every_path(stack: Stack, mode: str) -> None:
    chat = (FIXTURES_DIR / "openai-chat/pai-nonstream-2-tool-calls.request.json").read_bytes()
    oai_cls = openai.OpenAI if mode == "sync" else openai.AsyncOpenAI
    oai = oai_cls(api_key=OPENAI_KEY, base_url=stack.base("/openai/v1"), max_retries=0)
    stack.upstream.reply(Reply.fixture("openai-chat/pai-nonstream-2-tool-calls.json"))
    await call(mode, oai.chat.completions.create, **orjson.loads(chat))
    refused = body(user("hi"), assistant("hello"), tool("call_7"))
    with pytest.raises(openai.BadRequestError):
        await call(mode, oai.chat.completions.create, **refused)
    stack.upstream.reply(Reply.json({"error": {"message": "boom"}}, status=500))
    with pytest.raises(openai.InternalServerError):
        await call(mode, oai.chat.completions.create, **orjson.loads(chat))
    stack.upstream.reply(Reply.json({"object": "list", "data": []}))
    await call(mode, oai.models.list)
    await call(mode, oai.close)

    claude_request = orjson.loads(
        (FIXTURES_DIR / "anthropic/pai-nonstream-after-4-tool-results.request.json").read_bytes()
    )
    for headers in (None, {"x-api-key": ANTHROPIC_KEY, "Authorization": anthropic.Omit()}):
        claude_cls = anthropic.Anthropic if mode == "sync" else anthropic.AsyncAnthropic
        claude = claude_cls(
            api_key=ANTHROPIC_KEY,
            base_url=stack.base("/anthropic"),
            max_retries=0,
            default_headers=headers,
        )
        stack.upstream.reply(Reply.fixture("anthropic/pai-nonstream-after-4-tool-results.json"))
        await call(mode, claude.messages.create, **claude_request)
        with pytest.raises(anthropic.APIStatusError):
            await call(
                mode,
                claude.messages.create,
                model="claude-x",
                max_tokens=10,
                messages=[{"role": "user", "content": [{"type": "hologram"}]}],
            )
        await call(mode, claude.close)

    gemini = genai.Client(
        api_key=GEMINI_KEY,
        http_options=types.HttpOptions(base_url=stack.base("/gemini"), api_version="v1beta"),
    )
    models = gemini.models if mode == "sync" else gemini.aio.models
    text = {"candidates": [{"content": {"parts": [{"text": "hi"}], "role": "model"}}]}
    stack.upstream.reply(Reply.json(text))
    await call(mode, models.generate_content, model="gemini-2.0-flash", contents="hi")
    stack.upstream.reply(Reply.json({"error": {"code": 500, "message": "x", "status": "INTERNAL"}}))
    with pytest.raises(genai.errors.APIError):
        await call(mode, models.generate_content, model="gemini-2.0-flash", contents="hi")
    await call(mode, gemini.close if mode == "sync" else gemini.aio.aclose)

    # Gemini's ?key= on a parsed route and on a relayed one.
    stack.upstream.reply(CHAT_ANSWER)
    async with aiohttp.ClientSession() as session:
        for path in (
            f"/gemini/v1beta/models/gemini-2.0-flash:generateContent?key={GEMINI_KEY}",
            f"/gemini/v1beta/models?key={GEMINI_KEY}&pageSize=2",
        ):
            async with session.post(stack.url + path, data=b"{}", headers=JSON) as resp:
                await resp.read()


@GENAI_AIOHTTP_WARNING
@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_keys_appear_in_no_log_record_and_no_stored_state(
    make_stack: StackFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: str
):
    caplog.set_level(logging.DEBUG)
    state = tmp_path / "state.db"
    stack = await make_stack(state=f"sqlite://{state}")
    await run_every_path(stack, mode)

    # Every key did reach the upstream, untouched.
    upstream_saw = "".join(str(r.headers) + r.path_qs for r in stack.upstream.received)
    for secret in SECRETS:
        assert secret in upstream_saw

    ours = [r for r in caplog.records if r.name.startswith(("turngate", "aiohttp"))]
    assert any(r.name == "turngate.access" for r in ours)
    for record in caplog.records:
        text = record_text(record)
        for secret in SECRETS:
            assert secret not in text, (record.name, text)
    access = [r.getMessage() for r in ours if r.name == "turngate.access"]
    assert any(f"key={REDACTED}" in line for line in access)

    stored = b"".join(p.read_bytes() for p in tmp_path.glob("state.db*"))
    for secret in SECRETS:
        assert secret.encode() not in stored
    records = [await operation(stack, op) for op in stored_operation_ids(state)]
    assert len(records) >= 4
    hashes = {r["manifest"]["credentialHash"] for r in records}
    assert all(h.startswith("hmac-sha256:") for h in hashes)
    # One identity per key: the OpenAI key and the Gemini key hash apart.
    assert len(hashes) >= 2
    for record in records:
        for secret in SECRETS:
            assert secret not in orjson.dumps(record).decode()


def stored_operation_ids(state: Path) -> list[str]:
    db = sqlite3.connect(state, timeout=5)
    try:
        return [row[0] for row in db.execute("SELECT operation_id FROM operations")]
    finally:
        db.close()
