"""Crash and recovery through the REAL proxy, with in-memory telemetry: every metric of the
recovery paths has its exact value afterwards.

A real ``turngate serve`` on SQLite is killed with SIGKILL while three streams are in
flight (Chat, Anthropic, and a Responses background stream whose handle is bound). The
in-process app under test then opens the same state file with a frozen clock, and:

    start           3 attempts UNKNOWN (the store's recovery)         gauge 3, age 0
    +30 s           a Responses retry queries the handle: in_progress attempts 1, 409
                    another: completed, RECOVER and replayed          attempts 2, successes 1
    +40 s           the Anthropic conversation is cancelled           gauge 1
    before deadline the Chat retry is held: 409                       cas claim 1
    past deadline   recover_once settles the Chat attempt             gauge 0
    race of 5       identical Chat requests: one claims, four get 409 cas claim 1 + 4
                    the conversation is cancelled under the winner:
                    its canonical commit is refused                   cas commit 1

A second test makes an automatic retry's claim lose (``stage="retry"``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

from tests.adapters import stream_faults as faults
from tests.clock import Clock
from tests.fixtures_dir import FIXTURES_PRESENT
from tests.graph.chat_builders import body, user
from tests.proxy.helpers import CHAT_ANSWER
from tests.proxy.serve_process import SECRET, ServeProcess, eventually
from tests.proxy.stream_support import ROUTES, recorded_request
from tests.proxy.stream_upstream import Script, ScriptedUpstream
from tests.proxy.test_recovery import background_request, final_response
from tests.proxy.test_stream_recovery import tool_stream
from tests.state.redis_server import free_port
from tests.telemetry.helpers import Captured, HistogramPoint, captured, labels, nonzero, points
from turngate.proxy.app import SERVICES, create_app
from turngate.proxy.recovery import recover_once
from turngate.proxy.upstream import UpstreamTimeouts
from turngate.settings import Settings
from turngate.state.machine import DispatchState, Transition
from turngate.state.memory import MemoryStore
from turngate.state.store import OperationRecord
from turngate.telemetry.metrics import APIS, CAS_STAGES

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures are absent")

DEADLINE = 120.0
HEADERS = {
    "openai_chat": {"Authorization": "Bearer k"},
    "openai_responses": {"Authorization": "Bearer k"},
    "anthropic": {"x-api-key": "k", "anthropic-version": "2023-06-01"},
}
CONVERSATIONS = {
    "openai_chat": "conv-settled",
    "anthropic": "conv-cancelled",
    "openai_responses": "conv-recovered",
}
RACE = "conv-race"
RACERS = 5


@dataclass
class Proxy:
    url: str
    app: web.Application
    capture: Captured
    clock: Clock

    async def post(self, api: str, payload: dict[str, Any], conversation: str) -> Answer:
        return await post(self.url, api, payload, conversation)

    async def cancel(self, conversation: str) -> dict[str, Any]:
        url = f"{self.url}/turngate/v1/conversations/{conversation}/cancel"
        async with aiohttp.ClientSession() as session, session.post(url) as resp:
            assert resp.status == 200
            found: dict[str, Any] = orjson.loads(await resp.read())
            return found

    def metrics(self) -> dict[str, dict[Any, Any]]:
        return points(self.capture.reader)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


async def post(url: str, api: str, payload: dict[str, Any], conversation: str) -> Answer:
    headers = {
        "Content-Type": "application/json",
        "Turngate-Conversation-Id": conversation,
        **HEADERS[api],
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + ROUTES[api], data=orjson.dumps(payload), headers=headers) as resp,
    ):
        return Answer(resp.status, dict(resp.headers), await resp.read())


def request_of(api: str) -> dict[str, Any]:
    path = tool_stream(api)
    return background_request(path) if api == "openai_responses" else recorded_request(path)


@dataclass
class Rig:
    upstream: ScriptedUpstream
    upstream_url: str
    gate: asyncio.Event
    state: Path
    tmp: Path
    aiohttp_server: Any

    async def proxy(self, clock: Clock) -> Proxy:
        """The app under test on the state file the killed process left."""
        capture = captured()
        settings = Settings(
            state=f"sqlite://{self.state}",
            upstream_openai=self.upstream_url,
            upstream_anthropic=self.upstream_url,
            upstream_gemini=self.upstream_url,
            unknown_deadline=DEADLINE,
        )
        app = create_app(
            settings,
            clock=clock,
            credential_secret=SECRET,
            timeouts=UpstreamTimeouts(connect=2.0, read=5.0),
            telemetry=capture.telemetry,
        )
        server: TestServer = await self.aiohttp_server(app, access_log=None)
        return Proxy(f"http://127.0.0.1:{server.port}", app, capture, clock)


@pytest.fixture
async def rig(aiohttp_server: Any, tmp_path: Path) -> AsyncIterator[Rig]:
    upstream = ScriptedUpstream()
    server: TestServer = await aiohttp_server(upstream.app(), access_log=None)
    gate = asyncio.Event()
    url = f"http://127.0.0.1:{server.port}"
    yield Rig(upstream, url, gate, tmp_path / "state.db", tmp_path, aiohttp_server)
    gate.set()


async def crash_mid_stream(rig: Rig) -> None:
    """Three streams stalled mid-way by the upstream on a real ``turngate serve``, which is
    then killed with SIGKILL: it leaves them STREAMING, their handles bound."""
    log = rig.tmp / "serve.log"
    turngate = ServeProcess(free_port(), f"sqlite://{rig.state}", rig.upstream_url, log)
    await turngate.start()
    clients = []
    try:
        for api, conversation in CONVERSATIONS.items():
            data = tool_stream(api).read_bytes()
            # Two frames out (the Responses handle among them), then the stream stalls.
            rig.upstream.script(Script(data, gate_at=faults.frame_ends(data)[1], gate=rig.gate))
            clients.append(
                asyncio.create_task(post(turngate.url, api, request_of(api), conversation))
            )

            async def streaming(conversation: str = conversation) -> bool:
                status, found = await turngate.get(f"/turngate/v1/conversations/{conversation}")
                operations = found.get("operations", []) if status == 200 else []
                return [(op["state"], op["handle"] is not None) for op in operations] == [
                    ("STREAMING", True)
                ]

            await eventually(streaming)
    finally:
        turngate.kill()
    for client in clients:
        with contextlib.suppress(aiohttp.ClientError):
            await client


def gauges(proxy: Proxy) -> tuple[int, float]:
    """The UNKNOWN count and the oldest UNKNOWN age."""
    metrics = proxy.metrics()
    return (
        metrics["turngate.dispatch.unknown"][frozenset()],
        metrics["turngate.dispatch.unknown_age"][frozenset()],
    )


def unknown_durations(proxy: Proxy) -> dict[Any, tuple[int, float]]:
    series: dict[Any, HistogramPoint] = proxy.metrics().get(
        "turngate.dispatch.unknown_duration", {}
    )
    return {k: (v.count, v.sum) for k, v in series.items()}


def by_api(values: dict[str, int]) -> dict[Any, int]:
    return {labels(api=api): value for api, value in values.items()}


async def test_crash_and_recovery_report_every_metric_exactly(rig: Rig) -> None:
    await crash_mid_stream(rig)
    clock = Clock()
    start = clock.now
    proxy = await rig.proxy(clock)
    services = proxy.app[SERVICES]
    unknown = await services.store.unknown_operations(limit=10)
    assert sorted(r.manifest.api for r in unknown) == sorted(CONVERSATIONS)

    # The store's recovery at start made the three UNKNOWN, from the start.
    assert gauges(proxy) == (3, 0.0)
    clock.now = start + 30
    assert gauges(proxy) == (3, 30.0)

    # A Responses retry (same request, same caller) asks the handle: still running, held.
    data = tool_stream("openai_responses").read_bytes()
    rig.upstream.script(Script(final_response(data, status="in_progress"), sse=False))
    running = await proxy.post("openai_responses", request_of("openai_responses"), "conv-recovered")
    assert (running.status, running.headers["Turngate-Rejection"]) == (409, "dispatch_conflict")
    metrics = proxy.metrics()
    assert nonzero(metrics["turngate.recovery.attempts"]) == by_api({"openai_responses": 1})
    assert nonzero(metrics["turngate.recovery.successes"]) == {}
    assert gauges(proxy) == (3, 30.0)
    # The next one: completed, recovered and replayed.
    rig.upstream.script(Script(final_response(data), sse=False))
    recovered = await proxy.post(
        "openai_responses", request_of("openai_responses"), "conv-recovered"
    )
    assert (recovered.status, recovered.headers["Turngate-Replay"]) == (200, "1")
    metrics = proxy.metrics()
    assert nonzero(metrics["turngate.recovery.attempts"]) == by_api({"openai_responses": 2})
    assert nonzero(metrics["turngate.recovery.successes"]) == by_api({"openai_responses": 1})
    assert gauges(proxy) == (2, 30.0)

    # An operator cancels the Anthropic conversation.
    clock.now = start + 40
    cancelled = await proxy.cancel("conv-cancelled")
    assert [op["state"] for op in cancelled["operations"]] == ["CANCELLED"]
    assert gauges(proxy) == (1, 40.0)

    # The Chat retry before the deadline is held (a lost claim), nothing is sent.
    held = await proxy.post("openai_chat", request_of("openai_chat"), "conv-settled")
    assert (held.status, held.headers["Turngate-Rejection"]) == (409, "dispatch_conflict")
    # The recovery task's round past the deadline settles it.
    clock.now = start + DEADLINE + 60
    await recover_once(services)
    assert await services.store.unknown_operations(limit=10) == []
    assert gauges(proxy) == (0, 0.0)
    assert unknown_durations(proxy) == {
        labels(api="openai_responses", outcome="recovered"): (1, 30.0),
        labels(api="anthropic", outcome="cancelled"): (1, 40.0),
        labels(api="openai_chat", outcome="settled"): (1, DEADLINE + 60),
    }

    # A race of identical requests for one revision: one claims (its upstream stalls), the
    # others lose the claim and wait for its outcome. The conversation is cancelled under
    # the winner, whose canonical commit is then refused, and the waiting ones are refused.
    race_gate = asyncio.Event()
    rig.upstream.script(Script(CHAT_ANSWER.body, sse=False, gate_at=0, gate=race_gate))
    request = body(user("race"))

    async def winner_sent() -> bool:
        # After the killed process's three streams and the two handle queries.
        return len(rig.upstream.received) == 6

    racers = [asyncio.create_task(proxy.post("openai_chat", request, RACE)) for _ in range(RACERS)]
    await eventually(winner_sent)
    await asyncio.sleep(0.3)  # the losers' claims are in, and waiting
    assert not any(task.done() for task in racers)
    await proxy.cancel(RACE)
    race_gate.set()
    answers = await asyncio.gather(*racers)
    refused = sorted((a.status, a.headers["Turngate-Rejection"]) for a in answers)
    assert refused == [(409, "attempt_superseded")] + [(409, "dispatch_conflict")] * (RACERS - 1)

    metrics = proxy.metrics()
    conflicts = nonzero(metrics["turngate.cas.conflicts"])
    assert conflicts == {
        # The held Chat retry and the race's four losers; the Responses retry held while
        # its handle was still running.
        labels(api="openai_chat", stage="claim"): 1 + RACERS - 1,
        labels(api="openai_chat", stage="commit"): 1,
        labels(api="openai_responses", stage="claim"): 1,
    }
    # Every stage of every API is exported, at 0 where nothing happened.
    assert len(metrics["turngate.cas.conflicts"]) == len(APIS) * len(CAS_STAGES)
    assert nonzero(metrics["turngate.recovery.attempts"]) == by_api({"openai_responses": 2})
    assert nonzero(metrics["turngate.recovery.successes"]) == by_api({"openai_responses": 1})
    assert metrics["turngate.tool_calls.partial_dispatches"] == by_api(dict.fromkeys(APIS, 0))
    assert gauges(proxy) == (0, 0.0)
    assert len(unknown_durations(proxy)) == 3
    # Upstream: the killed process's three streams, two handle queries, the race's winner.
    assert [r.method for r in rig.upstream.received] == ["POST"] * 3 + ["GET"] * 2 + ["POST"]

    # /metrics says the same.
    async with (
        aiohttp.ClientSession() as session,
        session.get(proxy.url + "/metrics") as resp,
    ):
        text = await resp.text()
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("turngate_dispatch_unknown", frozenset())] == 0
    chat_claim = frozenset({"api": "openai_chat", "stage": "claim"}.items())
    assert samples[("turngate_cas_conflicts_total", chat_claim)] == RACERS
    responses = frozenset({"api": "openai_responses"}.items())
    assert samples[("turngate_recovery_attempts_total", responses)] == 2
    assert samples[("turngate_recovery_successes_total", responses)] == 1


# --- an automatic retry's claim -------------------------------------------------------------


class RivalStore(MemoryStore):
    """When an attempt FAILs to be retried, another request claims its revision first."""

    def __init__(self) -> None:
        super().__init__()
        self.rival: OperationRecord | None = None

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
        record = await super().transition(
            operation_id, transition, now=now, handle=handle, detail=detail, sent=sent
        )
        if record.state is DispatchState.FAILED and self.rival is None:
            draft = dataclasses.replace(
                record.manifest, operation_id="op_rival", attempt=0, idempotency_key=""
            )
            self.rival = await self.claim(draft, now=now)
        return record


async def test_a_retry_that_loses_its_claim_counts_a_retry_conflict(
    aiohttp_server: Any,
) -> None:
    upstream = ScriptedUpstream()
    upstream_server: TestServer = await aiohttp_server(upstream.app(), access_log=None)
    base = f"http://127.0.0.1:{upstream_server.port}"
    store = RivalStore()
    capture = captured()
    app = create_app(
        Settings(upstream_openai=base, upstream_anthropic=base, upstream_gemini=base),
        store=store,
        credential_secret=SECRET,
        timeouts=UpstreamTimeouts(connect=2.0, read=5.0),
        telemetry=capture.telemetry,
    )
    server: TestServer = await aiohttp_server(app, access_log=None)
    data = tool_stream("openai_chat").read_bytes()
    # Closed before its first byte: safe to retry, as the next attempt of the revision.
    upstream.script(Script(data, cut=0, end="fin"))
    answer = await post(
        f"http://127.0.0.1:{server.port}", "openai_chat", request_of("openai_chat"), "conv-retry"
    )
    assert store.rival is not None
    assert answer.status == 409
    assert len(upstream.received) == 1  # the retry never went up
    metrics = points(capture.reader)
    assert nonzero(metrics["turngate.cas.conflicts"]) == {
        labels(api="openai_chat", stage="retry"): 1
    }
