"""What an Anthropic request's headers ask of the API: its beta features and version.

Both change what the API accepts (interleaved thinking lets a thinking budget pass
``max_tokens``; version 2026-10-21 takes no sampling settings), so the proxy reads them into
the route (``RouteInfo``) for the rules to judge by; ``turngate check`` takes them as options.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from turngate.adapters.base import RouteInfo


def with_headers(info: RouteInfo, betas: Iterable[str], version: str | None) -> RouteInfo:
    """``info`` with the ``anthropic-beta`` values ``betas`` (comma-separated feature names,
    each header value or option one entry) and the ``anthropic-version`` ``version``."""
    names = {name.strip().lower() for value in betas for name in value.split(",")}
    names.discard("")
    version = version.strip() if version is not None else None
    return replace(info, betas=tuple(sorted(names)), api_version=version or None)
