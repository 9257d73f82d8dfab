"""Reading an OpenAI Batch API upload: the form's fields, found whole or from its first
bytes, and the requests of its JSONL file."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from turngate.adapters.base import RouteInfo
from turngate.adapters.batches import BatchEntry
from turngate.adapters.openai_batch import batch_file, batch_lines, first_field, form_parts

# Field contents that look like the form's own syntax: line ends, dashes, a fake delimiter.
CONTENT = st.binary(max_size=200) | st.sampled_from(
    [b"", b"\r\n", b"--", b"\r\n--", b"\r\n\r\n", b"--boundary--\r\n", b"a\r\n--b\r\nc"]
)
FIELDS = st.lists(
    st.tuples(st.sampled_from(["purpose", "file", "expires_after[anchor]", "x"]), CONTENT),
    min_size=1,
    max_size=4,
)


def encoded(fields: list[tuple[str, bytes]]) -> tuple[str, bytes]:
    """The form as aiohttp's client encodes it (a real encoder, not the parser's mirror)."""

    async def encode() -> tuple[str, bytes]:
        form = aiohttp.FormData()
        for name, content in fields:
            form.add_field(name, content, filename=f"{name}.bin")
        writer = form()
        return writer.content_type, await writer.as_bytes()

    return asyncio.run(encode())


@settings(max_examples=150, deadline=None)
@given(FIELDS)
def test_every_field_of_a_form_is_read_back_exactly(fields: list[tuple[str, bytes]]) -> None:
    content_type, body = encoded(fields)
    parts = form_parts(content_type, body)
    assert parts is not None
    assert [(p.name, p.content) for p in parts] == fields


@settings(max_examples=60, deadline=None)
@given(FIELDS)
def test_the_first_field_is_known_exactly_once_its_bytes_are_all_in(
    fields: list[tuple[str, bytes]],
) -> None:
    content_type, body = encoded(fields)
    found = [first_field(content_type, body[:cut]) for cut in range(len(body) + 1)]
    complete = next(cut for cut, part in enumerate(found) if part is not None)
    assert all(part is None for part in found[:complete])
    assert {(p.name, p.content) for p in found[complete:] if p is not None} == {fields[0]}
    # Known as soon as the delimiter after it is in, not a byte later.
    delimiter = b"\r\n--" + content_type.partition("boundary=")[2].encode()
    assert complete == body.index(delimiter, len(delimiter) - 2) + len(delimiter)


def test_a_cut_form_or_another_media_type_is_no_form() -> None:
    content_type, body = encoded([("purpose", b"batch"), ("file", b"{}")])
    assert form_parts(content_type, body[:-8]) is None
    assert form_parts("application/json", body) is None
    assert form_parts("multipart/form-data", body) is None


def test_the_file_is_read_only_from_an_upload_for_the_batch_api() -> None:
    data = b'{"custom_id": "a"}\n'
    content_type, body = encoded([("purpose", b"batch"), ("file", data)])
    assert batch_file(content_type, body) == data
    content_type, body = encoded([("file", data), ("purpose", b"batch")])
    assert batch_file(content_type, body) == data
    content_type, body = encoded([("purpose", b"assistants"), ("file", data)])
    assert batch_file(content_type, body) is None


def test_lines_for_the_parsed_endpoints_become_requests_and_the_rest_is_left() -> None:
    chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    lines = [
        {"custom_id": "c", "method": "POST", "url": "/v1/chat/completions", "body": chat},
        {"custom_id": "e", "method": "POST", "url": "/v1/embeddings", "body": {"input": "x"}},
        {"custom_id": "r", "method": "POST", "url": "/v1/responses", "body": {"input": "hi"}},
        {"custom_id": "n", "url": "/v1/responses", "body": "not an object"},
    ]
    data = b"\r\n".join(orjson.dumps(line) for line in lines) + b"\n\nnot json\n"
    assert list(batch_lines(data)) == [
        BatchEntry("openai_chat", "line 1", "c", chat, RouteInfo()),
        BatchEntry("openai_responses", "line 3", "r", {"input": "hi"}, RouteInfo()),
    ]
