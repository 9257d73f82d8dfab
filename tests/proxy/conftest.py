"""A turngate app in front of a fake upstream, both served on 127.0.0.1 in the test's loop."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.proxy.fake_upstream import FakeUpstream
from tests.proxy.stack import Stack
from tests.state.redis_server import key_prefix, redis_url
from turngate.proxy.app import create_app
from turngate.proxy.logs import AccessLogger, access_log
from turngate.proxy.upstream import UpstreamTimeouts
from turngate.settings import Settings

StackFactory = Callable[..., Awaitable[Stack]]


@pytest.fixture
def make_stack(aiohttp_server: Any, tmp_path: Path) -> StackFactory:
    async def make(
        *,
        record_bodies: bool = False,
        timeouts: UpstreamTimeouts | None = None,
        azure: bool = False,
        **settings: Any,
    ) -> Stack:
        upstream = FakeUpstream()
        # No access log for the fake provider: its log is the provider's, not turngate's.
        upstream_server: TestServer = await aiohttp_server(upstream.app(), access_log=None)
        base = f"http://127.0.0.1:{upstream_server.port}"
        chosen = Settings(
            state="memory://", upstream_openai=base, upstream_anthropic=base, upstream_gemini=base
        )
        # ``azure``: the fake upstream is an Azure OpenAI resource too, under /azure.
        chosen = dataclasses.replace(chosen, upstream_azure=base if azure else "", **settings)
        app = create_app(
            chosen,
            credential_secret="test-secret",
            timeouts=timeouts or UpstreamTimeouts(connect=2.0, read=5.0),
        )
        bodies: list[bytes] = []
        if record_bodies:

            @web.middleware
            async def record(request: web.Request, handler: Any) -> web.StreamResponse:
                if request.method == "POST":
                    bodies.append(await request.read())
                response: web.StreamResponse = await handler(request)
                return response

            app.middlewares.append(record)
        # The production access logger, so tests see what an operator's log would hold.
        server: TestServer = await aiohttp_server(
            app, access_log_class=AccessLogger, access_log=access_log
        )
        return Stack(
            url=f"http://127.0.0.1:{server.port}",
            upstream=upstream,
            app=app,
            upstream_host=f"127.0.0.1:{upstream_server.port}",
            client_bodies=bodies,
        )

    return make


async def stack_on(store: str, make_stack: StackFactory, tmp_path: Path) -> Stack:
    """A stack on ``store``: memory, sqlite (a file of the test's own) or redis (the test
    session's server, keys of the test's own)."""
    if store == "sqlite":
        return await make_stack(state=f"sqlite://{tmp_path / 'state.db'}")
    if store == "redis":
        return await make_stack(state=f"{redis_url()}?key_prefix={key_prefix(tmp_path)}")
    return await make_stack()


@pytest.fixture(params=["memory", "sqlite"])
async def stack(request: pytest.FixtureRequest, make_stack: StackFactory, tmp_path: Path) -> Stack:
    """The default stack, once on each embedded store."""
    return await stack_on(request.param, make_stack, tmp_path)


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def every_store_stack(
    request: pytest.FixtureRequest, make_stack: StackFactory, tmp_path: Path
) -> Stack:
    """The stack once on each store, Redis too: for conversations whose turns come from what
    the store kept (continued turns)."""
    return await stack_on(request.param, make_stack, tmp_path)
