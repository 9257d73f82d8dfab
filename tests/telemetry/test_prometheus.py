"""GET /metrics on an aiohttp test server, scraped and parsed with prometheus_client's parser."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from turngate.telemetry.config import TelemetryConfig
from turngate.telemetry.metrics import APIS, UnknownDispatches
from turngate.telemetry.prometheus import DISABLED_BODY, TELEMETRY, install
from turngate.telemetry.setup import Telemetry, setup_telemetry

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
ClientFactory = Callable[..., Any]


def samples(text: str, parse: Callable[[str], Any] = text_string_to_metric_families) -> Samples:
    out: Samples = {}
    for family in parse(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


async def serve(aiohttp_client: ClientFactory, telemetry: Telemetry) -> TestClient[Any, Any]:
    app = web.Application()
    install(app, telemetry)
    client: TestClient[Any, Any] = await aiohttp_client(app)
    return client


def record_some(telemetry: Telemetry, clock: list[float]) -> None:
    metrics = telemetry.metrics
    metrics.validated("openai_chat", ["orphan_result", "orphan_result", "missing_result"])
    metrics.validated("anthropic", ["duplicate_result"], enforced=False)
    metrics.refused("gemini", "context_length_exceeded")
    metrics.cas_conflict("openai_chat")
    metrics.request_finished(
        route="/openai/v1/chat/completions", api="openai_chat", status=200, seconds=0.3
    )
    metrics.request_finished(
        route="/openai/v1/chat/completions", api="openai_chat", status=200, seconds=4.0
    )
    metrics.upstream_error("anthropic", 529)
    unknown = UnknownDispatches(lambda: clock[0])
    unknown.lost("op_a", at=10.0)
    unknown.lost("op_b", at=40.0)
    metrics.watch_unknown(unknown.ages)


async def test_metrics_scraped_and_parsed(aiohttp_client: ClientFactory) -> None:
    telemetry = setup_telemetry(TelemetryConfig(resource={"service.name": "turngate-test"}))
    clock = [100.0]
    record_some(telemetry, clock)
    client = await serve(aiohttp_client, telemetry)
    response = await client.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    scraped = samples(await response.text())
    rejections = "turngate_validator_rejections_total"
    assert scraped[key(rejections, rule="orphan_result", api="openai_chat")] == 1
    assert scraped[key(rejections, rule="missing_result", api="openai_chat")] == 1
    assert scraped[key(rejections, rule="context_length_exceeded", api="gemini")] == 1
    assert (
        scraped[
            key(
                "turngate_validator_shadow_rejections_total",
                rule="duplicate_result",
                api="anthropic",
            )
        ]
        == 1
    )
    assert scraped[key("turngate_tool_results_orphaned_total", api="openai_chat")] == 2
    assert scraped[key("turngate_tool_results_duplicate_total", api="anthropic")] == 1
    assert scraped[key("turngate_cas_conflicts_total", api="openai_chat", stage="claim")] == 1
    # Every stage is exported at 0 from the start.
    assert scraped[key("turngate_cas_conflicts_total", api="openai_chat", stage="commit")] == 0
    assert scraped[key("turngate_upstream_errors_total", api="anthropic", status="529")] == 1
    for api in APIS:
        assert scraped[key("turngate_tool_calls_partial_dispatches_total", api=api)] == 0
    assert scraped[key("turngate_dispatch_unknown")] == 2
    assert scraped[key("turngate_dispatch_unknown_age_seconds")] == 90.0
    duration = "turngate_request_duration_seconds"
    labels = {"route": "/openai/v1/chat/completions", "api": "openai_chat", "status": "200"}
    assert scraped[key(duration + "_count", **labels)] == 2
    assert scraped[key(duration + "_sum", **labels)] == pytest.approx(4.3)
    assert scraped[key(duration + "_bucket", le="0.5", **labels)] == 1
    assert scraped[key(duration + "_bucket", le="5.0", **labels)] == 2
    assert scraped[key(duration + "_bucket", le="+Inf", **labels)] == 2
    target = [k for k in scraped if k[0] == "target_info"]
    assert len(target) == 1
    assert ("service_name", "turngate-test") in target[0][1]
    # The gauge is read at each scrape: a later scrape sees a later clock.
    clock[0] = 130.0
    again = samples(await (await client.get("/metrics")).text())
    assert again[key("turngate_dispatch_unknown_age_seconds")] == 120.0
    assert client.app[TELEMETRY] is telemetry


async def test_openmetrics_when_the_scraper_asks(aiohttp_client: ClientFactory) -> None:
    telemetry = setup_telemetry(TelemetryConfig())
    telemetry.metrics.partial_dispatch("gemini")
    client = await serve(aiohttp_client, telemetry)
    response = await client.get(
        "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert response.headers["Content-Type"].startswith("application/openmetrics-text")
    scraped = samples(await response.text(), openmetrics_families)
    assert scraped[key("turngate_tool_calls_partial_dispatches_total", api="gemini")] == 1


async def test_two_apps_in_one_process_keep_their_own_counts(aiohttp_client: ClientFactory) -> None:
    first, second = setup_telemetry(TelemetryConfig()), setup_telemetry(TelemetryConfig())
    first.metrics.cas_conflict("anthropic")
    for telemetry, expected in ((first, 1), (second, 0)):
        client = await serve(aiohttp_client, telemetry)
        scraped = samples(await (await client.get("/metrics")).text())
        conflicts = key("turngate_cas_conflicts_total", api="anthropic", stage="claim")
        assert scraped[conflicts] == expected


async def test_sdk_disabled_serves_a_comment_and_no_series(aiohttp_client: ClientFactory) -> None:
    telemetry = setup_telemetry(TelemetryConfig(disabled=True))
    telemetry.metrics.cas_conflict("anthropic")
    client = await serve(aiohttp_client, telemetry)
    response = await client.get("/metrics")
    body = await response.read()
    assert (response.status, body) == (200, DISABLED_BODY)
    assert samples(body.decode()) == {}


async def test_every_request_duration_is_recorded_by_route_template(
    aiohttp_client: ClientFactory,
) -> None:
    telemetry = setup_telemetry(TelemetryConfig())
    app = web.Application()
    install(app, telemetry)

    async def answer(request: web.Request) -> web.Response:
        if request.query.get("missing"):
            raise web.HTTPNotFound
        return web.Response(status=201)

    app.router.add_route("*", "/{tail:.*}", answer)
    client: TestClient[Any, Any] = await aiohttp_client(app)
    paths = [
        f"/gemini/v1beta/models/gemini-2.0-flash:generateContent?key={'k' * 20}",
        "/gemini/v1beta/models/gemini-2.5-pro:generateContent",
        "/gemini/v1beta1/projects/acme/locations/us-east5/publishers/google/models/g:generateContent",
        "/gemini/v1beta1/projects/umbrella/locations/asia-south1/publishers/google/models/h:generateContent",
        "/gemini/v1beta/models/gemini-2.5-pro:countTokens",
        "/gemini/v1beta/models/gemini-2.5-flash:batchGenerateContent",
        "/anthropic/v1/messages/batches",
        "/azure/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21",
        "/azure/openai/deployments/gpt-4o-mini/chat/completions",
        "/azure/openai/v1/responses",
        "/azure/openai/deployments/gpt-4o/embeddings",
        "/gemini/v1/projects/p/locations/l/publishers/anthropic/models/claude-x:streamRawPredict",
        "/openai/v1/models",
        "/openai/v1/files/file-abc/content?missing=1",
    ]
    for path in paths:
        await (await client.post(path)).read()
    scraped = samples(await (await client.get("/metrics")).text())
    count = "turngate_request_duration_seconds_count"
    gemini = "/gemini/v1beta/models/{model}:generateContent"
    batch = "/gemini/v1beta/models/{model}:batchGenerateContent"
    deployment = "/azure/openai/deployments/{deployment}/chat/completions"
    claude = (
        "/gemini/v1/projects/{project}/locations/{location}/publishers/anthropic/models/{model}"
        ":streamRawPredict"
    )
    # No project, location or model name becomes a label.
    vertex = (
        "/gemini/v1beta1/projects/{project}/locations/{location}/publishers/{publisher}"
        "/models/{model}:generateContent"
    )
    assert {k: v for k, v in scraped.items() if k[0] == count} == {
        key(count, route=gemini, api="gemini", status="201"): 2,
        key(count, route=vertex, api="gemini", status="201"): 2,
        key(count, route="/gemini/*", api="none", status="201"): 1,
        key(count, route=batch, api="gemini", status="201"): 1,
        key(count, route="/anthropic/v1/messages/batches", api="anthropic", status="201"): 1,
        key(count, route=deployment, api="openai_chat", status="201"): 2,
        key(count, route="/azure/openai/v1/responses", api="openai_responses", status="201"): 1,
        key(count, route="/azure/*", api="none", status="201"): 1,
        key(count, route=claude, api="anthropic", status="201"): 1,
        key(count, route="/openai/*", api="none", status="201"): 1,
        key(count, route="/openai/*", api="none", status="404"): 1,
    }


async def test_every_counter_labelled_by_api_alone_is_exported_at_0_from_the_start(
    aiohttp_client: ClientFactory,
) -> None:
    """docs/telemetry.md promises it (an alert on increase() needs a series before the first
    event): every counter its table lists with the label `api` alone."""
    rows = (Path(__file__).resolve().parents[2] / "docs" / "telemetry.md").read_text()
    names = re.findall(
        r"^\| `[a-z_.]+` \| `(turngate_[a-z_]+_total)` \| counter \| `api` \|", rows, re.M
    )
    assert len(names) >= 10
    client = await serve(aiohttp_client, setup_telemetry(TelemetryConfig()))
    scraped = samples(await (await client.get("/metrics")).text())
    for name in names:
        for api in APIS:
            assert scraped.get(key(name, api=api)) == 0, (name, api)
