"""Prefix -> provider, upstream URL and parsed route: SPEC §1 and §7 as a table."""

from __future__ import annotations

import pytest

from turngate.adapters.base import RouteInfo
from turngate.proxy.routes import match, prefixes
from turngate.settings import Settings

TABLE = prefixes(
    Settings(
        upstream_openai="https://oa.example",
        upstream_anthropic="https://an.example/base",
        upstream_gemini="http://127.0.0.1:9000",
    ),
    {},
)


@pytest.mark.parametrize(
    ("method", "path", "api", "info", "upstream"),
    [
        (
            "POST",
            "/openai/v1/chat/completions",
            "openai_chat",
            RouteInfo(),
            "https://oa.example/v1/chat/completions",
        ),
        (
            "POST",
            "/openai/v1/responses",
            "openai_responses",
            RouteInfo(),
            "https://oa.example/v1/responses",
        ),
        (
            "GET",
            "/openai/v1/responses/resp_1",
            None,
            RouteInfo(),
            "https://oa.example/v1/responses/resp_1",
        ),
        (
            "GET",
            "/openai/v1/chat/completions",
            None,
            RouteInfo(),
            "https://oa.example/v1/chat/completions",
        ),
        (
            "POST",
            "/anthropic/v1/messages",
            "anthropic",
            RouteInfo(),
            "https://an.example/base/v1/messages",
        ),
        (
            "POST",
            "/anthropic/v1/messages?beta=true",
            "anthropic",
            RouteInfo(),
            "https://an.example/base/v1/messages?beta=true",
        ),
        (
            "POST",
            "/anthropic/v1/messages/count_tokens",
            None,
            RouteInfo(),
            "https://an.example/base/v1/messages/count_tokens",
        ),
        (
            "POST",
            "/gemini/v1beta/models/gemini-2.5-flash:generateContent",
            "gemini",
            RouteInfo(model="gemini-2.5-flash", stream=False, endpoint="gemini_api"),
            "http://127.0.0.1:9000/v1beta/models/gemini-2.5-flash:generateContent",
        ),
        (
            "POST",
            "/gemini/v1/models/gemini-2.5-pro:streamGenerateContent?alt=sse&key=K",
            "gemini",
            RouteInfo(model="gemini-2.5-pro", stream=True, endpoint="gemini_api"),
            "http://127.0.0.1:9000/v1/models/gemini-2.5-pro:streamGenerateContent?alt=sse&key=K",
        ),
        (
            "POST",
            "/gemini/v1/projects/p/locations/europe-west4/endpoints/4721:generateContent",
            "gemini",
            RouteInfo(model="4721", stream=False, endpoint="vertex"),
            "http://127.0.0.1:9000/v1/projects/p/locations/europe-west4/endpoints/4721:generateContent",
        ),
        (
            "POST",
            "/gemini/v1beta1/publishers/google/models/text-embedding-005:predict",
            None,
            RouteInfo(),
            "http://127.0.0.1:9000/v1beta1/publishers/google/models/text-embedding-005:predict",
        ),
        (
            "POST",
            "/gemini/v1beta/models/m:countTokens",
            None,
            RouteInfo(),
            "http://127.0.0.1:9000/v1beta/models/m:countTokens",
        ),
    ],
)
def test_routes(method: str, path: str, api: str | None, info: RouteInfo, upstream: str):
    bare_path = path.split("?", 1)[0]
    route = match(TABLE, method, bare_path, path)
    assert route is not None
    assert (route.api, route.info) == (api, info)
    assert str(route.upstream_url) == upstream


@pytest.mark.parametrize(
    "path", ["/", "/v1/chat/completions", "/openai/chat/completions", "/openaiv1/x", "/gemin/x"]
)
def test_paths_under_no_prefix_have_no_route(path: str):
    assert match(TABLE, "POST", path, path) is None


def test_a_percent_encoded_prefix_is_not_routed():
    assert (
        match(TABLE, "POST", "/openai/v1/chat/completions", "/%6Fpenai/v1/chat/completions") is None
    )


def test_an_upstream_must_be_a_plain_http_url():
    for bad in ("ftp://x", "api.openai.com", "https://x/?q=1"):
        with pytest.raises(ValueError, match="upstream"):
            prefixes(Settings(upstream_openai=bad), {})


