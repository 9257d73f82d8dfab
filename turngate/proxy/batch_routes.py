"""The relayed routes of batches that turngate reads on the way: their creation and
uploads (each request checked), their results (each answer's calls checked), and the batch
objects that tie an OpenAI batch's output file to its input file.

    route                                           module
    a batch created, a Batch API file uploaded      proxy/batches.py
    a Gemini file's upload                          proxy/gemini_uploads.py
    OpenAI's Uploads API                            proxy/openai_uploads.py
    results; OpenAI batch objects; a Gemini batch   proxy/batch_results.py
"""

from __future__ import annotations

import logging

from aiohttp import web

from turngate.adapters.batches import GEMINI_UPLOAD, OPENAI_UPLOADS
from turngate.proxy.batch_results import (
    checked_gemini_batch,
    checked_results,
    gemini_batch,
    learned_batches,
    names_batches,
    results_of,
)
from turngate.proxy.batch_tools import recalled
from turngate.proxy.batches import checked_batch
from turngate.proxy.gemini_uploads import checked_gemini_upload
from turngate.proxy.openai_uploads import checked_openai_upload
from turngate.proxy.routes import RouteMatch
from turngate.proxy.services import Services

log = logging.getLogger("turngate.proxy")


async def batch_route(
    request: web.Request, route: RouteMatch, services: Services
) -> web.StreamResponse | None:
    """The answer to a batch route, or None for a route turngate relays unread."""
    if route.batch is not None:
        if GEMINI_UPLOAD.fullmatch(route.upstream_path):
            return await checked_gemini_upload(request, route, services)
        if OPENAI_UPLOADS.fullmatch(route.openai_path or ""):
            return await checked_openai_upload(request, route, services)
        return await checked_batch(request, route, services, route.batch)
    toolsets, store, now = services.batch_toolsets, services.store, services.clock()
    results = results_of(route, request.method)
    if results is not None:
        form, key = results
        expected = await recalled(toolsets, store, key)
        if expected is not None:
            return await checked_results(request, route, services.session, form, expected)
        if form == "anthropic":
            log.info("the results of %s are relayed unchecked: not created here", key)
    gemini = gemini_batch(route, request.method)
    if gemini is not None:
        return await checked_gemini_batch(
            request, route, services.session, gemini, toolsets=toolsets, store=store, now=now
        )
    if names_batches(route):
        return await learned_batches(
            request, route, services.session, toolsets=toolsets, store=store, now=now
        )
    return None
