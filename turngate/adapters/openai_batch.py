"""The chat requests of an OpenAI Batch API input file, read from its upload.

    client.files.create(file=..., purpose="batch")   POST /v1/files, multipart/form-data:
        purpose = "batch"
        file    = JSONL, one request a line:
                  {"custom_id": ..., "method": "POST", "url": "/v1/chat/completions",
                   "body": <a Chat Completions request>}        (or "/v1/responses")

OpenAI checks a batch's requests only as it runs them, and reports a refused one in the
batch's error file; turngate checks each line's body when the file is uploaded. Lines for
other endpoints (embeddings, moderations) and lines that are no JSON object with a ``body``
object are left to the provider, which validates the file's format when the batch is
created.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from email.message import Message

import orjson

from turngate.adapters.base import RouteInfo
from turngate.adapters.batches import BatchEntry
from turngate.graph.model import ApiName

LINE_APIS: dict[str, ApiName] = {
    "/v1/chat/completions": "openai_chat",
    "/v1/responses": "openai_responses",
    # Azure OpenAI's batch files name the deployments API's paths.
    "/chat/completions": "openai_chat",
    "/responses": "openai_responses",
}


@dataclass(frozen=True)
class FormPart:
    name: str | None
    content: bytes


def form_parts(content_type: str, body: bytes) -> list[FormPart] | None:
    """The parts of a ``multipart/form-data`` body (RFC 7578), None when it is not one."""
    sections = _sections(content_type, body)
    if sections is None:
        return None
    parts: list[FormPart] = []
    for section in sections[1:]:
        if section.startswith(b"--"):
            return parts
        part = _part(section)
        if part is None:
            return None
        parts.append(part)
    # No closing delimiter: not a whole form.
    return None


def first_field(content_type: str, head: bytes) -> FormPart | None:
    """The first part of a ``multipart/form-data`` body that starts with ``head``, once
    ``head`` holds all of it (None until then, or when the body is no form)."""
    sections = _sections(content_type, head)
    if sections is None or len(sections) < 3:
        return None
    return _part(sections[1])


def _sections(content_type: str, body: bytes) -> list[bytes] | None:
    header = Message()
    header["Content-Type"] = content_type
    boundary = header.get_param("boundary")
    if header.get_content_type() != "multipart/form-data" or not isinstance(boundary, str):
        return None
    # RFC 2046: 1 to 70 ASCII characters; another header names no form turngate can read.
    if not boundary or not boundary.isascii():
        return None
    return (b"\r\n" + body).split(b"\r\n--" + boundary.encode("ascii"))


def _part(section: bytes) -> FormPart | None:
    # What follows a delimiter: transport padding and CRLF, the part's headers, a blank line.
    _padding, found, rest = section.partition(b"\r\n")
    headers, blank, content = rest.partition(b"\r\n\r\n")
    if not found or not blank:
        return None
    return FormPart(_field_name(headers), content)


def _field_name(headers: bytes) -> str | None:
    for line in headers.decode("latin-1").split("\r\n"):
        name, _colon, value = line.partition(":")
        if name.strip().lower() == "content-disposition":
            disposition = Message()
            disposition["Content-Disposition"] = value.strip()
            field = disposition.get_param("name", header="content-disposition")
            return field if isinstance(field, str) else None
    return None


def batch_file(content_type: str, body: bytes) -> bytes | None:
    """The file of an upload for the Batch API (``purpose`` is ``batch``), else None."""
    parts = form_parts(content_type, body)
    if parts is None:
        return None
    fields = {part.name: part.content for part in reversed(parts)}
    if fields.get("purpose", b"").strip() != b"batch":
        return None
    return fields.get("file")


def batch_lines(data: bytes) -> Iterator[BatchEntry]:
    """Each line's request, for the lines whose endpoint turngate parses."""
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(value, dict) or not isinstance(value.get("body"), dict):
            continue
        url = value.get("url")
        api = LINE_APIS.get(url) if isinstance(url, str) else None
        if api is None:
            continue
        name = value.get("custom_id")
        named = name if isinstance(name, str) else None
        yield BatchEntry(api, f"line {number}", named, value["body"], RouteInfo())