@pytest.mark.parametrize(
    ("method", "path", "batch", "info"),
    [
        ("POST", "/anthropic/v1/messages/batches", "anthropic", RouteInfo()),
        ("GET", "/anthropic/v1/messages/batches", None, RouteInfo()),
        ("POST", "/anthropic/v1/messages/batches/msgbatch_1/cancel", None, RouteInfo()),
        (
            "POST",
            "/gemini/v1beta/models/gemini-2.5-flash:batchGenerateContent",
            "gemini",
            RouteInfo(model="gemini-2.5-flash", stream=False),
        ),
        ("POST", "/gemini/v1beta/batches/b-1:cancel", None, RouteInfo()),
        ("POST", "/gemini/upload/v1beta/files", "gemini", RouteInfo(stream=False)),
        ("GET", "/gemini/upload/v1beta/files", None, RouteInfo()),
        ("POST", "/gemini/v1beta/files", None, RouteInfo()),
        ("POST", "/openai/v1/batches", None, RouteInfo()),
        ("POST", "/openai/v1/files", "openai_chat", RouteInfo()),
        ("GET", "/openai/v1/files", None, RouteInfo()),
        ("POST", "/openai/v1/uploads", "openai_chat", RouteInfo()),
        ("POST", "/openai/v1/uploads/upload_1/parts", "openai_chat", RouteInfo()),
        ("POST", "/openai/v1/uploads/upload_1/complete", "openai_chat", RouteInfo()),
        ("POST", "/openai/v1/uploads/upload_1/parts/extra", None, RouteInfo()),
        ("GET", "/openai/v1/uploads/upload_1", None, RouteInfo()),
    ],
)
def test_batch_creations_are_recognised_and_nothing_else(
    method: str, path: str, batch: str | None, info: RouteInfo
):
    route = match(TABLE, method, path, path)
    assert route is not None
    assert route.api is None
    assert (route.batch, route.info) == (batch, info)


AZURE_TABLE = prefixes(Settings(upstream_azure="https://res.openai.azure.com"), {})


@pytest.mark.parametrize(
    ("method", "path", "api", "info"),
    [
        (
            "POST",
            "/azure/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21",
            "openai_chat",
            RouteInfo(model="gpt-4o"),
        ),
        ("POST", "/azure/openai/v1/chat/completions", "openai_chat", RouteInfo()),
        ("POST", "/azure/openai/responses?api-version=preview", "openai_responses", RouteInfo()),
        ("POST", "/azure/openai/v1/responses", "openai_responses", RouteInfo()),
        ("GET", "/azure/openai/v1/responses/resp_1", None, RouteInfo()),
        ("POST", "/azure/openai/deployments/gpt-4o/embeddings", None, RouteInfo()),
        ("POST", "/azure/openai/v1/files", None, RouteInfo()),
        ("POST", "/azure/openai/files?api-version=2024-10-21", None, RouteInfo()),
    ],
)
def test_azure_openai_routes_are_parsed_as_openai(
    method: str, path: str, api: str | None, info: RouteInfo
):
    route = match(AZURE_TABLE, method, path.split("?", maxsplit=1)[0], path)
    assert route is not None
    # An upload may be a Batch API file, on Azure as on OpenAI.
    batch = "openai_chat" if "/files" in path else None
    assert (route.provider, route.api, route.info, route.batch) == ("openai", api, info, batch)
    assert str(route.upstream_url) == "https://res.openai.azure.com" + path.removeprefix("/azure")


def test_no_azure_prefix_without_an_azure_upstream():
    path = "/azure/openai/v1/chat/completions"
    assert match(TABLE, "POST", path, path) is None


@pytest.mark.parametrize(
    ("path", "api", "info"),
    [
        (
            "/gemini/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-x:rawPredict",
            "anthropic",
            RouteInfo(model="claude-x", stream=False),
        ),
        (
            "/gemini/v1/projects/p/locations/global/publishers/anthropic/models/claude-x"
            ":streamRawPredict",
            "anthropic",
            RouteInfo(model="claude-x", stream=True),
        ),
        (
            "/gemini/v1/projects/p/locations/us-east5/publishers/anthropic/models/count-tokens"
            ":rawPredict",
            None,
            RouteInfo(),
        ),
        (
            "/gemini/v1/projects/p/locations/us-east5/publishers/meta/models/llama:rawPredict",
            None,
            RouteInfo(),
        ),
    ],
)
def test_claude_on_vertex_is_parsed_as_anthropic(path: str, api: str | None, info: RouteInfo):
    route = match(TABLE, "POST", path, path)
    assert route is not None
    assert (route.provider, route.api, route.info) == ("gemini", api, info)
