"""Gemini Files API uploads through turngate: the bytes come back through it, and a batch
input file is checked before it is sent.

google-genai's ``files.upload`` starts an upload, then sends the file's bytes to the address
the provider answers (``X-Goog-Upload-URL``): the provider's own host, which would take the
bytes past the sidecar. turngate answers that address below its own /gemini prefix. A file
sent whole whose lines are Gemini batch requests (``{"key": ..., "request": {...}}``) is
checked as a batch is: refused with the SDK's normal 400 naming each refused line, its
bytes never sent.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from itertools import pairwise
from typing import Any

import aiohttp
import orjson
import pytest
from google import genai
from google.genai import _api_client
from google.genai import errors as genai_errors

from tests.proxy.conftest import StackFactory
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import genai_sdk
from tests.proxy.sdk_support import GENAI_AIOHTTP_WARNING, MODES, call
from tests.proxy.stack import Stack
from tests.proxy.test_batches import GEMINI_CASES, VALID_GEMINI

pytestmark = GENAI_AIOHTTP_WARNING

SESSION = "/upload/v1beta/files?upload_id=ABC-123&upload_protocol=resumable"
UPLOADED = {"file": {"name": "files/nightly-1", "mimeType": "jsonl", "sizeBytes": "1"}}
FINAL = Reply.json(UPLOADED, headers={"X-Goog-Upload-Status": "final"})
ACTIVE = Reply(body=b"", headers={"X-Goog-Upload-Status": "active"})


def started(stack: Stack, address: str | None = None) -> Reply:
    """The provider's answer to an upload's start: where to send the bytes."""
    where = address or f"http://{stack.upstream_host}{SESSION}"
    return Reply(body=b"", headers={"X-Goog-Upload-URL": where, "X-Goog-Upload-Status": "active"})


def jsonl(*lines: dict[str, Any]) -> bytes:
    return b"\n".join(orjson.dumps(line) for line in lines) + b"\n"


def line(key: str, contents: list[dict[str, Any]], **request: Any) -> dict[str, Any]:
    return {"key": key, "request": {"contents": contents, **request}}


# A function's response that answers no call.
ORPHAN = [{"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}]
VALID_FILE = jsonl(line("one", VALID_GEMINI), line("two", VALID_GEMINI[:1]))


@pytest.fixture
async def stack(make_stack: StackFactory, caplog: pytest.LogCaptureFixture) -> Stack:
    # turngate's access log tells what reached it (a stack that records bodies would read
    # them before the relay).
    caplog.set_level("INFO", logger="turngate.access")
    return await make_stack()


@pytest.fixture(params=MODES)
async def files(request: pytest.FixtureRequest, stack: Stack) -> AsyncIterator[Any]:
    client: genai.Client = genai_sdk(stack)
    api = client.files if request.param == "sync" else client.aio.files
    api.mode, api.client = request.param, client
    yield api
    await call(request.param, client.close if request.param == "sync" else client.aio.aclose)


async def upload(files: Any, data: bytes, mime_type: str = "jsonl") -> Any:
    config = {"mime_type": mime_type, "display_name": "nightly"}
    return await call(files.mode, files.upload, file=io.BytesIO(data), config=config)


def sends_through_turngate(caplog: pytest.LogCaptureFixture) -> int:
    """How many times the client sent the file's bytes to turngate."""
    prefix = f"POST /gemini{SESSION} "
    return sum(1 for r in caplog.records if r.getMessage().startswith(prefix))


async def test_a_files_bytes_come_back_through_turngate(
    files: Any, stack: Stack, caplog: pytest.LogCaptureFixture
):
    stack.upstream.replies(started(stack), FINAL)
    data = b"quarterly revenue, by region\n"
    uploaded = await upload(files, data, mime_type="text/plain")
    assert uploaded.name == "files/nightly-1"
    start, sent = stack.upstream.received
    assert start.path_qs == "/upload/v1beta/files"
    assert (sent.path_qs, sent.body) == (SESSION, data)
    assert sends_through_turngate(caplog) == 1


@pytest.mark.parametrize(
    ("provider_address", "told"),
    [
        ("{upstream}" + SESSION, "{turngate}/gemini" + SESSION),
        ("https://uploads.example.com/x?upload_id=1", "https://uploads.example.com/x?upload_id=1"),
    ],
    ids=["the provider's own host", "another host"],
)
async def test_the_client_is_told_turngates_address_for_the_providers_own(
    stack: Stack, provider_address: str, told: str
):
    upstream = f"http://{stack.upstream_host}"
    stack.upstream.reply(started(stack, provider_address.format(upstream=upstream)))
    headers = {"X-Goog-Upload-Protocol": "resumable", "X-Goog-Upload-Command": "start"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(stack.base("/gemini/upload/v1beta/files"), json={}, headers=headers) as got,
    ):
        assert got.headers["X-Goog-Upload-URL"] == told.format(turngate=stack.url)


