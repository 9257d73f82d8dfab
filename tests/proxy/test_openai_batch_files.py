"""OpenAI's Batch API: the requests of an input file are checked when the file is uploaded.

``client.files.create(file=..., purpose="batch")`` uploads JSONL, one request a line; OpenAI
checks each only as the batch runs it, and reports a refused one in the batch's error file
hours later. Through turngate the upload of a file with an invalid Chat Completions or
Responses request is refused at once (the SDK's normal 400, naming the line and its
``custom_id``), and nothing reaches the provider. Other uploads stream up untouched.
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from tests.graph.chat_builders import assistant, body, call, tool, user
from tests.graph.test_validator_table import TABLE
from tests.proxy.conftest import StackFactory
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import openai_sdk
from tests.proxy.stack import Stack

FILE = {
    "id": "file-1",
    "object": "file",
    "bytes": 100,
    "created_at": 0,
    "filename": "batch.jsonl",
    "purpose": "batch",
    "status": "processed",
}
VALID_CHAT = body(user("weather?"), assistant(calls=[call("call_1")]), tool("call_1"))
ORPHAN_CHAT = body(user("hi"), assistant("hello"), tool("call_7"))
ORPHAN_RESPONSES = {
    "model": "gpt-4o",
    "input": [
        {"role": "user", "content": "hi"},
        {"type": "function_call_output", "call_id": "call_9", "output": "18C"},
    ],
}


def line(custom_id: str, request: dict[str, Any], url: str = "/v1/chat/completions") -> bytes:
    return orjson.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": request})


def jsonl(*lines: bytes) -> bytes:
    return b"\n".join(lines) + b"\n"


@pytest.fixture
async def stack(make_stack: StackFactory) -> Stack:
    stack = await make_stack()
    stack.upstream.reply(Reply.json(FILE))
    return stack


async def upload(stack: Stack, data: bytes, purpose: str = "batch") -> Any:
    async with openai_sdk(stack) as sdk:
        return await sdk.files.create(file=("batch.jsonl", io.BytesIO(data)), purpose=purpose)  # type: ignore[arg-type]


async def test_a_valid_batch_file_is_uploaded_as_the_clients_bytes(stack: Stack):
    data = jsonl(line("a", VALID_CHAT), line("b", body(user("hello"))))
    uploaded = await upload(stack, data)
    assert uploaded.id == "file-1"
    (sent,) = stack.upstream.received
    assert sent.path_qs == "/v1/files"
    assert data in sent.body
    assert b'name="purpose"\r\n\r\nbatch\r\n' in sent.body


async def test_a_batch_file_with_invalid_requests_is_refused_naming_each_line(stack: Stack):
    data = jsonl(
        line("fine", VALID_CHAT),
        line("orphan", ORPHAN_CHAT),
        orjson.dumps({"custom_id": "emb", "method": "POST", "url": "/v1/embeddings", "body": {}}),
        line("stray-output", ORPHAN_RESPONSES, url="/v1/responses"),
    )
    with pytest.raises(openai.BadRequestError) as raised:
        await upload(stack, data)
    assert stack.upstream.received == []
    error = raised.value
    assert error.response.headers["Turngate-Rejection"] == "orphan_result"
    message = error.body["message"]  # type: ignore[index]
    assert message.startswith("turngate [orphan_result]: 2 of the batch's 3 requests")
    assert "line 2 ('orphan'): [orphan_result]" in message
    assert "line 4 ('stray-output'): [orphan_result]" in message
    assert "'fine'" not in message
    refused = error.body["refused_requests"]  # type: ignore[index]
    assert [(r["location"], r["custom_id"], r["code"]) for r in refused] == [
        ("line 2", "orphan", "orphan_result"),
        ("line 4", "stray-output", "orphan_result"),
    ]


@pytest.mark.parametrize(
    ("case", "request_body", "rule"),
    [(case, request_body, rule) for case, request_body, status, rule in TABLE if rule],
    ids=[case for case, _body, _status, rule in TABLE if rule],
)
async def test_every_invalid_chat_sequence_refuses_its_batch_file(
    stack: Stack, case: str, request_body: dict[str, Any], rule: str
):
    data = jsonl(line("valid", VALID_CHAT), line("bad", request_body))
    with pytest.raises(openai.BadRequestError) as raised:
        await upload(stack, data)
    assert stack.upstream.received == []
    assert raised.value.response.headers["Turngate-Rejection"] == rule, case
    assert "line 2 ('bad')" in raised.value.body["message"]  # type: ignore[index]


async def test_an_upload_for_another_purpose_streams_up_unread(stack: Stack):
    data = jsonl(line("orphan", ORPHAN_CHAT))
    await upload(stack, data, purpose="assistants")
    (sent,) = stack.upstream.received
    assert data in sent.body


async def test_a_batch_file_over_the_body_limit_is_relayed_unchecked_and_logged(
    make_stack: StackFactory, caplog: pytest.LogCaptureFixture
):
    stack = await make_stack(max_body_bytes=4096)
    stack.upstream.reply(Reply.json(FILE))
    data = jsonl(*[line(f"r{i}", ORPHAN_CHAT) for i in range(40)])
    assert len(data) > 4096
    with caplog.at_level(logging.WARNING, logger="turngate.proxy"):
        await upload(stack, data)
    (sent,) = stack.upstream.received
    assert data in sent.body
    assert "a batch is relayed without checking its requests" in caplog.text


async def form(fields: list[tuple[str, bytes]]) -> tuple[str, bytes]:
    data = aiohttp.FormData()
    for name, content in fields:
        data.add_field(name, content, filename=f"{name}.jsonl")
    writer = data()
    return writer.content_type, await writer.as_bytes()


async def post_in_pieces(stack: Stack, content_type: str, raw: bytes, piece: int) -> int:
    """``raw`` posted a few bytes at a time (the proxy reads the form's start in many reads)."""

    async def pieces() -> AsyncIterator[bytes]:
        for start in range(0, len(raw), piece):
            await asyncio.sleep(0.001)
            yield raw[start : start + piece]

    headers = {"Content-Type": content_type, "Content-Length": str(len(raw))}
    async with (
        aiohttp.ClientSession() as session,
        session.post(stack.url + "/openai/v1/files", data=pieces(), headers=headers) as resp,
    ):
        await resp.read()
        return resp.status


@pytest.mark.parametrize("piece", [7, 64, 100_000])
async def test_an_upload_is_sent_byte_for_byte_however_its_start_arrives(stack: Stack, piece: int):
    other_type, other = await form(
        [("purpose", b"assistants"), ("file", jsonl(line("o", ORPHAN_CHAT)))]
    )
    assert await post_in_pieces(stack, other_type, other, piece) == 200
    valid_type, valid = await form([("purpose", b"batch"), ("file", jsonl(line("v", VALID_CHAT)))])
    assert await post_in_pieces(stack, valid_type, valid, piece) == 200
    assert [r.body for r in stack.upstream.received] == [other, valid]
    bad_type, bad = await form([("purpose", b"batch"), ("file", jsonl(line("o", ORPHAN_CHAT)))])
    assert await post_in_pieces(stack, bad_type, bad, piece) == 400
    # The purpose after the file: the whole form is read, and checked.
    late_type, late = await form([("file", jsonl(line("o", ORPHAN_CHAT))), ("purpose", b"batch")])
    assert await post_in_pieces(stack, late_type, late, piece) == 400
    assert len(stack.upstream.received) == 2


async def test_a_batch_file_just_under_the_body_limit_is_checked(make_stack: StackFactory):
    """The form's first field is read before the rest: what is left to read must not be held
    to the limit less what was read (an upload near the limit was refused 413)."""
    valid_type, valid = await form([("purpose", b"batch"), ("file", jsonl(line("v", VALID_CHAT)))])
    bad_type, bad = await form([("purpose", b"batch"), ("file", jsonl(line("o", ORPHAN_CHAT)))])
    stack = await make_stack(max_body_bytes=max(len(valid), len(bad)) + 4)
    stack.upstream.reply(Reply.json(FILE))
    assert await post_in_pieces(stack, valid_type, valid, 64) == 200
    assert await post_in_pieces(stack, bad_type, bad, 64) == 400
    assert [r.body for r in stack.upstream.received] == [valid]
