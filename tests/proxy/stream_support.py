"""What the proxy stream tests share: a turngate stack over a scripted upstream, a store that
remembers every attempt it claimed, requests for each recording, and a raw client.

A recording with a ``.request.json`` is requested with its own tools (so the tool calls are
checked against the schemas the recorded request declared); one without gets a minimal
request declaring each tool the stream calls with ``{"type": "object"}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer

from tests.adapters import stream_faults as faults
from tests.fixtures_dir import fixture_paths
from tests.proxy.stream_upstream import ScriptedUpstream
from turngate.policies.config import PolicyFile
from turngate.proxy.app import create_app
from turngate.proxy.upstream import UpstreamTimeouts
from turngate.settings import Settings
from turngate.state.conversations import ClientKey, StoredResponse
from turngate.state.machine import DispatchState, Transition
from turngate.state.manifest import DispatchManifest
from turngate.state.memory import MemoryStore
from turngate.state.sqlite import SQLiteStore
from turngate.state.store import OperationRecord, StateStore

ROUTES = {
    "openai_chat": "/openai/v1/chat/completions",
    "openai_responses": "/openai/v1/responses",
    "anthropic": "/anthropic/v1/messages",
    "gemini": "/gemini/v1beta/models/gemini-test:streamGenerateContent?alt=sse",
}
TERMINATORS = {
    "openai_chat": b"data: [DONE]",
    "anthropic": b"event: message_stop",
    "openai_responses": b"event: response.completed",
}


class RecordingStore:
    """A store that remembers each operation it claimed; ``refuse`` makes a transition fail,
    ``slow`` takes that many seconds over one (the event loop runs on meanwhile)."""

    def __init__(self, inner: StateStore) -> None:
        self.inner = inner
        self.claimed: list[str] = []
        self.refuse: set[Transition] = set()
        self.slow: dict[Transition, float] = {}

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    async def ping(self) -> bool:
        return await self.inner.ping()

    async def claim(
        self, draft: DispatchManifest, *, now: float, client_key: ClientKey | None = None
    ) -> OperationRecord:
        record = await self.inner.claim(draft, now=now, client_key=client_key)
        self.claimed.append(record.operation_id)
        return record

    async def commit_turn(
        self,
        operation_id: str,
        *,
        digest: str,
        now: float,
        handle: str | None = None,
        response: StoredResponse | None = None,
        sent: bool = False,
        continues: bool = False,
    ) -> OperationRecord:
        if Transition.COMMIT in self.refuse:
            raise ConnectionError("refused the commit for the test")
        return await self.inner.commit_turn(
            operation_id,
            digest=digest,
            now=now,
            handle=handle,
            response=response,
            sent=sent,
            continues=continues,
        )

    def __getattr__(self, name: str) -> Any:
        # The rest of the store contract (conversations, replay data) passes through.
        return getattr(self.inner, name)

    async def transition(
        self,
        operation_id: str,
        transition: Transition,
        *,
        now: float,
        handle: str | None = None,
        detail: str | None = None,
        sent: bool = False,
    ) -> OperationRecord:
        if transition in self.refuse or (sent and Transition.SEND in self.refuse):
            raise ConnectionError(f"refused {transition} for the test")
        if transition in self.slow:
            await asyncio.sleep(self.slow[transition])
        return await self.inner.transition(
            operation_id, transition, now=now, handle=handle, detail=detail, sent=sent
        )

    async def get(self, operation_id: str) -> OperationRecord | None:
        return await self.inner.get(operation_id)

    async def recover(self, *, now: float) -> list[OperationRecord]:
        return await self.inner.recover(now=now)

    async def append_log(self, kind: str, entry: dict[str, Any], *, now: float, keep: int) -> None:
        await self.inner.append_log(kind, entry, now=now, keep=keep)

    async def read_log(self, kind: str, *, limit: int) -> list[dict[str, Any]]:
        return await self.inner.read_log(kind, limit=limit)

    async def records(self) -> list[OperationRecord]:
        found = [await self.inner.get(op) for op in self.claimed]
        return [r for r in found if r is not None]

    async def forget(self) -> None:
        self.claimed.clear()


@dataclass
class StreamStack:
    url: str
    upstream_url: str
    upstream: ScriptedUpstream
    store: RecordingStore
    client: aiohttp.ClientSession

    async def post(
        self,
        api: str,
        body: dict[str, Any] | bytes,
        headers: dict[str, str] | None = None,
    ) -> ClientRun:
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        all_headers = {"Content-Type": "application/json", "Authorization": "Bearer k"}
        all_headers.update(headers or {})
        async with self.client.post(self.url + ROUTES[api], data=data, headers=all_headers) as r:
            received = bytearray()
            broken = False
            try:
                async for chunk in r.content.iter_any():
                    received += chunk
            except aiohttp.ClientPayloadError:
                broken = True
            return ClientRun(r.status, dict(r.headers), bytes(received), broken)


@dataclass(frozen=True)
class ClientRun:
    status: int
    headers: dict[str, str]
    body: bytes
    # The body did not end cleanly (turngate aborted the connection).
    broken: bool


StackFactory = Callable[..., Awaitable[StreamStack]]


@contextlib.asynccontextmanager
async def stream_stacks(aiohttp_server: Any, tmp_path: Path) -> AsyncIterator[StackFactory]:
    """Each test module's ``stream_stack`` fixture: ``make()`` gives a new stack."""
    sessions: list[aiohttp.ClientSession] = []

    async def make(
        *, sqlite: bool = False, policy: dict[str, Any] | None = None, **settings: Any
    ) -> StreamStack:
        upstream = ScriptedUpstream()
        upstream_server: TestServer = await aiohttp_server(upstream.app(), access_log=None)
        base = f"http://127.0.0.1:{upstream_server.port}"
        inner: StateStore = SQLiteStore(tmp_path / "state.db") if sqlite else MemoryStore()
        store = RecordingStore(inner)
        chosen = dataclasses.replace(
            Settings(upstream_openai=base, upstream_anthropic=base, upstream_gemini=base),
            **settings,
        )
        app = create_app(
            chosen,
            store=store,
            credential_secret="test-secret",
            timeouts=UpstreamTimeouts(connect=2.0, read=5.0),
            policies=None if policy is None else PolicyFile.model_validate(policy),
        )
        server: TestServer = await aiohttp_server(app, access_log=None)
        client = aiohttp.ClientSession()
        sessions.append(client)
        return StreamStack(f"http://127.0.0.1:{server.port}", base, upstream, store, client)

    try:
        yield make
    finally:
        for session in sessions:
            await session.close()


