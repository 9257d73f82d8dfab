"""The real turngate app with in-memory telemetry injected, in front of the fake upstream."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.proxy.fake_upstream import FakeUpstream
from tests.telemetry.helpers import CREDENTIAL_SECRET, Captured, captured
from turngate.proxy.app import create_app
from turngate.proxy.upstream import UpstreamTimeouts
from turngate.settings import Settings
from turngate.telemetry.config import TelemetryConfig
from turngate.telemetry.setup import setup_telemetry


@dataclass
class TracedStack:
    url: str
    upstream: FakeUpstream
    capture: Captured
    app: web.Application

    async def post(
        self, path: str, body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[int, bytes]:
        """Status and body; a body the proxy broke off on purpose reads as ``b"<broken>"``."""
        all_headers = {"Content-Type": "application/json", **headers}
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.url + path, data=orjson.dumps(body), headers=all_headers) as resp,
        ):
            try:
                return resp.status, await resp.read()
            except aiohttp.ClientPayloadError:
                return resp.status, b"<broken>"

    async def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.url + path, headers=headers or {}) as resp,
        ):
            return resp.status, await resp.text()


def untraced() -> Captured:
    """Metrics into an in-memory reader, and no span processor: the no-op tracer."""
    reader = InMemoryMetricReader()
    telemetry = setup_telemetry(
        TelemetryConfig(), metric_readers=[reader], secrets=[CREDENTIAL_SECRET]
    )
    return Captured(telemetry, InMemorySpanExporter(), reader)


TracedStackFactory = Callable[..., Awaitable[TracedStack]]


@pytest.fixture
def traced_stack(aiohttp_server: Any) -> TracedStackFactory:
    async def make(
        *, tracing: bool = True, clock: Callable[[], float] | None = None, **settings: Any
    ) -> TracedStack:
        """``tracing=False``: metrics only, the no-op tracer (no exporter configured)."""
        upstream = FakeUpstream()
        upstream_server: TestServer = await aiohttp_server(upstream.app(), access_log=None)
        base = f"http://127.0.0.1:{upstream_server.port}"
        chosen = Settings(
            state="memory://",
            upstream_openai=base,
            upstream_anthropic=base,
            upstream_gemini=base,
            **settings,
        )
        capture = captured(secrets=[CREDENTIAL_SECRET]) if tracing else untraced()
        app = create_app(
            chosen,
            credential_secret=CREDENTIAL_SECRET,
            timeouts=UpstreamTimeouts(connect=2.0, read=5.0),
            telemetry=capture.telemetry,
            **({} if clock is None else {"clock": clock}),
        )
        server: TestServer = await aiohttp_server(app, access_log=None)
        return TracedStack(f"http://127.0.0.1:{server.port}", upstream, capture, app)

    return make
