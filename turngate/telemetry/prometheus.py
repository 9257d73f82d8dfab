"""``GET /metrics`` and request durations: the aiohttp side of telemetry.

    install(app, telemetry)      # before the app's catch-all route: routes match in order

``install`` adds the ``GET /metrics`` route, a middleware that records
``turngate.request.duration`` for every request (route label from ``route_label``, status
499 when the client went away first), and a cleanup that shuts the exporters down.

The instruments are read by opentelemetry-exporter-prometheus's ``PrometheusMetricReader``
on a registry of turngate's own (setup.py); the handler renders that registry in the format
the scraper's ``Accept`` header asks for (Prometheus text by default, OpenMetrics on
request). Collection runs on the event loop, not in a thread: the UNKNOWN-age callback
reads state the loop owns, and a scrape of a few dozen series takes well under a
millisecond.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Handler as NextHandler
from aiohttp.typedefs import Middleware
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder

from turngate.telemetry.metrics import parsed_api, route_label
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


# nginx's code for "the client closed the connection before the answer".
CLIENT_CLOSED = 499


def request_metrics_middleware(
    telemetry: Telemetry, clock: Callable[[], float] = time.perf_counter
) -> Middleware:
    metrics = telemetry.metrics

    @web.middleware
    async def measure(request: web.Request, handler: NextHandler) -> web.StreamResponse:
        started = clock()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        except asyncio.CancelledError:
            status = CLIENT_CLOSED
            raise
        finally:
            route = route_label(request.path)
            metrics.request_finished(
                route=route, api=parsed_api(route), status=status, seconds=clock() - started
            )

    return measure


def install(app: web.Application, telemetry: Telemetry, *, path: str = "/metrics") -> None:
    """``GET path`` serves the metrics, every request's duration is recorded,
    ``app[TELEMETRY]`` holds the telemetry, and the app's cleanup shuts the exporters down."""
    app[TELEMETRY] = telemetry
    app.middlewares.append(request_metrics_middleware(telemetry))

    async def telemetry_ctx(app: web.Application) -> AsyncIterator[None]:
        yield
        await telemetry.aclose()

    app.cleanup_ctx.append(telemetry_ctx)
    app.router.add_get(path, metrics_handler(telemetry))
