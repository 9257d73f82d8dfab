"""turngate served with its production server limits (turngate/proxy/limits.py), short
deadlines so the tests wait little, a fake upstream, and a second fake "attacker" host that
must never be contacted."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from tests.proxy.fake_upstream import FakeUpstream
from tests.proxy.stack import Stack
from turngate.proxy.app import create_app
from turngate.proxy.limits import server_options
from turngate.proxy.logs import AccessLogger, access_log
from turngate.proxy.upstream import UpstreamTimeouts
from turngate.settings import Settings

HEADER_TIMEOUT = 1.0
BODY_TIMEOUT = 1.0
UPSTREAM_IDLE = 1.0


@dataclass
class HardStack(Stack):
    attacker: FakeUpstream | None = None
    attacker_host: str = ""
    port: int = 0
    # Every Turngate-Operation-Id this stack answered with.
    operation_ids: list[str] = dataclasses.field(default_factory=list)


HardFactory = Callable[..., Awaitable[HardStack]]


@pytest.fixture
def make_hard_stack(aiohttp_server: Any, tmp_path: Path) -> HardFactory:
    async def make(**settings: Any) -> HardStack:
        upstream, attacker = FakeUpstream(), FakeUpstream()
        upstream_server: TestServer = await aiohttp_server(upstream.app(), access_log=None)
        attacker_server: TestServer = await aiohttp_server(attacker.app(), access_log=None)
        base = f"http://127.0.0.1:{upstream_server.port}"
        chosen = Settings(
            state="memory://",
            upstream_openai=base,
            upstream_anthropic=base,
            upstream_gemini=base,
            header_timeout=HEADER_TIMEOUT,
            body_timeout=BODY_TIMEOUT,
            upstream_read_timeout=UPSTREAM_IDLE,
        )
        chosen = dataclasses.replace(chosen, **settings)
        app = create_app(
            chosen,
            credential_secret="test-secret",
            timeouts=UpstreamTimeouts(connect=2.0, read=chosen.upstream_read_timeout),
        )
        operation_ids: list[str] = []

        async def remember(request: Any, response: Any) -> None:
            if "Turngate-Operation-Id" in response.headers:
                operation_ids.append(response.headers["Turngate-Operation-Id"])

        app.on_response_prepare.append(remember)
        server: TestServer = await aiohttp_server(
            app, access_log_class=AccessLogger, access_log=access_log, **server_options(chosen)
        )
        return HardStack(
            url=f"http://127.0.0.1:{server.port}",
            upstream=upstream,
            app=app,
            upstream_host=f"127.0.0.1:{upstream_server.port}",
            attacker=attacker,
            attacker_host=f"127.0.0.1:{attacker_server.port}",
            port=server.port or 0,
            operation_ids=operation_ids,
        )

    return make
