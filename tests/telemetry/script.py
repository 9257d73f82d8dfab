"""A stand-in for the proxy's dispatch path that makes the telemetry calls the proxy will make.

Everything it reports is computed by the real core: the adapter parses each body, the
validator gives the verdict, a MemoryStore runs the claim CAS and the state machine, and a
StreamAssembler decides previews, retractions, duplicates and quarantine. Only the network
is scripted: the upstream's answer is a status or a list of canonical stream events. Time
is a fake clock, so every duration is exact.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from tests.clock import Clock
from turngate.adapters import get_adapter
from turngate.adapters.base import RouteInfo
from turngate.graph.assembler import Commit, Failed, Preview, Quarantine, StreamAssembler
from turngate.graph.codec import digest_bytes
from turngate.graph.events import ArgsDelta, BlockStart, StreamEvent
from turngate.graph.model import ApiName, MessageSequence
from turngate.graph.turn import AssistantTurn
from turngate.graph.validator import validate
from turngate.state.machine import DispatchState, Transition
from turngate.state.manifest import DispatchManifest
from turngate.state.memory import MemoryStore
from turngate.state.store import ClaimConflict, OperationRecord
from turngate.telemetry.logs import DispatchLine, log_dispatch
from turngate.telemetry.metrics import UnknownDispatches, route_label
from turngate.telemetry.setup import Telemetry
from turngate.telemetry.tracing import DispatchSpan

PROVIDER = {
    "openai_chat": "openai",
    "openai_responses": "openai",
    "anthropic": "anthropic",
    "gemini": "gemini",
}
PATH = {
    "openai_chat": "/openai/v1/chat/completions",
    "openai_responses": "/openai/v1/responses",
    "anthropic": "/anthropic/v1/messages",
    "gemini": "/gemini/v1beta/models/{model}:streamGenerateContent",
}
UPSTREAM = {
    "openai": "https://api.openai.com",
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
}


Marker = Literal["drop", "crash"]
DROP: Marker = "drop"
CRASH: Marker = "crash"


@dataclass(frozen=True)
class Request:
    api: ApiName
    body: Mapping[str, Any]
    headers: Mapping[str, str]
    conversation_id: str | None = None
    mode: Literal["enforce", "shadow"] = "enforce"
    # Gemini names model and streaming in the path; ``?key=`` may ride on the query.
    info: RouteInfo = field(default_factory=RouteInfo)
    query: str = ""

    @property
    def path(self) -> str:
        return PATH[self.api].replace("{model}", self.info.model or "")


@dataclass(frozen=True)
class Upstream:
    """What the provider does: answer ``status``; when 2xx, stream ``events``, taking
    ``ttfb`` then ``rest`` seconds. ``DROP`` marks where the upstream connection breaks,
    ``CRASH`` where the turngate process dies."""

    status: int = 200
    events: Sequence[StreamEvent | Marker] = ()
    ttfb: float = 0.25
    rest: float = 0.5
    # The error body an upstream may echo (OpenAI quotes part of a wrong key).
    error_detail: str | None = None


@dataclass
class Outcome:
    status: int
    operation_id: str | None = None
    state: DispatchState | None = None
    relayed: list[Any] = field(default_factory=list)
    # The process died mid-request: nothing after that point happened.
    crashed: bool = False


@dataclass
class ProxyDouble:
    telemetry: Telemetry
    store: MemoryStore
    clock: Clock
    unknown: UnknownDispatches
    # Each (operation id) -> the assembler of its live stream, for late events.
    streams: dict[str, StreamAssembler] = field(default_factory=dict)
    # The headers of each upstream call, as they would go out.
    sent: list[dict[str, str]] = field(default_factory=list)

    @classmethod
    async def start(cls, telemetry: Telemetry) -> ProxyDouble:
        clock = Clock(1_700_000_000.0)
        store = MemoryStore()
        await store.open()
        unknown = UnknownDispatches(clock)
        telemetry.metrics.watch_unknown(unknown.ages)
        return cls(telemetry, store, clock, unknown)

    # -- the dispatch path ---------------------------------------------------------------

    async def send(self, request: Request, upstream: Upstream, *, took: float = 0.25) -> Outcome:
        started = self.clock.now
        api = request.api
        adapter = get_adapter(api)
        seq = adapter.parse_request(request.body, request.info)
        with self.telemetry.dispatch_span(
            api=api,
            model=seq.model,
            route=route_label(request.path),
            stream=seq.stream,
            rollout_mode=request.mode,
            conversation_id=request.conversation_id,
            carrier=request.headers,
        ) as span:
            span.content(input_messages=request.body.get("messages"))
            verdict = validate(seq, adapter.capabilities)
            span.verdict(verdict.status, verdict.rules)
            enforced = request.mode == "enforce"
            self.telemetry.metrics.validated(api, verdict.rules, enforced=enforced)
            if enforced and not verdict.ready:
                span.error(verdict.rules[0])
                self.clock.advance(took)
                return self.finish(
                    request, started, Outcome(400), verdict=verdict.status, rules=verdict.rules
                )
            try:
                record = await self.store.claim(self.draft(request, seq), now=self.clock.now)
            except ClaimConflict as conflict:
                self.telemetry.metrics.cas_conflict(api)
                span.error(conflict.rule)
                self.clock.advance(took)
                return self.finish(
                    request, started, Outcome(409), verdict=verdict.status, rules=[conflict.rule]
                )
            span.manifest(
                record.operation_id,
                revision=seq.conversation_revision,
                attempt=record.manifest.attempt,
            )
            span.state(Transition.CLAIM, record.state)
            outcome = await self.attempt(request, record, upstream, span)
            if outcome.crashed:
                return outcome
            shown = "SHADOWED" if not enforced and not verdict.ready else verdict.status
            return self.finish(
                request,
                started,
                outcome,
                verdict=shown,
                rules=verdict.rules,
                attempt=record.manifest.attempt,
                upstream=upstream,
            )

    async def attempt(
        self, request: Request, record: OperationRecord, upstream: Upstream, span: DispatchSpan
    ) -> Outcome:
        op = record.operation_id
        headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
        # "/openai/v1/chat/completions" -> "{openai upstream}/v1/chat/completions"
        url = UPSTREAM[PROVIDER[request.api]] + "/" + request.path.split("/", 2)[2]
        url += request.query
        with span.upstream("POST", url, headers) as call:
            self.sent.append(headers)
            await self.move(op, Transition.SEND, span)
            self.clock.advance(upstream.ttfb)
            self.telemetry.metrics.first_byte(request.api, upstream.ttfb)
            call.status(upstream.status)
            if upstream.status >= 400:
                self.telemetry.metrics.upstream_error(request.api, upstream.status)
                detail = upstream.error_detail or f"upstream status {upstream.status}"
                state = await self.move(op, Transition.FAIL, span, detail=detail)
                span.error(str(upstream.status))
                return Outcome(upstream.status, op, state)
            await self.move(op, Transition.STREAM, span)
            assembler = StreamAssembler(api=request.api, generation=record.manifest.attempt)
            self.streams[op] = assembler
            outcome = Outcome(200, op, DispatchState.STREAMING)
            for event in upstream.events:
                if event == DROP:
                    return await self.dropped(request.api, op, assembler, outcome, span, call)
                if event == CRASH:
                    outcome.crashed = True
                    return outcome
                assert not isinstance(event, str)
                self.relay(request.api, assembler.feed(event), outcome)
            self.clock.advance(upstream.rest)
            turn = assembler.finish()
            assert isinstance(turn, AssistantTurn)
            self.telemetry.metrics.duplicate_deltas(request.api, assembler.duplicates)
            outcome.state = await self.move(op, Transition.COMMIT, span, handle=turn.handle)
            span.response(
                model=turn.model,
                response_id=turn.handle,
                finish_reasons=[turn.stop_reason] if turn.stop_reason else [],
                input_tokens=turn.usage.input_tokens if turn.usage else None,
                output_tokens=turn.usage.output_tokens if turn.usage else None,
            )
            return outcome

    async def dropped(
        self,
        api: ApiName,
        op: str,
        assembler: StreamAssembler,
        outcome: Outcome,
        span: DispatchSpan,
        call: Any,
    ) -> Outcome:
        """The upstream connection broke mid-stream: previews are retracted, the outcome
        is UNKNOWN (the provider may have finished the turn)."""
        failed = assembler.finish()
        assert not isinstance(failed, AssistantTurn)
        self.telemetry.metrics.previews_retracted(api, len(failed.retracted))
        self.telemetry.metrics.duplicate_deltas(api, assembler.duplicates)
        self.telemetry.metrics.upstream_error(api, "upstream_unavailable")
        call.failed("upstream_unavailable")
        outcome.state = await self.move(op, Transition.LOSE, span, detail=failed.rule)
        span.error(failed.rule)
        return outcome

    def relay(self, api: ApiName, outputs: list[Any], outcome: Outcome) -> None:
        for output in outputs:
            if isinstance(output, Preview):
                if _is_tool_call(output.event):
                    self.telemetry.metrics.partial_dispatch(api)
                outcome.relayed.append(output)
            elif isinstance(output, Commit):
                outcome.relayed.append(output)
            elif isinstance(output, Quarantine):
                self.telemetry.metrics.late_blocks_quarantined(api)
            elif isinstance(output, Failed):
                self.telemetry.metrics.previews_retracted(api, len(output.error.retracted))

    async def move(
        self,
        op: str,
        transition: Transition,
        span: DispatchSpan | None,
        *,
        handle: str | None = None,
        detail: str | None = None,
    ) -> DispatchState:
        record = await self.store.transition(
            op, transition, now=self.clock.now, handle=handle, detail=detail
        )
        if span is not None:
            span.state(transition, record.state, detail)
        if record.state is DispatchState.UNKNOWN:
            self.unknown.lost(op, at=self.clock.now)
        return record.state

    def finish(
        self,
        request: Request,
        started: float,
        outcome: Outcome,
        *,
        verdict: str,
        rules: Sequence[str],
        attempt: int | None = None,
        upstream: Upstream | None = None,
    ) -> Outcome:
        seconds = self.clock.now - started
        route = route_label(request.path)
        self.telemetry.metrics.request_finished(
            route=route, api=request.api, status=outcome.status, seconds=seconds
        )
        log_dispatch(
            DispatchLine(
                route=route,
                api=request.api,
                verdict=verdict,
                duration_ms=seconds * 1000,
                operation_id=outcome.operation_id,
                rule_codes=rules,
                state=None if outcome.state is None else str(outcome.state),
                attempt=attempt,
                upstream_status=None if upstream is None else upstream.status,
                ttfb_ms=None if upstream is None else upstream.ttfb * 1000,
                mode=request.mode,
            )
        )
        return outcome

    # -- after the request: late events, crash recovery ----------------------------------

    def late_event(self, op: str, event: StreamEvent, *, generation: int) -> list[Any]:
        """An event of ``op``'s stream arriving for ``generation``."""
        outcome = Outcome(200)
        self.relay(self.api_of(op), self.streams[op].feed(event, generation=generation), outcome)
        return outcome.relayed

    def api_of(self, op: str) -> ApiName:
        assembler = self.streams[op]
        return assembler.api

    async def crash_and_restart(self) -> list[str]:
        """The process stops; at start the store turns in-flight operations UNKNOWN."""
        recovered = await self.store.recover(now=self.clock.now)
        for record in recovered:
            self.unknown.lost(record.operation_id, at=self.clock.now)
        return [r.operation_id for r in recovered]

    async def recover_handle(self, op: str, *, complete: bool) -> DispatchState:
        """Query an UNKNOWN dispatch's response handle; ``complete``: the provider has the
        whole turn."""
        api = self.api_of(op)
        self.telemetry.metrics.recovery_attempt(api)
        if not complete:
            return DispatchState.UNKNOWN
        self.telemetry.metrics.recovery_success(api)
        return await self.resolve(op, Transition.RECOVER, "recovered")

    async def settle(self, op: str) -> DispatchState:
        """The provider's deadline passed: the old attempt is over without a canonical turn."""
        return await self.resolve(op, Transition.SETTLE, "settled")

    async def resolve(
        self, op: str, transition: Transition, outcome: Literal["recovered", "settled"]
    ) -> DispatchState:
        state = await self.move(op, transition, None)
        seconds = self.unknown.resolved(op, at=self.clock.now)
        assert seconds is not None
        self.telemetry.metrics.unknown_resolved(self.api_of(op), seconds, outcome)
        return state

    # -- helpers -------------------------------------------------------------------------

    def draft(self, request: Request, seq: MessageSequence) -> DispatchManifest:
        return DispatchManifest(
            operation_id="op_" + uuid.uuid4().hex,
            conversation_id=request.conversation_id,
            conversation_revision=seq.conversation_revision,
            api=request.api,
            provider=PROVIDER[request.api],  # type: ignore[arg-type]
            adapter=seq.adapter,
            model=seq.model,
            route=request.path,
            stream=True,
            sequence_digest=seq.sequence_digest,
            toolset_digest=seq.toolset_digest,
            policy_digest="sha256:" + "0" * 64,
            request_digest=digest_bytes(orjson.dumps(dict(request.body))),
            created_at=self.clock.now,
        )


def _is_tool_call(event: StreamEvent) -> bool:
    """A piece of a tool call: relaying one as a preview would be a partial dispatch."""
    return isinstance(event, ArgsDelta) or (
        isinstance(event, BlockStart) and event.kind == "tool_call"
    )
