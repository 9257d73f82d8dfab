"""turngate telemetry: OpenTelemetry spans and metrics, Prometheus."""