async def test_a_valid_batch_file_is_sent_as_the_clients_bytes(files: Any, stack: Stack):
    stack.upstream.replies(started(stack), FINAL)
    await upload(files, VALID_FILE)
    assert stack.upstream.received[-1].body == VALID_FILE


async def test_a_batch_file_with_an_invalid_request_is_refused_before_its_bytes_are_sent(
    files: Any, stack: Stack, caplog: pytest.LogCaptureFixture
):
    stack.upstream.replies(started(stack), FINAL)
    data = jsonl(line("fine", VALID_GEMINI), line("bad", ORPHAN))
    with pytest.raises(genai_errors.ClientError) as raised:
        await upload(files, data)
    assert raised.value.code == 400
    assert "line 2 ('bad')" in str(raised.value.message)
    details = raised.value.details["error"]["details"]
    (violations,) = [d["fieldViolations"] for d in details if "fieldViolations" in d]
    assert [v["field"] for v in violations] == ["line 2"]
    # Only the upload's start reached the provider; the SDK did not send the bytes again.
    assert [r.path_qs for r in stack.upstream.received] == ["/upload/v1beta/files"]
    assert sends_through_turngate(caplog) == 1


@pytest.mark.parametrize(
    ("case", "request_body", "rules"), GEMINI_CASES, ids=[case[0] for case in GEMINI_CASES]
)
async def test_every_invalid_gemini_sequence_refuses_its_batch_file(
    stack: Stack, case: str, request_body: dict[str, Any], rules: set[str]
):
    stack.upstream.reply(FINAL)
    data = jsonl(line("fine", VALID_GEMINI), {"key": "bad", "request": request_body})
    headers = {"X-Goog-Upload-Command": "upload, finalize", "X-Goog-Upload-Offset": "0"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(stack.base("/gemini" + SESSION), data=data, headers=headers) as got,
    ):
        assert got.status == 400
        assert got.headers["Turngate-Rejection"] in rules, case
        assert got.headers["X-Goog-Upload-Status"] == "final"
    assert stack.upstream.received == []


def in_pieces(monkeypatch: pytest.MonkeyPatch, size: int) -> None:
    """google-genai sends a file larger than ``size`` in pieces of ``size`` (8 MB as shipped)."""
    monkeypatch.setattr(_api_client, "CHUNK_SIZE", size)


async def test_a_batch_file_sent_in_pieces_is_checked_before_its_last_piece_is_sent(
    files: Any, stack: Stack, monkeypatch: pytest.MonkeyPatch
):
    data = jsonl(line("fine", VALID_GEMINI), line("also fine", VALID_GEMINI), line("bad", ORPHAN))
    piece = len(data) // 3 + 1
    in_pieces(monkeypatch, piece)
    stack.upstream.replies(started(stack), ACTIVE, ACTIVE, FINAL)
    with pytest.raises(genai_errors.ClientError) as raised:
        await upload(files, data)
    assert raised.value.code == 400
    assert "line 3 ('bad')" in str(raised.value.message)
    # The upload is never finalized: the provider makes no file of the first two pieces.
    start, *pieces = stack.upstream.received
    assert start.path_qs == "/upload/v1beta/files"
    assert [p.headers["X-Goog-Upload-Command"] for p in pieces] == ["upload", "upload"]
    assert b"".join(p.body for p in pieces) == data[: 2 * piece]


