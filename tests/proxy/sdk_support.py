"""What the SDK end-to-end tests share: adapter presence, SDK kwargs, sync-or-async calls."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import pytest

from turngate.adapters import get_adapter

MODES = ["sync", "async"]

# google-genai's async client subclasses aiohttp.ClientSession, which aiohttp deprecates.
GENAI_AIOHTTP_WARNING = pytest.mark.filterwarnings(
    "ignore:Inheritance class AiohttpClientSession from ClientSession:DeprecationWarning"
)


def adapter_ready(api: str) -> bool:
    try:
        get_adapter(api)
    except (ImportError, AttributeError):
        return False
    return True


def requires_adapter(api: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(not adapter_ready(api), reason=f"the {api} adapter has not landed")


_SAMPLING = ("temperature", "top_p", "top_k")


def sdk_kwargs(method: Callable[..., Any], body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as keyword arguments of an SDK method; fields it does not name go in extra_body."""
    known = inspect.signature(method).parameters
    kwargs = {k: v for k, v in body.items() if k in known}
    extra = {k: v for k, v in body.items() if k not in known}
    if extra:
        kwargs["extra_body"] = extra
    if method.__module__.startswith("anthropic.") and any(k in extra for k in _SAMPLING):
        # The anthropic SDK's create() lost these with its 2.0 major, whose API version
        # (2026-10-21) refuses them in the body: a body recorded with them was sent under
        # 2023-06-01, and is replayed under it.
        kwargs["extra_headers"] = {"anthropic-version": "2023-06-01"}
    return kwargs


async def call(mode: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a sync SDK method in a thread (the proxy shares this loop), or await an async one."""
    if mode == "sync":
        return await asyncio.to_thread(method, *args, **kwargs)
    return await method(*args, **kwargs)


async def consume(mode: str, stream: Any) -> list[Any]:
    if mode == "sync":
        return await asyncio.to_thread(list, stream)
    return [item async for item in stream]
