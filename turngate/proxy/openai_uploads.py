"""OpenAI's Uploads API: a Batch API input file sent in parts is checked before the upload
is completed.

    POST /v1/uploads {"purpose": "batch", ...}      relayed; the upload's id kept
    POST /v1/uploads/{id}/parts  (form: data)        relayed; the part's bytes kept by its id
    POST /v1/uploads/{id}/complete {"part_ids"}      the parts joined in that order, checked
                                                     as a batch file (adapters/openai_batch.py):
                                                     relayed, or refused and never sent
    POST /v1/uploads/{id}/cancel                     relayed; what was kept dropped

``client.uploads.upload_file_chunked`` sends a file this way. OpenAI makes the file only
when the upload is completed, so a refused completion leaves an upload that expires unused
(an hour later): no file, and no batch can read it. The bytes kept, of all uploads
together, are bounded by ``--max-body-bytes`` (proxy/kept_uploads.py); an upload that no
longer fits is completed unchecked, and counted.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from turngate.adapters.batches import OPENAI_UPLOADS
from turngate.adapters.openai_batch import form_parts
from turngate.proxy.batches import judged_batch_file, unchecked
from turngate.proxy.body import read_body
from turngate.proxy.routes import RouteMatch
from turngate.proxy.services import Services
from turngate.proxy.upstream import answer_object, exchange, relay

DROPPED = "its parts no longer fit in --max-body-bytes, or one was not seen"


async def checked_openai_upload(
    request: web.Request, route: RouteMatch, services: Services
) -> web.StreamResponse:
    found = OPENAI_UPLOADS.fullmatch(route.openai_path or "")
    if found is None:
        return await relay(request, route, services.session)
    upload, step = found["upload"], found["step"]
    if upload is None:
        return await _started(request, route, services)
    kept = services.kept_parts
    if not kept.holds(_key(upload)):
        # No upload of a batch file, or one whose parts were dropped (counted then).
        return await relay(request, route, services.session)
    if step == "parts":
        return await _part(request, route, services, upload)
    if step == "complete":
        return await _completed(request, route, services, upload)
    _forget(services, upload)
    return await relay(request, route, services.session)


async def _started(
    request: web.Request, route: RouteMatch, services: Services
) -> web.StreamResponse:
    raw = await read_body(request, services.settings.max_body_bytes, only_json=False)
    if _json(raw).get("purpose") != "batch":
        return await relay(request, route, services.session, read=raw)
    response = await exchange(request, route, services.session, raw)
    upload = answer_object(response).get("id")
    if isinstance(upload, str):
        _keep(request, services, _key(upload), b"")
    return response


async def _part(
    request: web.Request, route: RouteMatch, services: Services, upload: str
) -> web.StreamResponse:
    kept = services.kept_parts
    declared = request.content_length
    if declared is None or declared > kept.limit:
        _forget(services, upload)
        unchecked(request, "openai_chat", DROPPED)
        return await relay(request, route, services.session)
    raw = await read_body(request, kept.limit, only_json=False)
    parts = form_parts(request.headers.get("Content-Type", ""), raw) or []
    data = next((part.content for part in parts if part.name == "data"), None)
    response = await exchange(request, route, services.session, raw)
    part = answer_object(response).get("id")
    if data is None or not isinstance(part, str):
        if response.status == 200:
            _forget(services, upload)
            unchecked(request, "openai_chat", DROPPED)
        return response
    _keep(request, services, _key(upload, part), data)
    return response


async def _completed(
    request: web.Request, route: RouteMatch, services: Services, upload: str
) -> web.StreamResponse:
    raw = await read_body(request, services.settings.max_body_bytes)
    order = _json(raw).get("part_ids")
    kept = services.kept_parts
    parts = order if isinstance(order, list) else []
    keys = [_key(upload, part) for part in parts if isinstance(part, str)]
    whole = bool(keys) and len(keys) == len(parts) and all(kept.holds(key) for key in keys)
    data = b"".join(kept.take(key) for key in keys) if whole else None
    _forget(services, upload)
    if data is None:
        unchecked(request, "openai_chat", DROPPED)
        return await relay(request, route, services.session, read=raw)
    return await judged_batch_file(request, route, services, raw=raw, data=data)


def _keep(request: web.Request, services: Services, key: str, data: bytes) -> None:
    dropped = {gone.split("/", 1)[0] for gone in services.kept_parts.add(key, data)}
    for upload in dropped:
        _forget(services, upload)
        unchecked(request, "openai_chat", DROPPED)


def _forget(services: Services, upload: str) -> None:
    services.kept_parts.drop_all(_key(upload))


def _key(upload: str, part: str | None = None) -> str:
    return upload if part is None else f"{upload}/{part}"


def _json(raw: Any) -> dict[str, Any]:
    try:
        value = orjson.loads(raw) if isinstance(raw, bytes) else None
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
