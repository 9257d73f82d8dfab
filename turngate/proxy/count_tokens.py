"""Exact input counts from the provider, for admission (``admission.count_tokens_endpoint``).

Anthropic and Gemini have no offline tokenizer: turngate estimates, on the high side. When the
route policy allows the extra upstream call and the estimate would refuse a request, the
provider's own counting endpoint decides instead, with the caller's credentials:

    anthropic   POST {upstream}/v1/messages/count_tokens       -> {"input_tokens": N}
    gemini      POST {upstream}/{version}/models/{m}:countTokens -> {"totalTokens": N}

Only then: a request the estimate admits costs no extra call. Any failure of the call (status,
transport, an answer without the count) leaves the estimate's refusal standing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from yarl import URL

from turngate.graph.model import ApiName
from turngate.proxy.routes import RouteMatch
from turngate.proxy.upstream import outbound_headers

log = logging.getLogger("turngate.proxy")

# What the counting endpoints accept of a request body (the rest is refused by them).
_ANTHROPIC_FIELDS = ("model", "messages", "system", "tools", "tool_choice", "thinking")
_GEMINI_FIELDS = ("contents", "systemInstruction", "tools", "toolConfig", "generationConfig")
TIMEOUT = aiohttp.ClientTimeout(total=10.0)


def counting_call(
    api: ApiName, route: RouteMatch, body: Mapping[str, Any], model: str | None
) -> tuple[URL, dict[str, Any], str] | None:
    """(URL, body, the answer's count field) of the endpoint that counts ``body``, if any."""
    if api == "anthropic":
        if route.provider != "anthropic":
            # Claude on Vertex AI counts at a path of its own; the estimate stands.
            return None
        url = route.upstream_url.with_path(route.upstream_url.path + "/count_tokens")
        payload = {k: body[k] for k in _ANTHROPIC_FIELDS if k in body}
        return url, payload, "input_tokens"
    if api == "gemini" and model is not None:
        path, _sep, _method = route.upstream_url.path.rpartition(":")
        # ?key= may carry the caller's key; ?alt=sse is for streams only.
        url = route.upstream_url.with_path(f"{path}:countTokens").without_query_params("alt")
        inner = {k: body[k] for k in _GEMINI_FIELDS if k in body}
        name = model if model.startswith("models/") else f"models/{model}"
        return url, {"generateContentRequest": {"model": name, **inner}}, "totalTokens"
    return None


async def provider_count(
    request: web.Request,
    route: RouteMatch,
    session: aiohttp.ClientSession,
    *,
    api: ApiName,
    body: Mapping[str, Any],
    model: str | None,
) -> int | None:
    """The provider's count of ``body``'s input tokens, or None when it cannot be had."""
    call = counting_call(api, route, body, model)
    if call is None:
        return None
    url, payload, field = call
    headers = outbound_headers(request.headers, keep_length=False)
    headers["Content-Type"] = "application/json"
    try:
        async with session.post(
            url,
            data=orjson.dumps(payload),
            headers=headers,
            allow_redirects=False,
            timeout=TIMEOUT,
            proxy=route.prefix.proxy,
        ) as answer:
            data = await answer.read()
            status = answer.status
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        log.warning("count_tokens for %s failed: %s", api, type(exc).__name__)
        return None
    if status != 200:
        log.warning("count_tokens for %s answered %d", api, status)
        return None
    try:
        count = orjson.loads(data).get(field)
    except (orjson.JSONDecodeError, AttributeError):
        count = None
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        log.warning("count_tokens for %s answered without a count", api)
        return None
    return count