# --- the recordings ---------------------------------------------------------------------------


def api_of(path: Path) -> str:
    return faults.API_OF_FOLDER[path.parent.name]


def recorded_request(path: Path) -> dict[str, Any]:
    """The request a recording answers: its own ``.request.json``, streaming, or a minimal
    one declaring the tools the stream calls."""
    api = api_of(path)
    own = path.with_name(path.name.removesuffix(".sse") + ".request.json")
    if own.is_file():
        body = orjson.loads(own.read_bytes())
        assert isinstance(body, dict)
        if api != "gemini":
            body["stream"] = True
        return body
    return minimal_request(api, called_tools(api, path.read_bytes()))


def called_tools(api: str, stream: bytes) -> list[str]:
    names: list[str] = []
    for frame in faults.split_frames(stream):
        data = frame.data if isinstance(frame.data, dict) else {}
        for name in _names(api, data):
            if isinstance(name, str) and name not in names:
                names.append(name)
    return names


def _names(api: str, data: dict[str, Any]) -> list[str | None]:
    if api == "openai_chat":
        calls = [
            c
            for choice in data.get("choices") or []
            for c in (choice.get("delta") or {}).get("tool_calls") or []
        ]
        return [(c.get("function") or {}).get("name") for c in calls]
    if api == "anthropic":
        block = data.get("content_block") or {}
        return [block.get("name")] if block.get("type") == "tool_use" else []
    if api == "openai_responses":
        item = data.get("item") or {}
        return [item.get("name")] if item.get("type") == "function_call" else []
    parts = [
        p for c in data.get("candidates") or [] for p in (c.get("content") or {}).get("parts") or []
    ]
    return [(p.get("functionCall") or {}).get("name") for p in parts]


def minimal_request(api: str, tools: list[str]) -> dict[str, Any]:
    schema = {"type": "object"}
    if api == "openai_chat":
        body: dict[str, Any] = {"model": "m", "stream": True, "messages": [_user()]}
        if tools:
            body["tools"] = [
                {"type": "function", "function": {"name": n, "parameters": schema}} for n in tools
            ]
        return body
    if api == "openai_responses":
        body = {"model": "m", "stream": True, "input": "x"}
        if tools:
            body["tools"] = [{"type": "function", "name": n, "parameters": schema} for n in tools]
        return body
    if api == "anthropic":
        body = {"model": "m", "max_tokens": 1024, "stream": True, "messages": [_user()]}
        if tools:
            body["tools"] = [{"name": n, "input_schema": schema} for n in tools]
        return body
    body = {"contents": [{"role": "user", "parts": [{"text": "x"}]}]}
    if tools:
        declared = [{"name": n, "parameters": {"type": "OBJECT"}} for n in tools]
        body["tools"] = [{"functionDeclarations": declared}]
    return body


def _user() -> dict[str, Any]:
    return {"role": "user", "content": "x"}


def streams(*, tools_only: bool = False) -> list[Any]:
    paths = fixture_paths("*/*.sse")
    if tools_only:
        paths = [p for p in paths if faults.has_tool_call(api_of(p), p.read_bytes())]
    return [pytest.param(p, id=f"{p.parent.name}/{p.name}") for p in paths]


def final_state(records: list[OperationRecord]) -> list[DispatchState]:
    return [r.state for r in records]
