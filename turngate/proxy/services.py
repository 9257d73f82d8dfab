"""What the app shares with every request: settings, store, session, clock, secrets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from turngate.graph.codec import digest_of
from turngate.proxy.routes import Prefix
from turngate.proxy.tool_calls import SchemaCache
from turngate.settings import Settings
from turngate.state.store import StateStore


@dataclass(frozen=True)
class Services:
    settings: Settings
    prefixes: tuple[Prefix, ...]
    store: StateStore
    session: aiohttp.ClientSession
    clock: Callable[[], float]
    credential_secret: bytes
    schemas: SchemaCache

    @property
    def policy_digest(self) -> str:
        # The policy engine is a later issue; for now the rollout mode is the whole policy.
        return _policy_digest(self.settings.mode)


_POLICY_DIGESTS: dict[str, str] = {}


def _policy_digest(mode: str) -> str:
    digest = _POLICY_DIGESTS.get(mode)
    if digest is None:
        digest = _POLICY_DIGESTS[mode] = digest_of({"mode": mode})
    return digest
