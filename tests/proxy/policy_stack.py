"""A turngate stack whose policy file and adapter registry the test chooses, and helpers to
read what the policy engine recorded."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestServer

from tests.proxy.fake_upstream import FakeUpstream
from tests.proxy.helpers import get
from tests.proxy.stack import Stack
from turngate.policies.config import PolicyFile
from turngate.policies.loading import parse_policy
from turngate.policies.pins import AdapterRegistry
from turngate.proxy.app import SERVICES, create_app
from turngate.proxy.services import DEFAULT_ADAPTERS
from turngate.proxy.upstream import UpstreamTimeouts
from turngate.settings import Settings

PolicyStackFactory = Callable[..., Awaitable[Stack]]


def policy_of(policy: PolicyFile | dict[str, Any] | str | None) -> PolicyFile:
    if isinstance(policy, PolicyFile):
        return policy
    if isinstance(policy, str):
        return parse_policy(policy)
    return PolicyFile.model_validate(policy or {})


async def start_policy_stack(
    aiohttp_server: Any,
    *,
    policy: PolicyFile | dict[str, Any] | str | None = None,
    adapters: AdapterRegistry = DEFAULT_ADAPTERS,
    upstream: FakeUpstream | None = None,
    **settings: Any,
) -> Stack:
    """turngate with ``policy`` (a PolicyFile, its dict or YAML) in front of a fake upstream."""
    upstream = upstream or FakeUpstream()
    upstream_server: TestServer = await aiohttp_server(upstream.app(), access_log=None)
    base = f"http://127.0.0.1:{upstream_server.port}"
    chosen = Settings(
        state="memory://", upstream_openai=base, upstream_anthropic=base, upstream_gemini=base
    )
    app = create_app(
        dataclasses.replace(chosen, **settings),
        credential_secret="test-secret",
        timeouts=UpstreamTimeouts(connect=2.0, read=5.0),
        policies=policy_of(policy),
        adapters=adapters,
    )
    server: TestServer = await aiohttp_server(app, access_log=None)
    return Stack(
        url=f"http://127.0.0.1:{server.port}",
        upstream=upstream,
        app=app,
        upstream_host=f"127.0.0.1:{upstream_server.port}",
    )


async def shadow_report(stack: Stack, query: str = "") -> dict[str, Any]:
    status, report = await get(stack, "/turngate/v1/shadow" + query)
    assert status == 200, report
    assert isinstance(report, dict)
    return report


async def shadow_records(stack: Stack) -> list[dict[str, Any]]:
    """The raw shadow records in the stack's store, newest first."""
    return await stack.app[SERVICES].store.read_log("shadow", limit=10_000)
