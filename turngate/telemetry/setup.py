"""Build the tracer and meter providers from a ``TelemetryConfig``; never the OTel globals.

    telemetry = setup_telemetry()                      # from OTEL_* in the environment
    telemetry = setup_telemetry(config, span_processors=[SimpleSpanProcessor(memory)],
                                metric_readers=[InMemoryMetricReader()])   # tests
    ...
    await telemetry.aclose()                           # flushes exporters off the event loop

Providers, by configuration:

- ``OTEL_SDK_DISABLED=true``: ``NoOpTracerProvider`` and ``NoOpMeterProvider``; injected
  processors and readers are ignored; ``/metrics`` answers with a comment only.
- no trace exporter and no injected span processor: ``NoOpTracerProvider`` (no span is
  created, no exporter exists). Metrics are still counted by an SDK ``MeterProvider``
  whose only reader is the Prometheus one behind ``/metrics``.
- otherwise an SDK ``TracerProvider`` with a ``BatchSpanProcessor`` per exporter and a
  ``MeterProvider`` with the Prometheus reader, a ``PeriodicExportingMetricReader`` per
  exporter and the injected readers.

Exporter packages are imported here, lazily, only for the exporters configured.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, assert_never

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from turngate.graph.model import ApiName
from turngate.telemetry.config import (
    Exporter,
    OtlpTarget,
    TelemetryConfig,
    TelemetryConfigError,
    config_from_env,
)
from turngate.telemetry.metrics import DispatchMetrics
from turngate.telemetry.redaction import Redactor
from turngate.telemetry.tracing import DispatchSpan, dispatch_span

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricExporter
    from prometheus_client import CollectorRegistry

SCOPE = "turngate"


@dataclass(eq=False)
class Telemetry:
    config: TelemetryConfig
    tracer_provider: trace.TracerProvider
    meter_provider: metrics.MeterProvider
    metrics: DispatchMetrics
    # The registry ``GET /metrics`` renders; None when the SDK is disabled.
    prometheus: CollectorRegistry | None
    redactor: Redactor = field(default_factory=Redactor)
    tracer: trace.Tracer = field(init=False)
    _closed: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.tracer = self.tracer_provider.get_tracer(SCOPE)

    @property
    def tracing(self) -> bool:
        return not isinstance(self.tracer, trace.NoOpTracer)

    def dispatch_span(
        self,
        *,
        api: ApiName,
        model: str | None,
        route: str,
        stream: bool | None = None,
        rollout_mode: str | None = None,
        conversation_id: str | None = None,
        carrier: Mapping[str, str] | None = None,
        capture_content: bool | None = None,
    ) -> AbstractContextManager[DispatchSpan]:
        """``tracing.dispatch_span`` with this telemetry's tracer and redactor;
        ``capture_content`` None follows OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT
        (a route's policy may opt in or out)."""
        return dispatch_span(
            self.tracer,
            api=api,
            model=model,
            route=route,
            stream=stream,
            rollout_mode=rollout_mode,
            conversation_id=conversation_id,
            carrier=carrier,
            capture_content=self.config.capture_content
            if capture_content is None
            else capture_content,
            redactor=self.redactor,
        )

    def force_flush(self, timeout_millis: int = 10_000) -> None:
        """Blocks the thread: from the event loop use ``await asyncio.to_thread(...)``."""
        for provider in self._sdk_providers():
            provider.force_flush(timeout_millis)

    def shutdown(self) -> None:
        """Flush and stop every exporter, once; blocks the thread like ``force_flush``."""
        if self._closed:
            return
        self._closed = True
        for provider in self._sdk_providers():
            provider.shutdown()

    async def aclose(self) -> None:
        """``shutdown`` off the event loop: an exporter's last export may be to a collector
        served by this very loop."""
        await asyncio.to_thread(self.shutdown)

    def _sdk_providers(self) -> Iterator[TracerProvider | MeterProvider]:
        if isinstance(self.tracer_provider, TracerProvider):
            yield self.tracer_provider
        if isinstance(self.meter_provider, MeterProvider):
            yield self.meter_provider


def setup_telemetry(
    config: TelemetryConfig | None = None,
    *,
    span_processors: Sequence[SpanProcessor] = (),
    metric_readers: Sequence[MetricReader] = (),
    secrets: Sequence[str] = (),
) -> Telemetry:
    """``config`` defaults to ``config_from_env()``. ``secrets``: values to mask verbatim in
    span details and captured content (e.g. the credential secret)."""
    chosen = config if config is not None else config_from_env()
    redactor = Redactor(secrets)
    if chosen.disabled:
        return Telemetry(
            config=chosen,
            tracer_provider=trace.NoOpTracerProvider(),
            meter_provider=metrics.NoOpMeterProvider(),
            metrics=DispatchMetrics(metrics.NoOpMeterProvider().get_meter(SCOPE)),
            prometheus=None,
            redactor=redactor,
        )
    resource = Resource.create(dict(chosen.resource))
    tracer_provider = _tracer_provider(chosen, resource, span_processors)
    registry, prometheus_reader = _prometheus_reader()
    readers = [prometheus_reader, *_metric_readers(chosen), *metric_readers]
    meter_provider = MeterProvider(
        metric_readers=readers, resource=resource, shutdown_on_exit=False
    )
    return Telemetry(
        config=chosen,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        metrics=DispatchMetrics(meter_provider.get_meter(SCOPE)),
        prometheus=registry,
        redactor=redactor,
    )


def _tracer_provider(
    config: TelemetryConfig, resource: Resource, injected: Sequence[SpanProcessor]
) -> trace.TracerProvider:
    with _exporter_package(config.traces_otlp):
        exporters = [_span_exporter(name, config.traces_otlp) for name in config.traces]
    if not exporters and not injected:
        return trace.NoOpTracerProvider()
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    for processor in injected:
        provider.add_span_processor(processor)
    return provider


def _span_exporter(name: Exporter, target: OtlpTarget | None) -> SpanExporter:
    match name:
        case "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            return ConsoleSpanExporter()
        case "otlp":
            pass
        case _:
            assert_never(name)
    target = _required(target, "traces")
    match target.protocol:
        case "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter as HttpSpanExporter,
            )

            return HttpSpanExporter(endpoint=target.endpoint)
        case "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcSpanExporter,
            )

            return GrpcSpanExporter(endpoint=target.endpoint)
        case _:
            assert_never(target.protocol)


