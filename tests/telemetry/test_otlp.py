"""OTLP export configured only by OTEL_* variables: to a local aiohttp sink over HTTP, and to
a local gRPC collector. Payloads decoded with opentelemetry-proto.

The exporters block their thread; the HTTP sink runs in the test's event loop, so every
flush goes through ``asyncio.to_thread`` (recipes.md §4).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from tests.telemetry.helpers import OPENAI_KEY, PROMPT
from turngate.telemetry.config import config_from_env
from turngate.telemetry.setup import Telemetry, setup_telemetry

# A long interval: the metrics go out only on the explicit flush.
QUIET = {"OTEL_METRIC_EXPORT_INTERVAL": "600000", "OTEL_SERVICE_NAME": "turngate-otlp-test"}


def value(any_value: AnyValue) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return tuple(value(v) for v in any_value.array_value.values)
    return getattr(any_value, kind) if kind else None


def attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in pairs if isinstance(kv, KeyValue)}


def dispatch(telemetry: Telemetry) -> dict[str, str]:
    outbound: dict[str, str] = {"Authorization": f"Bearer {OPENAI_KEY}"}
    with telemetry.dispatch_span(
        api="openai_chat", model="gpt-4o", route="/openai/v1/chat/completions"
    ) as span:
        span.content(input_messages=[{"role": "user", "content": PROMPT}])
        span.verdict("REJECTED", ["orphan_result"])
        telemetry.metrics.validated("openai_chat", ["orphan_result"])
        with span.upstream("POST", "https://api.openai.com/v1/chat/completions", outbound) as call:
            call.status(200)
    return outbound


class Sink:
    def __init__(self) -> None:
        self.bodies: dict[str, list[bytes]] = {"/v1/traces": [], "/v1/metrics": []}
        self.content_types: set[str] = set()

    def app(self) -> web.Application:
        async def receive(request: web.Request) -> web.Response:
            self.content_types.add(request.content_type)
            self.bodies[request.path].append(await request.read())
            return web.Response(body=b"", content_type="application/x-protobuf")

        app = web.Application()
        app.router.add_post("/v1/traces", receive)
        app.router.add_post("/v1/metrics", receive)
        return app


async def test_otlp_over_http_to_the_endpoint_in_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sink = Sink()
    server = TestServer(sink.app(), host="127.0.0.1")
    await server.start_server()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.port}")
        for name, setting in QUIET.items():
            monkeypatch.setenv(name, setting)
        telemetry = setup_telemetry()
        assert telemetry.config.traces == telemetry.config.metrics == ("otlp",)
        outbound = dispatch(telemetry)
        await asyncio.to_thread(telemetry.force_flush)
        await telemetry.aclose()
    finally:
        await server.close()

    assert sink.content_types == {"application/x-protobuf"}
    spans = [
        span
        for body in sink.bodies["/v1/traces"]
        for resource in trace_service_pb2.ExportTraceServiceRequest.FromString(body).resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    resources = [
        attributes(r.resource.attributes)
        for body in sink.bodies["/v1/traces"]
        for r in trace_service_pb2.ExportTraceServiceRequest.FromString(body).resource_spans
    ]
    assert {r["service.name"] for r in resources} == {"turngate-otlp-test"}
    by_name = {span.name: span for span in spans}
    assert set(by_name) == {"chat gpt-4o", "POST"}
    internal = attributes(by_name["chat gpt-4o"].attributes)
    assert internal["gen_ai.provider.name"] == "openai"
    assert internal["turngate.rule_codes"] == ("orphan_result",)
    client = by_name["POST"]
    assert client.parent_span_id == by_name["chat gpt-4o"].span_id
    assert outbound["traceparent"].split("-")[2] == client.span_id.hex()
    assert all(PROMPT not in str(span) and OPENAI_KEY not in str(span) for span in spans)

    points = {
        metric.name: metric
        for body in sink.bodies["/v1/metrics"]
        for resource in metrics_service_pb2.ExportMetricsServiceRequest.FromString(
            body
        ).resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    rejections = points["turngate.validator.rejections"].sum.data_points
    assert [(attributes(p.attributes), p.as_int) for p in rejections] == [
        ({"rule": "orphan_result", "api": "openai_chat"}, 1)
    ]
    assert "turngate.tool_calls.partial_dispatches" in points


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.received = threading.Event()

    def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 (the gRPC method name)
        self.requests.append(request)
        self.received.set()
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture
def grpc_collector() -> Iterator[tuple[Collector, int]]:
    collector = Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield collector, port
    finally:
        server.stop(grace=None)


def test_otlp_over_grpc(
    monkeypatch: pytest.MonkeyPatch, grpc_collector: tuple[Collector, int]
) -> None:
    collector, port = grpc_collector
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{port}")
    config = config_from_env()
    assert config.metrics == ()
    telemetry = setup_telemetry(config)
    dispatch(telemetry)
    telemetry.shutdown()
    assert collector.received.is_set()
    names = [
        span.name
        for request in collector.requests
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    assert sorted(names) == ["POST", "chat gpt-4o"]
