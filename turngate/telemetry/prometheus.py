"""``GET /metrics``: the telemetry's meter, rendered by prometheus_client.

    install(app, telemetry)      # before the app's catch-all route: routes match in order

The instruments are read by opentelemetry-exporter-prometheus's ``PrometheusMetricReader``
on a registry of turngate's own (setup.py); the handler renders that registry in the format
the scraper's ``Accept`` header asks for (Prometheus text by default, OpenMetrics on
request). Collection runs on the event loop, not in a thread: the UNKNOWN-age callback
reads state the loop owns, and a scrape of a few dozen series takes well under a
millisecond.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder

from turngate.telemetry.setup import Telemetry

TELEMETRY = web.AppKey("telemetry", Telemetry)
DISABLED_BODY = b"# turngate: OTEL_SDK_DISABLED=true, no metrics are recorded\n"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def metrics_handler(telemetry: Telemetry) -> Handler:
    async def metrics(request: web.Request) -> web.StreamResponse:
        registry = telemetry.prometheus
        if registry is None:
            return web.Response(
                body=DISABLED_BODY, headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4}
            )
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(registry), headers={"Content-Type": content_type})

    return metrics


def install(app: web.Application, telemetry: Telemetry, *, path: str = "/metrics") -> None:
    """``GET path`` serves the metrics, ``app[TELEMETRY]`` holds the telemetry, and the app's
    cleanup flushes and shuts the exporters down."""
    app[TELEMETRY] = telemetry

    async def telemetry_ctx(app: web.Application) -> AsyncIterator[None]:
        yield
        await telemetry.aclose()

    app.cleanup_ctx.append(telemetry_ctx)
    app.router.add_get(path, metrics_handler(telemetry))