PACKAGES: dict[str, str] = {
    "http/protobuf": "opentelemetry-exporter-otlp-proto-http",
    "grpc": "opentelemetry-exporter-otlp-proto-grpc",
}


@contextmanager
def _exporter_package(target: OtlpTarget | None) -> Iterator[None]:
    """An exporter package that is not installed stops the start, naming the package."""
    try:
        yield
    except ImportError as exc:
        package = PACKAGES[target.protocol] if target is not None else "an exporter package"
        raise TelemetryConfigError(
            f"OTLP over {target.protocol if target else '?'} needs {package} ({exc.name} is "
            "missing); install it or set OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER"
        ) from exc


def _required(target: OtlpTarget | None, signal: str) -> OtlpTarget:
    if target is None:
        raise TelemetryConfigError(f"the otlp {signal} exporter needs an OtlpTarget")
    return target


def _metric_readers(config: TelemetryConfig) -> list[MetricReader]:
    readers: list[MetricReader] = []
    for name in config.metrics:
        with _exporter_package(config.metrics_otlp):
            exporter = _metric_exporter(name, config.metrics_otlp)
        # The interval comes from OTEL_METRIC_EXPORT_INTERVAL (default 60 s).
        readers.append(PeriodicExportingMetricReader(exporter))
    return readers


def _metric_exporter(name: Exporter, target: OtlpTarget | None) -> MetricExporter:
    match name:
        case "console":
            from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

            return ConsoleMetricExporter()
        case "otlp":
            pass
        case _:
            assert_never(name)
    target = _required(target, "metrics")
    match target.protocol:
        case "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                OTLPMetricExporter as HttpMetricExporter,
            )

            return HttpMetricExporter(endpoint=target.endpoint)
        case "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter as GrpcMetricExporter,
            )

            return GrpcMetricExporter(endpoint=target.endpoint)
        case _:
            assert_never(target.protocol)


def _prometheus_reader() -> tuple[CollectorRegistry, MetricReader]:
    """A Prometheus reader on a registry of its own (not prometheus_client's global one), so
    two apps in one process, or two tests, never collide."""
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry
    except ImportError as exc:
        raise TelemetryConfigError(
            "GET /metrics needs the opentelemetry-exporter-prometheus package; install it, "
            "or set OTEL_SDK_DISABLED=true to run without telemetry"
        ) from exc

    registry = CollectorRegistry()
    # Scope labels would add otel_scope_* to every series; there is one scope, "turngate".
    reader = PrometheusMetricReader(scope_info_enabled=False, registry=registry)
    return registry, reader