async def test_a_valid_batch_file_sent_in_pieces_is_sent_whole(
    files: Any, stack: Stack, monkeypatch: pytest.MonkeyPatch
):
    in_pieces(monkeypatch, len(VALID_FILE) // 2 + 1)
    stack.upstream.replies(started(stack), ACTIVE, FINAL)
    await upload(files, VALID_FILE)
    assert b"".join(r.body for r in stack.upstream.received[1:]) == VALID_FILE


async def test_a_batch_file_whose_pieces_outgrow_the_body_limit_is_relayed_unchecked(
    make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    data = jsonl(line("fine", VALID_GEMINI), line("bad", ORPHAN))
    stack = await make_stack(max_body_bytes=len(data) - 10)
    in_pieces(monkeypatch, len(data) // 2 + 1)
    stack.upstream.replies(started(stack), ACTIVE, FINAL)
    client = genai_sdk(stack)
    try:
        with caplog.at_level("WARNING", logger="turngate.proxy"):
            await client.aio.files.upload(file=io.BytesIO(data), config={"mime_type": "jsonl"})
    finally:
        await client.aio.aclose()
    assert b"".join(r.body for r in stack.upstream.received[1:]) == data
    assert "a batch is relayed without checking its requests" in caplog.text


async def test_jsonl_that_is_no_batch_file_is_sent_unchecked(files: Any, stack: Stack):
    stack.upstream.replies(started(stack), FINAL)
    data = jsonl({"role": "user", "text": "not a request"}, {"request": "not an object"})
    await upload(files, data)
    assert stack.upstream.received[-1].body == data


async def test_a_file_search_stores_upload_comes_back_through_turngate_unchecked(
    files: Any, stack: Stack, caplog: pytest.LogCaptureFixture
):
    # Documents for retrieval, not batch requests: relayed as they come, even JSONL.
    store = "fileSearchStores/handbook-1"
    address = f"http://{stack.upstream_host}/upload/v1beta/{store}:uploadToFileSearchStore"
    session = "?upload_id=XYZ&upload_protocol=resumable"
    operation = {"name": f"{store}/upload/operations/op-1", "done": False}
    stack.upstream.replies(
        started(stack, address + session),
        Reply.json(operation, headers={"X-Goog-Upload-Status": "final"}),
    )
    client = files.client
    api = client.file_search_stores if files.mode == "sync" else client.aio.file_search_stores
    done = await call(
        files.mode,
        api.upload_to_file_search_store,
        file_search_store_name=store,
        file=io.BytesIO(VALID_FILE),
        config={"mime_type": "jsonl"},
    )
    assert done.name == operation["name"]
    assert stack.upstream.received[-1].body == VALID_FILE
    prefix = f"POST /gemini/upload/v1beta/{store}:uploadToFileSearchStore{session} "
    assert any(r.getMessage().startswith(prefix) for r in caplog.records)


# -- adversarial: the file cut anywhere, pieces sent again or out of order ------------------


async def post_piece(stack: Stack, piece: bytes, offset: int, *, final: bool) -> int:
    command = "upload, finalize" if final else "upload"
    headers = {"X-Goog-Upload-Command": command, "X-Goog-Upload-Offset": str(offset)}
    async with (
        aiohttp.ClientSession() as session,
        session.post(stack.base("/gemini" + SESSION), data=piece, headers=headers) as got,
    ):
        return got.status


async def send_in_pieces(stack: Stack, data: bytes, cuts: list[int]) -> list[int]:
    """Send ``data`` as the pieces between ``cuts``, each at its offset, the last one
    finalizing, as google-genai does; the status of each answer."""
    bounds = [0, *cuts, len(data)]
    return [
        await post_piece(stack, data[start:end], start, final=end == len(data))
        for start, end in pairwise(bounds)
    ]


def finalized(stack: Stack) -> list[bytes]:
    return [
        r.body for r in stack.upstream.received if "finalize" in r.headers["X-Goog-Upload-Command"]
    ]


async def test_an_invalid_batch_file_cut_at_every_byte_is_never_finalized(stack: Stack):
    stack.upstream.reply(FINAL)
    data = jsonl(line("fine", VALID_GEMINI), line("bad", ORPHAN))
    for cut in range(1, len(data)):
        stack.upstream.received.clear()
        assert await send_in_pieces(stack, data, [cut]) == [200, 400], cut
        assert finalized(stack) == [], cut
        assert b"".join(r.body for r in stack.upstream.received) == data[:cut]


async def test_a_valid_batch_file_cut_at_every_byte_arrives_whole(stack: Stack):
    stack.upstream.reply(FINAL)
    for cut in range(1, len(VALID_FILE)):
        stack.upstream.received.clear()
        assert await send_in_pieces(stack, VALID_FILE, [cut]) == [200, 200], cut
        assert b"".join(r.body for r in stack.upstream.received) == VALID_FILE


async def test_a_piece_sent_again_is_kept_once(stack: Stack):
    # A client that lost the answer to a piece sends it again.
    stack.upstream.reply(FINAL)
    data = jsonl(line("fine", VALID_GEMINI), line("bad", ORPHAN))
    cuts = [len(data) // 3, 2 * len(data) // 3]
    pieces = [(0, cuts[0]), (0, cuts[0]), (cuts[0], cuts[1]), (cuts[0], cuts[1])]
    for start, end in pieces:
        assert await post_piece(stack, data[start:end], start, final=False) == 200
    assert await post_piece(stack, data[cuts[1] :], cuts[1], final=True) == 400
    assert finalized(stack) == []


async def test_a_file_starting_with_blank_lines_is_checked_too(stack: Stack):
    stack.upstream.reply(FINAL)
    data = b"\n\n" + jsonl(line("fine", VALID_GEMINI), line("bad", ORPHAN))
    assert await send_in_pieces(stack, data, [1, 5]) == [200, 200, 400]
    assert finalized(stack) == []


async def test_pieces_out_of_order_are_relayed_unchecked_and_counted(
    stack: Stack, caplog: pytest.LogCaptureFixture
):
    stack.upstream.reply(FINAL)
    data = jsonl(line("fine", VALID_GEMINI), line("bad", ORPHAN))
    cut = len(data) // 2
    assert await post_piece(stack, data[:cut], 0, final=False) == 200
    # The last piece claims an offset the kept bytes do not reach.
    with caplog.at_level("WARNING", logger="turngate.proxy"):
        assert await post_piece(stack, data[cut + 1 :], cut + 1, final=True) == 200
    assert "a piece of the file came out of order" in caplog.text
