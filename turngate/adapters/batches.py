"""The chat requests a batch carries, each as the body its API's adapter parses.

    openai      POST /v1/files (an upload whose purpose is "batch": adapters/openai_batch.py)
                POST /v1/uploads, /v1/uploads/{id}/parts, /v1/uploads/{id}/complete (the
                Uploads API: a Batch API file sent in parts, checked at completion)
    anthropic   POST /v1/messages/batches
                {"requests": [{"custom_id": ..., "params": <a Messages request>}, ...]}
    gemini      POST /{version}/models/{m}:batchGenerateContent
                {"batch": {"inputConfig": {"requests": {"requests": [
                    {"request": <a generateContent request>, "metadata": {"key": ...}}, ...]}}}}
                POST /upload/{version}/files (the bytes of a Files API upload, sent whole:
                a batch input file is JSONL, {"key": ..., "request": <...>} a line)

A provider runs each request of a batch on its own, hours later, and reports one it refuses
only in the batch's results; turngate checks them all before the batch is sent. What is not
shaped as above (no list of requests, an entry without an object to parse, an upload that
is no batch input file) holds nothing to check here: the provider judges it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from turngate.adapters.base import RouteInfo
from turngate.graph.model import ApiName

ANTHROPIC_BATCHES = "/v1/messages/batches"
OPENAI_FILES = "/v1/files"
GEMINI_BATCH = re.compile(
    r"/(?P<version>v1|v1beta|v1alpha)/models/(?P<model>[^/:]+):batchGenerateContent"
)
GEMINI_UPLOAD = re.compile(r"/upload/(v1|v1beta|v1alpha)/files")
# The Uploads API's steps: start (no id), a part, completion.
OPENAI_UPLOADS = re.compile(r"/v1/uploads(?:/(?P<upload>[^/]+)/(?P<step>parts|complete|cancel))?")


@dataclass(frozen=True)
class BatchEntry:
    # The API the request is written for.
    api: ApiName
    # Where the entry is in the batch, as the client wrote it (for the refusal's message).
    location: str
    # What the client named it: Anthropic's ``custom_id``, Gemini's ``metadata.key``.
    name: str | None
    body: Mapping[str, Any]
    info: RouteInfo


def batch_route(provider: str, method: str, upstream_path: str) -> tuple[ApiName, RouteInfo] | None:
    """The API whose chat requests a batch created at ``upstream_path`` (decoded, no query)
    holds, and what the path says of them (a Gemini batch's model)."""
    if method != "POST":
        return None
    if provider == "openai" and (
        upstream_path == OPENAI_FILES or OPENAI_UPLOADS.fullmatch(upstream_path)
    ):
        # An upload: only one for the Batch API holds requests (adapters/openai_batch.py).
        return "openai_chat", RouteInfo()
    if provider == "anthropic" and upstream_path == ANTHROPIC_BATCHES:
        return "anthropic", RouteInfo()
    if provider == "gemini":
        found = GEMINI_BATCH.fullmatch(upstream_path)
        if found is not None:
            return "gemini", RouteInfo(model=found["model"], stream=False)
        if GEMINI_UPLOAD.fullmatch(upstream_path):
            # An upload: only one that is a batch input file holds requests (gemini_file).
            return "gemini", RouteInfo(stream=False)
    return None


def batch_entries(api: ApiName, info: RouteInfo, body: Mapping[str, Any]) -> Iterator[BatchEntry]:
    if api == "anthropic":
        yield from _anthropic(body, RouteInfo(betas=info.betas, api_version=info.api_version))
    elif api == "gemini" and info.model is not None:
        yield from _gemini(body, info.model)


def _anthropic(body: Mapping[str, Any], sent_with: RouteInfo) -> Iterator[BatchEntry]:
    """Each request's params, judged under the headers the batch was created with."""
    requests = body.get("requests")
    if not isinstance(requests, list):
        return
    for index, entry in enumerate(requests):
        if not isinstance(entry, dict) or not isinstance(entry.get("params"), dict):
            continue
        name = entry.get("custom_id")
        yield BatchEntry(
            "anthropic",
            f"requests[{index}]",
            name if isinstance(name, str) else None,
            entry["params"],
            sent_with,
        )


def _gemini(body: Mapping[str, Any], model: str) -> Iterator[BatchEntry]:
    requests = json_path(body, "batch", "inputConfig", "requests", "requests")
    if not isinstance(requests, list):
        return
    for index, entry in enumerate(requests):
        if isinstance(entry, dict) and isinstance(entry.get("request"), dict):
            key = json_path(entry, "metadata", "key")
            where = f"batch.inputConfig.requests.requests[{index}]"
            yield _gemini_entry(where, key, entry["request"], model)


def gemini_file_lines(lines: list[Any]) -> Iterator[BatchEntry]:
    """The requests of a Gemini batch input file (JSONL: ``{"key": ..., "request": {...}}``
    a line), for the lines shaped so."""
    for number, line in enumerate(lines, start=1):
        if isinstance(line, dict) and isinstance(line.get("request"), dict):
            yield _gemini_entry(f"line {number}", line.get("key"), line["request"], None)


def gemini_file(data: bytes) -> list[BatchEntry] | None:
    """The requests of ``data`` when it is a Gemini batch input file (JSONL, every line an
    object with a ``request``), else None."""
    lines = [line for line in data.splitlines() if line.strip()]
    # Most uploads are no JSON at all: one look at the first byte, not a parse of them.
    if not lines or not lines[0].lstrip().startswith(b"{"):
        return None
    try:
        values = [orjson.loads(line) for line in lines]
    except orjson.JSONDecodeError:
        return None
    if not all(isinstance(v, dict) and isinstance(v.get("request"), dict) for v in values):
        return None
    return list(gemini_file_lines(values))


def _gemini_entry(where: str, key: Any, request: dict[str, Any], model: str | None) -> BatchEntry:
    named = request.get("model")
    # An entry may name its model ("models/gemini-2.5-flash"); the batch's is the default.
    chosen = named.removeprefix("models/") if isinstance(named, str) else model
    name = key if isinstance(key, str) else None
    return BatchEntry("gemini", where, name, request, RouteInfo(model=chosen, stream=False))


def json_path(value: Any, *keys: str) -> Any:
    """``value[keys[0]][keys[1]]...``, or None where an object or a key is missing."""
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value
