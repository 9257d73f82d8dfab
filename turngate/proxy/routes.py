"""Path prefixes -> provider, upstream URL, and the routes parsed into the message graph.

SPEC §1 and §7: each provider has one prefix; the path after it is appended to that
provider's configured upstream base, query string kept. Nothing in a request can choose
another host: the URL is the configured base plus a path that always starts with ``/``.

    /openai/v1/...  -> {upstream_openai}/v1/...
    /anthropic/...  -> {upstream_anthropic}/...
    /gemini/...     -> {upstream_gemini}/...
    /azure/...      -> {upstream_azure}/...     (when configured: Azure OpenAI, the openai
                                                 SDK's AzureOpenAI client; provider "openai")
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Literal, assert_never

from multidict import CIMultiDictProxy
from yarl import URL

from turngate.adapters.anthropic.headers import with_headers
from turngate.adapters.azure_paths import (
    AZURE_CHAT,
    AZURE_MOUNT,
    AZURE_RESPONSES,
    as_openai_path,
)
from turngate.adapters.base import RouteInfo
from turngate.adapters.batches import batch_route
from turngate.adapters.gemini.paths import CHAT_PATH, CLAUDE_ON_VERTEX, chat_route
from turngate.graph.model import ApiName
from turngate.proxy.egress import EgressProxy, proxy_for
from turngate.settings import Settings

Provider = Literal["openai", "anthropic", "gemini"]

# The API whose error envelope a provider's unparsed routes use.
ERROR_API: dict[Provider, ApiName] = {
    "openai": "openai_chat",
    "anthropic": "anthropic",
    "gemini": "gemini",
}


@dataclass(frozen=True)
class Prefix:
    # Where the SDK's base URL points, e.g. "/openai/v1".
    mount: str
    # What replaces the mount upstream, e.g. "/v1".
    upstream_root: str
    provider: Provider
    upstream: URL
    # The forward proxy the upstream is reached through (egress.py), None to go direct.
    egress: EgressProxy | None = None
    # Azure OpenAI: the OpenAI APIs on Azure's paths (deployments, ``/openai/v1``).
    azure: bool = False

    @property
    def proxy(self) -> URL | None:
        return None if self.egress is None else self.egress.url


@dataclass(frozen=True)
class RouteMatch:
    prefix: Prefix
    # The upstream path, still percent-encoded as the client sent it, with the query string.
    upstream_path_qs: str
    # Set when the route is parsed into the graph; None when it is relayed unchanged.
    api: ApiName | None
    info: RouteInfo
    # Set when the route creates a batch of this API's chat requests (adapters/batches.py):
    # each is checked, and the batch relayed unchanged.
    batch: ApiName | None = None

    @property
    def provider(self) -> Provider:
        return self.prefix.provider

    @cached_property
    def upstream_path(self) -> str:
        """The upstream path, still percent-encoded, without the query string."""
        return self.upstream_path_qs.split("?", 1)[0]

    @cached_property
    def openai_path(self) -> str | None:
        """The upstream path (raw, no query) as the OpenAI API names it (``/v1/...``), on
        the openai provider's prefixes, Azure's included; None elsewhere."""
        return _openai_named(self.prefix, self.upstream_path)

    @cached_property
    def upstream_url(self) -> URL:
        # Read for the span and the send of every attempt: built (and checked) once.
        base = self.prefix.upstream
        url = URL(str(base).rstrip("/") + self.upstream_path_qs, encoded=True)
        if (url.scheme, url.host, url.port) != (base.scheme, base.host, base.port):
            raise ValueError("the upstream URL left the configured host")
        return url


def prefixes(settings: Settings, environ: Mapping[str, str]) -> tuple[Prefix, ...]:
    """The three prefixes; ``environ``'s proxy variables choose each one's egress."""
    mounts: tuple[tuple[str, str, Provider, str], ...] = (
        ("/openai/v1", "/v1", "openai", settings.upstream_openai),
        ("/anthropic", "", "anthropic", settings.upstream_anthropic),
        ("/gemini", "", "gemini", settings.upstream_gemini),
    )
    table: list[Prefix] = []
    for mount, root, provider, upstream in mounts:
        base = _base(upstream)
        table.append(Prefix(mount, root, provider, base, proxy_for(base, environ)))
    if settings.upstream_azure:
        base = _base(settings.upstream_azure)
        table.append(Prefix(AZURE_MOUNT, "", "openai", base, proxy_for(base, environ), azure=True))
    return tuple(table)


def _base(url: str) -> URL:
    parsed = URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"upstream {url!r} must be an http(s) URL with a host")
    if parsed.query_string or parsed.fragment:
        raise ValueError(f"upstream {url!r} must not carry a query or fragment")
    return parsed


def match(table: tuple[Prefix, ...], method: str, path: str, raw_path_qs: str) -> RouteMatch | None:
    """The route for a request; ``path`` is decoded, ``raw_path_qs`` as sent (with query)."""
    for prefix in table:
        if path != prefix.mount and not path.startswith(prefix.mount + "/"):
            continue
        # The mount is plain ASCII: a raw path that does not start with it byte for byte
        # percent-encoded the prefix itself, and is not routed.
        if not raw_path_qs.startswith(prefix.mount):
            return None
        raw_tail = raw_path_qs[len(prefix.mount) :]
        if has_dot_segment(raw_tail):
            return None
        upstream_path = prefix.upstream_root + path[len(prefix.mount) :]
        if prefix.azure:
            api, info = _parsed_azure(method, upstream_path)
        else:
            api, info = _parsed(prefix.provider, method, upstream_path)
        if api is None:
            named = _openai_named(prefix, upstream_path) or upstream_path
            batch = batch_route(prefix.provider, method, named)
            if batch is not None:
                return RouteMatch(prefix, prefix.upstream_root + raw_tail, None, batch[1], batch[0])
        return RouteMatch(prefix, prefix.upstream_root + raw_tail, api, info)
    return None


def with_anthropic_headers(route: RouteMatch, headers: CIMultiDictProxy[str]) -> RouteMatch:
    """An Anthropic ``route`` with what its request's headers ask of the API."""
    betas, version = headers.getall("anthropic-beta", []), headers.get("anthropic-version")
    if not betas and version is None:
        return route
    return replace(route, info=with_headers(route.info, betas, version))


