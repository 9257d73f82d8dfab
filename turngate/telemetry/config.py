"""What the standard ``OTEL_*`` environment variables ask of turngate's telemetry.

    OTEL_SDK_DISABLED=true                 everything off: no-op tracer and meter, empty /metrics
    OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER
                                           comma list of otlp | console | none (metrics also
                                           accept prometheus: /metrics is always served)
    OTEL_EXPORTER_OTLP[_TRACES|_METRICS]_PROTOCOL   http/protobuf (default) | grpc
    OTEL_EXPORTER_OTLP[_TRACES|_METRICS]_ENDPOINT   collector URL
    OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES     the resource (service.name defaults to turngate)
    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true   prompt/completion on spans

One deliberate difference from the OTel SDK's defaults: with ``OTEL_*_EXPORTER`` unset, a
signal is exported by OTLP only when an OTLP endpoint is set (the SDK would default to OTLP
at localhost and retry a missing collector forever). So an unconfigured sidecar pays for no
exporter, and pointing ``OTEL_EXPORTER_OTLP_ENDPOINT`` at a collector is enough to turn both
signals on. Other exporter settings (headers, timeout, compression, certificates, batch and
interval sizes, sampler) are read by the OTel SDK itself from the process environment.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, assert_never

Exporter = Literal["otlp", "console"]
Protocol = Literal["http/protobuf", "grpc"]
Signal = Literal["traces", "metrics"]

DEFAULT_SERVICE_NAME = "turngate"
_TRUE = ("true", "1", "yes", "on")
_HTTP_DEFAULT = "http://localhost:4318"
_GRPC_DEFAULT = "http://localhost:4317"
_EXPORTERS: dict[str, Exporter] = {"otlp": "otlp", "console": "console"}
_HTTP_PATHS: dict[Signal, str] = {"traces": "/v1/traces", "metrics": "/v1/metrics"}


class TelemetryConfigError(ValueError):
    """An ``OTEL_*`` value turngate cannot honour; raised at start, never per request."""


@dataclass(frozen=True)
class OtlpTarget:
    protocol: Protocol
    # Full URL of the signal: ".../v1/traces" for HTTP, the collector address for gRPC.
    endpoint: str


@dataclass(frozen=True)
class TelemetryConfig:
    disabled: bool = False
    traces: tuple[Exporter, ...] = ()
    metrics: tuple[Exporter, ...] = ()
    traces_otlp: OtlpTarget | None = None
    metrics_otlp: OtlpTarget | None = None
    resource: Mapping[str, str] = field(
        default_factory=lambda: {"service.name": DEFAULT_SERVICE_NAME}
    )
    # Prompt and completion content on spans (GenAI opt-in); credentials are masked anyway.
    capture_content: bool = False


def config_from_env(environ: Mapping[str, str] | None = None) -> TelemetryConfig:
    env = os.environ if environ is None else environ
    if _flag(env, "OTEL_SDK_DISABLED"):
        return TelemetryConfig(disabled=True, resource=resource_attributes(env))
    traces = _exporters(env, "traces")
    metrics = _exporters(env, "metrics")
    return TelemetryConfig(
        traces=traces,
        metrics=metrics,
        traces_otlp=otlp_target(env, "traces") if "otlp" in traces else None,
        metrics_otlp=otlp_target(env, "metrics") if "otlp" in metrics else None,
        resource=resource_attributes(env),
        capture_content=_flag(env, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"),
    )


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in _TRUE


def _exporters(env: Mapping[str, str], signal: Signal) -> tuple[Exporter, ...]:
    variable = f"OTEL_{signal.upper()}_EXPORTER"
    raw = env.get(variable, "").strip()
    if not raw:
        endpoint_set = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(
            f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"
        )
        return ("otlp",) if endpoint_set else ()
    chosen: list[Exporter] = []
    for name in (part.strip().lower() for part in raw.split(",")):
        exporter = _EXPORTERS.get(name)
        if exporter is not None:
            if exporter not in chosen:
                chosen.append(exporter)
        elif name == "none" or (name == "prometheus" and signal == "metrics"):
            continue
        else:
            accepted = "otlp, console, none" + (", prometheus" if signal == "metrics" else "")
            raise TelemetryConfigError(f"{variable}={raw!r}: {name!r} is not one of {accepted}")
    return tuple(chosen)


def otlp_target(env: Mapping[str, str], signal: Signal) -> OtlpTarget:
    upper = signal.upper()
    protocol_variable = f"OTEL_EXPORTER_OTLP_{upper}_PROTOCOL"
    raw = env.get(protocol_variable) or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    protocol = _protocol(raw.strip().lower(), protocol_variable)
    own = env.get(f"OTEL_EXPORTER_OTLP_{upper}_ENDPOINT")
    if own:
        # A signal's own endpoint is used as given (OTel spec).
        return OtlpTarget(protocol, own)
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    match protocol:
        case "http/protobuf":
            return OtlpTarget(protocol, (base or _HTTP_DEFAULT).rstrip("/") + _HTTP_PATHS[signal])
        case "grpc":
            return OtlpTarget(protocol, base or _GRPC_DEFAULT)
        case _:
            assert_never(protocol)


def _protocol(value: str, variable: str) -> Protocol:
    if value == "http/protobuf":
        return "http/protobuf"
    if value == "grpc":
        return "grpc"
    raise TelemetryConfigError(
        f"{variable} (or OTEL_EXPORTER_OTLP_PROTOCOL)={value!r}: turngate exports OTLP as "
        "http/protobuf or grpc"
    )


def resource_attributes(env: Mapping[str, str]) -> dict[str, str]:
    """``OTEL_RESOURCE_ATTRIBUTES`` (``k=v,k2=v2``, percent-encoded values), then
    ``OTEL_SERVICE_NAME`` over ``service.name``; ``turngate`` when neither names it."""
    attributes: dict[str, str] = {}
    for item in env.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise TelemetryConfigError(f"OTEL_RESOURCE_ATTRIBUTES: {item!r} is not key=value")
        attributes[key.strip()] = urllib.parse.unquote(value.strip())
    service = env.get("OTEL_SERVICE_NAME", "").strip()
    if service:
        attributes["service.name"] = service
    attributes.setdefault("service.name", DEFAULT_SERVICE_NAME)
    return attributes
