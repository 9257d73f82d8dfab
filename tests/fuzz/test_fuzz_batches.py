"""Batch readers under fuzzing: whatever a client uploads as a batch (any JSON, any bytes,
any multipart header), finding its requests raises nothing; the requests found are then
judged by adapters the other fuzz tests cover."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from tests.fixtures_dir import COUNTS
from tests.fuzz.strategies import FUZZ, json_objects
from turngate.adapters.base import RouteInfo
from turngate.adapters.batches import batch_entries, gemini_file, gemini_file_lines
from turngate.adapters.openai_batch import batch_file, batch_lines, first_field, form_parts

SHAPES = st.sampled_from(
    [
        lambda v: v,
        lambda v: {"requests": [v, {"custom_id": v, "params": v}]},
        lambda v: {"batch": {"inputConfig": {"requests": {"requests": [v, {"request": v}]}}}},
    ]
)
CONTENT_TYPES = st.one_of(
    st.text(max_size=80),
    st.builds(lambda b: f"multipart/form-data; boundary={b}", st.text(max_size=40)),
    st.builds(lambda b: f"multipart/form-data; boundary*=utf-8''{b}", st.text(max_size=20)),
)
FORM_BYTES = st.one_of(
    st.binary(max_size=300),
    st.builds(
        lambda b, body: b"--" + b.encode("utf-8", "replace") + b"\r\n" + body,
        st.text(max_size=10),
        st.binary(max_size=200),
    ),
)


@FUZZ
@given(shape=SHAPES, value=st.one_of(json_objects(), st.lists(json_objects(), max_size=3)))
def test_finding_a_batchs_requests_raises_nothing(shape: Any, value: Any) -> None:
    body = shape(value)
    found = []
    if isinstance(body, dict):
        found += list(batch_entries("anthropic", RouteInfo(), body))
        found += list(batch_entries("gemini", RouteInfo(model="m", stream=False), body))
    found += list(gemini_file_lines(body if isinstance(body, list) else [body]))
    assert all(isinstance(entry.body, dict) for entry in found)
    COUNTS["fuzz batch bodies"] += 1


@FUZZ
@given(content_type=CONTENT_TYPES, data=FORM_BYTES)
def test_reading_an_upload_raises_nothing(content_type: str, data: bytes) -> None:
    form_parts(content_type, data)
    first_field(content_type, data)
    file = batch_file(content_type, data)
    list(batch_lines(data if file is None else file))
    COUNTS["fuzz batch uploads"] += 1


@FUZZ
@given(
    headers=st.binary(max_size=120)
    | st.builds(lambda v: b"Content-Disposition: form-data; " + v, st.binary(max_size=80)),
    content=st.binary(max_size=200),
)
def test_a_form_whose_parts_hold_anything_is_read_without_raising(
    headers: bytes, content: bytes
) -> None:
    data = b"--xyz\r\n" + headers + b"\r\n\r\n" + content + b"\r\n--xyz--\r\n"
    content_type = "multipart/form-data; boundary=xyz"
    form_parts(content_type, data)
    first_field(content_type, data)
    batch_file(content_type, data)


GEMINI_FILES = st.one_of(
    st.binary(max_size=300),
    st.lists(json_objects(), max_size=4).map(
        lambda values: b"\n".join(orjson.dumps({"key": "k", "request": v}) for v in values)
    ),
    st.lists(st.one_of(json_objects(), st.binary(max_size=40)), max_size=4).map(
        lambda values: b"\n".join(v if isinstance(v, bytes) else orjson.dumps(v) for v in values)
    ),
)


@FUZZ
@given(data=GEMINI_FILES)
def test_reading_a_gemini_upload_raises_nothing(data: bytes) -> None:
    entries = gemini_file(data)
    assert entries is None or all(isinstance(entry.body, dict) for entry in entries)
    COUNTS["fuzz batch uploads"] += 1
