"""What the app shares with every request: settings, store, session, clock, secrets, policy,
and the telemetry that reports what happens to operations outside a dispatch
(``telemetry``: observe.OperationTelemetry; the recovery task, a retry meeting an UNKNOWN
attempt and the canonical commit report through it).

``Services`` is app-wide; ``for_route`` gives the view one request is served with: its
route policy (``policy``) and, under ``tool_arguments: json``, a schema cache that checks no
schema. The attempt and the stream relay read the route policy there, e.g.
``services.policy.stream_text`` (``preview`` | ``buffer``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from turngate.graph.model import ApiName
from turngate.policies.config import BUILTIN_POLICY, Policy, PolicyFile
from turngate.policies.pins import AdapterRegistry
from turngate.policies.tokens import TokenCache
from turngate.proxy.batch_tools import BatchToolsets
from turngate.proxy.kept_uploads import KeptUploads
from turngate.proxy.observe import OperationTelemetry, quiet_operations
from turngate.proxy.replies import Replies
from turngate.proxy.routes import Prefix
from turngate.proxy.tool_calls import ParseOnly, SchemaCache
from turngate.settings import Settings
from turngate.state.store import StateStore

DEFAULT_ADAPTERS = AdapterRegistry()
_PARSE_ONLY = ParseOnly(size=0)


@dataclass(frozen=True)
class Services:
    settings: Settings
    prefixes: tuple[Prefix, ...]
    store: StateStore
    session: aiohttp.ClientSession
    clock: Callable[[], float]
    credential_secret: bytes
    schemas: SchemaCache
    # The resolved policy file (--config, TURNGATE_POLICY__*, --mode) and the adapter versions.
    policies: PolicyFile = BUILTIN_POLICY
    adapters: AdapterRegistry = DEFAULT_ADAPTERS
    tokens: TokenCache = field(default_factory=TokenCache)
    telemetry: OperationTelemetry = field(default_factory=quiet_operations)
    # What this process remembers of the replies it committed (their calls, their threads'
    # tools), for the requests chained to them.
    replies: Replies = field(default_factory=Replies)
    # The pieces of Gemini uploads kept until their file is whole (proxy/gemini_uploads.py),
    # and the parts of OpenAI's (proxy/openai_uploads.py).
    kept_pieces: KeptUploads = field(default_factory=lambda: KeptUploads(0))
    kept_parts: KeptUploads = field(default_factory=lambda: KeptUploads(0))
    # The tools each request of a message batch declared, for its results.
    batch_toolsets: BatchToolsets = field(default_factory=BatchToolsets)
    # Set on the view of one request (``for_route``); app-wide it is None.
    route_policy: Policy | None = None
    # Store writes no answer waits for (shadow records); drained before the store closes.
    pending: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def policy(self) -> Policy:
        """The policy of the request this view serves; ``defaults`` app-wide."""
        return self.route_policy if self.route_policy is not None else self.policies.defaults

    @property
    def policy_digest(self) -> str:
        return self.policy.digest

    def policy_for(self, api: ApiName, model: str | None) -> Policy:
        return self.policies.policy_for(api, model)

    def in_background(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)
        return task

    async def drain(self) -> None:
        while self.pending:
            await asyncio.gather(*self.pending, return_exceptions=True)

    def for_route(self, policy: Policy) -> Services:
        schemas = self.schemas if policy.tool_arguments == "schema" else _PARSE_ONLY
        return dataclasses.replace(self, route_policy=policy, schemas=schemas)