def has_dot_segment(raw_path_qs: str) -> bool:
    """``.`` or ``..`` as a path segment, literal or percent-encoded (``%2e``, and ``%2f`` or
    a backslash as the separator): the upstream could resolve it above the prefix's root."""
    path = raw_path_qs.split("?", 1)[0].lower()
    for encoded, plain in (("%2e", "."), ("%2f", "/"), ("%5c", "/"), ("\\", "/")):
        path = path.replace(encoded, plain)
    return any(segment in (".", "..") for segment in path.split("/"))


def _openai_named(prefix: Prefix, path: str) -> str | None:
    """``path`` (below the upstream) as the OpenAI API names it (``/v1/...``) on the openai
    provider's prefixes, Azure's included; None elsewhere, and for an Azure path OpenAI has
    no name for."""
    if prefix.provider != "openai":
        return None
    return as_openai_path(path) if prefix.azure else path


def _parsed_azure(method: str, upstream_path: str) -> tuple[ApiName | None, RouteInfo]:
    if method != "POST":
        return None, RouteInfo()
    found = AZURE_CHAT.fullmatch(upstream_path)
    if found is not None:
        # The deployment, where the path names one: the model the route policy is chosen by.
        return "openai_chat", RouteInfo(model=found["deployment"])
    if AZURE_RESPONSES.fullmatch(upstream_path):
        return "openai_responses", RouteInfo()
    return None, RouteInfo()


def _parsed(
    provider: Provider, method: str, upstream_path: str
) -> tuple[ApiName | None, RouteInfo]:
    if method != "POST":
        return None, RouteInfo()
    if provider == "openai":
        if upstream_path == "/v1/chat/completions":
            return "openai_chat", RouteInfo()
        if upstream_path == "/v1/responses":
            return "openai_responses", RouteInfo()
        return None, RouteInfo()
    if provider == "anthropic":
        return (
            ("anthropic", RouteInfo()) if upstream_path == "/v1/messages" else (None, RouteInfo())
        )
    if provider == "gemini":
        found = CHAT_PATH.fullmatch(upstream_path)
        if found is None:
            claude = CLAUDE_ON_VERTEX.fullmatch(upstream_path)
            if claude is not None:
                streamed = claude["method"] == "streamRawPredict"
                return "anthropic", RouteInfo(model=claude["model"], stream=streamed)
            return None, RouteInfo()
        return "gemini", chat_route(found)
    assert_never(provider)
