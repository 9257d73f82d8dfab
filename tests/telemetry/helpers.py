"""Telemetry wired to in-memory exporters (never the OTel globals), and readers of its data."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import orjson
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from turngate.telemetry.config import TelemetryConfig
from turngate.telemetry.logs import configure_dispatch_log
from turngate.telemetry.setup import Telemetry, setup_telemetry

# Test credentials and prompt text: none may appear in a span or a log line.
OPENAI_KEY = "sk-test-telemetry-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-test-telemetry-fedcba9876543210"
GEMINI_KEY = "AIzaTestTelemetryKey0123456789abcdefghi"
CREDENTIAL_SECRET = "turngate-credential-secret-for-tests"
PROMPT = "Summarise the quarterly figures for Zanzibar Widgets Ltd"
SECRETS = (OPENAI_KEY, ANTHROPIC_KEY, GEMINI_KEY, CREDENTIAL_SECRET)


@dataclass
class Captured:
    telemetry: Telemetry
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader

    def finished(self) -> tuple[ReadableSpan, ...]:
        return self.spans.get_finished_spans()


def captured(config: TelemetryConfig | None = None, **kwargs: Any) -> Captured:
    spans = InMemorySpanExporter()
    reader = InMemoryMetricReader()
    telemetry = setup_telemetry(
        config or TelemetryConfig(),
        span_processors=[SimpleSpanProcessor(spans)],
        metric_readers=[reader],
        **kwargs,
    )
    return Captured(telemetry, spans, reader)


Labels = frozenset[tuple[str, str]]


@dataclass(frozen=True)
class HistogramPoint:
    count: int
    sum: float
    bucket_counts: tuple[int, ...]
    bounds: tuple[float, ...]


def points(reader: InMemoryMetricReader) -> dict[str, dict[Labels, Any]]:
    """Every metric's data points: name -> labels -> number, or HistogramPoint."""
    data = reader.get_metrics_data()
    out: dict[str, dict[Labels, Any]] = {}
    if data is None:
        return out
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                series = out.setdefault(metric.name, {})
                for point in metric.data.data_points:
                    labels = frozenset((k, str(v)) for k, v in (point.attributes or {}).items())
                    if isinstance(point, HistogramDataPoint):
                        series[labels] = HistogramPoint(
                            point.count,
                            point.sum,
                            tuple(point.bucket_counts),
                            tuple(point.explicit_bounds),
                        )
                    else:
                        assert isinstance(point, NumberDataPoint)
                        series[labels] = point.value
    return out


def labels(**values: str) -> Labels:
    return frozenset(values.items())


def nonzero(series: dict[Labels, Any]) -> dict[Labels, Any]:
    return {k: v for k, v in series.items() if v != 0}


def span_text(span: ReadableSpan) -> str:
    """All a span would export: name, attributes, events, status, links, resource."""
    return str(span.to_json(indent=None))


@dataclass
class LogCapture:
    stream: io.StringIO

    @property
    def raw(self) -> str:
        return self.stream.getvalue()

    @property
    def lines(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.raw.splitlines()]


@contextmanager
def dispatch_log(level: str = "info") -> Iterator[LogCapture]:
    """The ``turngate.dispatch`` logger writing JSON lines into a buffer, as configured for
    serving (its own handler, redaction with the test secrets), restored afterwards."""
    stream = io.StringIO()
    logger = configure_dispatch_log(level, stream=stream, secrets=SECRETS)
    try:
        yield LogCapture(stream)
    finally:
        logger.handlers[:] = []
        logger.propagate = True
        logger.setLevel(logging.NOTSET)
