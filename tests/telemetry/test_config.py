"""OTEL_* variables -> exporters, endpoints, resource; and what is built when nothing is set."""

from __future__ import annotations

import subprocess
import sys

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

from tests.telemetry.helpers import captured
from turngate.telemetry.config import (
    OtlpTarget,
    TelemetryConfig,
    TelemetryConfigError,
    config_from_env,
)
from turngate.telemetry.setup import setup_telemetry
from turngate.telemetry.tracing import NOOP_SPAN


def test_nothing_set_exports_nothing() -> None:
    config = config_from_env({})
    assert config == TelemetryConfig()
    assert config.resource == {"service.name": "turngate"}


def test_an_otlp_endpoint_alone_turns_both_signals_on_over_http() -> None:
    config = config_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"})
    assert config.traces == config.metrics == ("otlp",)
    assert config.traces_otlp == OtlpTarget("http/protobuf", "http://collector:4318/v1/traces")
    assert config.metrics_otlp == OtlpTarget("http/protobuf", "http://collector:4318/v1/metrics")


def test_a_signal_endpoint_is_used_as_given_and_turns_on_that_signal_only() -> None:
    config = config_from_env({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:9/custom"})
    assert config.traces_otlp == OtlpTarget("http/protobuf", "http://c:9/custom")
    assert config.metrics == ()


def test_grpc_takes_the_base_endpoint_as_the_collector_address() -> None:
    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}
    config = config_from_env(env)
    assert config.traces_otlp == config.metrics_otlp == OtlpTarget("grpc", "http://c:4317")
    defaults = config_from_env({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "otlp"})
    assert defaults.traces_otlp == OtlpTarget("http/protobuf", "http://localhost:4318/v1/traces")
    env["OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"] = "http/protobuf"
    mixed = config_from_env(env)
    assert mixed.metrics_otlp == OtlpTarget("http/protobuf", "http://c:4317/v1/metrics")


def test_exporter_lists() -> None:
    env = {
        "OTEL_TRACES_EXPORTER": "console, otlp,console",
        "OTEL_METRICS_EXPORTER": "prometheus",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
    }
    config = config_from_env(env)
    assert config.traces == ("console", "otlp")
    # /metrics is always served; "prometheus" asks for nothing more.
    assert config.metrics == ()
    assert config_from_env({**env, "OTEL_TRACES_EXPORTER": "none"}).traces == ()


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "zipkin"),
        ({"OTEL_TRACES_EXPORTER": "prometheus"}, "prometheus"),
        (
            {"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
            "http/json",
        ),
        ({"OTEL_RESOURCE_ATTRIBUTES": "team"}, "'team'"),
    ],
)
def test_values_turngate_cannot_honour_stop_the_start(env: dict[str, str], named: str) -> None:
    with pytest.raises(TelemetryConfigError, match=named):
        config_from_env(env)


def test_resource_attributes_and_service_name() -> None:
    env = {
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod, team=agents%2Fcore,,",
        "OTEL_SERVICE_NAME": "checkout-agent-turngate",
    }
    assert config_from_env(env).resource == {
        "deployment.environment": "prod",
        "team": "agents/core",
        "service.name": "checkout-agent-turngate",
    }
    from_attributes = config_from_env({"OTEL_RESOURCE_ATTRIBUTES": "service.name=a"})
    assert from_attributes.resource == {"service.name": "a"}


def test_content_capture_follows_the_genai_variable() -> None:
    on = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
    assert config_from_env(on).capture_content
    assert not config_from_env({}).capture_content


def test_sdk_disabled_builds_only_noop_providers() -> None:
    config = config_from_env({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"})
    # Injected processors and readers are ignored too: disabled means nothing runs.
    capture = captured(config)
    telemetry = capture.telemetry
    assert type(telemetry.tracer_provider) is trace.NoOpTracerProvider
    assert type(telemetry.meter_provider) is metrics.NoOpMeterProvider
    assert telemetry.prometheus is None
    with telemetry.dispatch_span(api="openai_chat", model="m", route="r") as span:
        assert span is NOOP_SPAN
    telemetry.metrics.validated("openai_chat", ["orphan_result"])
    assert capture.finished() == ()
    assert capture.reader.get_metrics_data() is None


def test_nothing_set_means_no_tracer_but_metrics_still_counted() -> None:
    telemetry = setup_telemetry(config_from_env({}))
    assert type(telemetry.tracer_provider) is trace.NoOpTracerProvider
    assert not telemetry.tracing
    with telemetry.dispatch_span(api="openai_chat", model="m", route="r") as span:
        assert span is NOOP_SPAN
    assert isinstance(telemetry.meter_provider, MeterProvider)
    assert telemetry.prometheus is not None
    telemetry.shutdown()


def test_an_exporter_or_an_injected_processor_makes_a_real_tracer() -> None:
    console = setup_telemetry(TelemetryConfig(traces=("console",)))
    assert isinstance(console.tracer_provider, TracerProvider)
    assert console.tracing
    console.shutdown()
    assert captured().telemetry.tracing


LAZY_PROBE = """
import os, sys
from turngate.telemetry import config_from_env, setup_telemetry
telemetry = setup_telemetry(config_from_env())
with telemetry.dispatch_span(api="openai_chat", model="m", route="r") as span:
    span.verdict("READY", [])
loaded = sorted({m.rsplit(".", 1)[0] for m in sys.modules if ".exporter.otlp." in m})
print(",".join(p for p in ("proto.http", "proto.grpc") if any(p in m for m in loaded)) or "-")
# No shutdown: its final export would retry a collector that is not there.
sys.stdout.flush()
os._exit(0)
"""


@pytest.mark.parametrize(
    ("env", "loaded"),
    [
        ({}, "-"),
        ({"OTEL_SDK_DISABLED": "true"}, "-"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, "proto.http"),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            },
            "proto.grpc",
        ),
    ],
)
def test_exporter_packages_are_imported_only_when_configured(
    env: dict[str, str], loaded: str
) -> None:
    clean = {"PATH": "/usr/bin:/bin", **env}
    command = [sys.executable, "-c", LAZY_PROBE]
    result = subprocess.run(
        command, env=clean, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == loaded


def test_a_missing_exporter_package_stops_the_start_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.grpc.trace_exporter", None)
    config = config_from_env(
        {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_TRACES_EXPORTER": "otlp"}
    )
    with pytest.raises(TelemetryConfigError, match="opentelemetry-exporter-otlp-proto-grpc"):
        setup_telemetry(config)
