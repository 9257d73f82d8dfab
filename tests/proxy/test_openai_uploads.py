"""OpenAI's Uploads API: a Batch API input file sent in parts is checked before the upload is
completed.

``client.uploads.upload_file_chunked(..., purpose="batch")`` starts an upload, sends the file
in parts, then completes the upload with the parts' ids in order; OpenAI makes the file only
then. turngate keeps each part of a batch upload as it relays it, and checks the joined file
at completion: an invalid request refuses the completion (the SDK's normal 400 naming the
line), which is never sent, so no file is made.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import orjson
import pytest

from tests.proxy.conftest import StackFactory
from tests.proxy.fake_upstream import Reply
from tests.proxy.sdk_support import MODES, call
from tests.proxy.stack import OPENAI_KEY, Stack
from tests.proxy.test_openai_batch_files import ORPHAN_CHAT, VALID_CHAT, jsonl, line

UPLOAD = {
    "id": "upload_1",
    "object": "upload",
    "bytes": 1,
    "created_at": 0,
    "expires_at": 3600,
    "filename": "batch.jsonl",
    "purpose": "batch",
    "status": "pending",
}
COMPLETED = {**UPLOAD, "status": "completed", "file": None}
VALID_FILE = jsonl(line("one", VALID_CHAT), line("two", VALID_CHAT))
INVALID_FILE = jsonl(line("one", VALID_CHAT), line("bad", ORPHAN_CHAT))


def part(number: int) -> Reply:
    answer = {"id": f"part_{number}", "object": "upload.part", "created_at": 0}
    return Reply.json({**answer, "upload_id": "upload_1"})


@pytest.fixture
async def stack(make_stack: StackFactory) -> Stack:
    return await make_stack()


@pytest.fixture(params=MODES)
async def uploads(request: pytest.FixtureRequest, stack: Stack) -> AsyncIterator[Any]:
    cls = openai.OpenAI if request.param == "sync" else openai.AsyncOpenAI
    client = cls(api_key=OPENAI_KEY, base_url=stack.base("/openai/v1"), max_retries=0)
    api = client.uploads
    api.mode = request.param
    yield api
    await call(request.param, client.close)


async def upload_in_parts(uploads: Any, data: bytes, parts: int, purpose: str = "batch") -> Any:
    return await call(
        uploads.mode,
        uploads.upload_file_chunked,
        file=data,
        filename="batch.jsonl",
        bytes=len(data),
        mime_type="text/jsonl",
        purpose=purpose,
        part_size=len(data) // parts + 1,
    )


def steps(stack: Stack) -> list[str]:
    return [received.path_qs for received in stack.upstream.received]


async def test_a_valid_batch_file_in_parts_is_completed(uploads: Any, stack: Stack):
    stack.upstream.replies(Reply.json(UPLOAD), part(1), part(2), Reply.json(COMPLETED))
    done = await upload_in_parts(uploads, VALID_FILE, parts=2)
    assert done.status == "completed"
    assert steps(stack) == [
        "/v1/uploads",
        "/v1/uploads/upload_1/parts",
        "/v1/uploads/upload_1/parts",
        "/v1/uploads/upload_1/complete",
    ]
    assert stack.upstream.received[-1].json()["part_ids"] == ["part_1", "part_2"]


async def test_a_batch_file_with_an_invalid_request_is_never_completed(uploads: Any, stack: Stack):
    stack.upstream.replies(Reply.json(UPLOAD), part(1), part(2), Reply.json(COMPLETED))
    with pytest.raises(openai.BadRequestError) as raised:
        await upload_in_parts(uploads, INVALID_FILE, parts=2)
    assert "line 2 ('bad')" in str(raised.value)
    assert raised.value.response.headers["Turngate-Rejection"] == "orphan_result"
    refused = orjson.loads(raised.value.response.content)["error"]["refused_requests"]
    assert [(r["location"], r["custom_id"]) for r in refused] == [("line 2", "bad")]
    # OpenAI makes the file only at completion: the upload expires unused.
    assert steps(stack)[-1] == "/v1/uploads/upload_1/parts"


async def test_parts_are_joined_in_the_order_the_completion_names(stack: Stack):
    # Joined in the order they were sent, the refused request would be line 2.
    first, second = line("bad", ORPHAN_CHAT), line("one", VALID_CHAT)
    stack.upstream.replies(Reply.json(UPLOAD), part(1), part(2), Reply.json(COMPLETED))
    client = openai.AsyncOpenAI(api_key=OPENAI_KEY, base_url=stack.base("/openai/v1"))
    try:
        await client.uploads.create(
            bytes=1, filename="b.jsonl", mime_type="text/jsonl", purpose="batch"
        )
        await client.uploads.parts.create("upload_1", data=second + b"\n")
        await client.uploads.parts.create("upload_1", data=first + b"\n")
        with pytest.raises(openai.BadRequestError, match=r"line 1 \('bad'\)"):
            await client.uploads.complete("upload_1", part_ids=["part_2", "part_1"])
    finally:
        await client.close()


async def test_an_upload_for_another_purpose_is_relayed_unread(uploads: Any, stack: Stack):
    stack.upstream.replies(Reply.json(UPLOAD), part(1), part(2), Reply.json(COMPLETED))
    await upload_in_parts(uploads, INVALID_FILE, parts=2, purpose="user_data")
    assert steps(stack)[-1] == "/v1/uploads/upload_1/complete"


async def completed_unchecked(
    stack: Stack, caplog: pytest.LogCaptureFixture, parts: list[bytes], part_ids: list[str]
) -> None:
    """Start a batch upload, send ``parts``, complete it naming ``part_ids``: the upload is
    completed, and turngate says it could not check the file."""
    client = openai.AsyncOpenAI(api_key=OPENAI_KEY, base_url=stack.base("/openai/v1"))
    try:
        await client.uploads.create(
            bytes=1, filename="b.jsonl", mime_type="text/jsonl", purpose="batch"
        )
        for data in parts:
            await client.uploads.parts.create("upload_1", data=data)
        with caplog.at_level("WARNING", logger="turngate.proxy"):
            done = await client.uploads.complete("upload_1", part_ids=part_ids)
    finally:
        await client.close()
    assert done.status == "completed"
    assert "a batch is relayed without checking its requests" in caplog.text


async def test_a_completion_naming_parts_turngate_did_not_see_is_relayed_unchecked(
    stack: Stack, caplog: pytest.LogCaptureFixture
):
    # Parts sent before a restart, say: the file cannot be read whole.
    stack.upstream.replies(Reply.json(UPLOAD), part(1), Reply.json(COMPLETED))
    await completed_unchecked(stack, caplog, [INVALID_FILE], ["part_1", "part_0"])


async def test_parts_outgrowing_the_body_limit_are_completed_unchecked(
    make_stack: StackFactory, caplog: pytest.LogCaptureFixture
):
    stack = await make_stack(max_body_bytes=len(INVALID_FILE) + 200)
    stack.upstream.replies(Reply.json(UPLOAD), part(1), part(2), Reply.json(COMPLETED))
    parts = [INVALID_FILE, INVALID_FILE]
    await completed_unchecked(stack, caplog, parts, ["part_1", "part_2"])


async def test_an_invalid_batch_file_cut_at_every_byte_is_never_completed(stack: Stack):
    client = openai.AsyncOpenAI(api_key=OPENAI_KEY, base_url=stack.base("/openai/v1"))
    try:
        for cut in range(1, len(INVALID_FILE)):
            stack.upstream.received.clear()
            # No answer for the completion: it must not be sent.
            stack.upstream.replies(Reply.json(UPLOAD), part(1), part(2))
            await client.uploads.create(
                bytes=len(INVALID_FILE), filename="b.jsonl", mime_type="text/jsonl", purpose="batch"
            )
            await client.uploads.parts.create("upload_1", data=INVALID_FILE[:cut])
            await client.uploads.parts.create("upload_1", data=INVALID_FILE[cut:])
            with pytest.raises(openai.BadRequestError, match=r"line 2 \('bad'\)"):
                await client.uploads.complete("upload_1", part_ids=["part_1", "part_2"])
            assert steps(stack)[-1] == "/v1/uploads/upload_1/parts", cut
    finally:
        await client.close()
