"""turngate telemetry: OpenTelemetry spans and metrics, Prometheus, structured logs.

Not part of the pure core: this package may import opentelemetry and aiohttp. What the
proxy calls, all of it explicit (no global provider is ever set):

    config.py      config_from_env(): what the OTEL_* variables ask for
    setup.py       setup_telemetry(config, span_processors=, metric_readers=) -> Telemetry;
                   await telemetry.aclose() at shutdown
    metrics.py     telemetry.metrics.<event>(...): the dispatch metrics; UnknownDispatches
    tracing.py     telemetry.dispatch_span(...) -> DispatchSpan: GenAI span, state events,
                   the upstream CLIENT span with traceparent injection
    prometheus.py  install(app, telemetry): GET /metrics
    logs.py        configure_dispatch_log(level), log_dispatch(DispatchLine(...))
    redaction.py   Redactor: credentials masked in everything above

docs/telemetry.md lists the metrics, labels, span attributes and variables.
"""

from turngate.telemetry.config import TelemetryConfig, TelemetryConfigError, config_from_env
from turngate.telemetry.logs import DispatchLine, configure_dispatch_log, log_dispatch
from turngate.telemetry.metrics import DispatchMetrics, UnknownDispatches, route_label
from turngate.telemetry.setup import Telemetry, setup_telemetry
from turngate.telemetry.tracing import DispatchSpan, dispatch_span, inject_traceparent, state_event

__all__ = [
    "DispatchLine",
    "DispatchMetrics",
    "DispatchSpan",
    "Telemetry",
    "TelemetryConfig",
    "TelemetryConfigError",
    "UnknownDispatches",
    "config_from_env",
    "configure_dispatch_log",
    "dispatch_span",
    "inject_traceparent",
    "log_dispatch",
    "route_label",
    "setup_telemetry",
    "state_event",
]
