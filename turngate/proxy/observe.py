"""What one dispatch reports: its span, its metrics and its log line (turngate/telemetry).

    dispatch.dispatch   with observe_dispatch(request, api) as observer: ... observer.log()
    dispatch.prepare    observer_of(request).prepared(...) / .validated(...)
    attempt.Attempt     observer.claimed(record), .state(...), .upstream(...), .answered(...),
                        .committed(turn), .stream_ended(session)

The observer lives on the request (``observer_of``), so each step of the dispatch path
reaches it with one line. What happens to an operation outside its dispatch (the recovery
task, a retry that meets an UNKNOWN attempt, a cancel, the canonical commit's CAS) is
reported through ``OperationTelemetry``, which the app puts on ``Services.telemetry``. With
telemetry off (``OTEL_SDK_DISABLED``, or an app built without it) the span is the shared
no-op one and the metrics are no-op instruments.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final, Protocol

from aiohttp import web
from multidict import CIMultiDict
from opentelemetry import propagate
from opentelemetry.trace import INVALID_SPAN
from yarl import URL

from turngate.adapters.relay import StreamRelay
from turngate.graph.assembler import StreamFailed
from turngate.graph.events import HELD_KINDS
from turngate.graph.model import ApiName
from turngate.graph.turn import AssistantTurn
from turngate.state.machine import DispatchState, Transition
from turngate.state.store import OperationRecord
from turngate.telemetry.config import TelemetryConfig
from turngate.telemetry.logs import DispatchLine, log_dispatch
from turngate.telemetry.metrics import (
    CasStage,
    DispatchMetrics,
    UnknownDispatches,
    UnknownOutcome,
    route_label,
)
from turngate.telemetry.prometheus import TELEMETRY, install
from turngate.telemetry.setup import Telemetry, setup_telemetry
from turngate.telemetry.tracing import GEN_AI_REQUEST_MODEL, OPERATION_NAME, DispatchSpan
from turngate.telemetry.tracing import UpstreamSpan as UpstreamCall


@dataclass(frozen=True)
class UnknownWatch:
    """The UNKNOWN dispatches this process knows, and the app's clock they are timed by."""

    dispatches: UnknownDispatches
    clock: Callable[[], float]


UNKNOWN: Final = web.AppKey("unknown_dispatches", UnknownWatch)
# How a dispatch that was UNKNOWN ended, by the state it reached (RECOVER, or a commit of
# the canonical CAS, gives COMMITTED; SETTLE gives FAILED; CANCEL gives CANCELLED).
_RESOLVED: dict[DispatchState, UnknownOutcome] = {
    DispatchState.COMMITTED: "recovered",
    DispatchState.FAILED: "settled",
    DispatchState.CANCELLED: "cancelled",
}

_QUIET: Telemetry | None = None


def quiet_telemetry() -> Telemetry:
    """No-op telemetry, for an app or a request built without any."""
    global _QUIET  # noqa: PLW0603
    if _QUIET is None:
        _QUIET = setup_telemetry(TelemetryConfig(disabled=True))
    return _QUIET


def install_telemetry(
    app: web.Application, telemetry: Telemetry, clock: Callable[[], float]
) -> OperationTelemetry:
    """``GET /metrics``, the request-duration middleware, the exporters' shutdown, and the
    UNKNOWN gauges over the dispatches this process knows as UNKNOWN. Call before the
    app's catch-all route. Returns what ``Services.telemetry`` reports through."""
    install(app, telemetry)
    unknown = UnknownDispatches(clock)
    watch = UnknownWatch(unknown, clock)
    app[UNKNOWN] = watch
    telemetry.metrics.watch_unknown(unknown.ages)
    operations = OperationTelemetry(telemetry.metrics, watch)
    app[OPERATIONS] = operations
    return operations


class OperationTelemetry:
    """What happens to an operation outside its dispatch's observer:

    - ``lost``: the store's recovery at start, or a Redis lease taken over, made it
      UNKNOWN; the UNKNOWN gauges count it;
    - ``resolved``: it left UNKNOWN (SETTLE by its deadline or by its handle, RECOVER from
      its handle, CANCEL); the gauges forget it and ``dispatch.unknown_duration`` records
      how long it was UNKNOWN;
    - ``recovery_attempt`` / ``recovery_success``: a query of its response handle, and one
      that recovered the complete turn;
    - ``cas_conflict``: a compare-and-swap lost (``CasStage``).
    """

    def __init__(self, metrics: DispatchMetrics, unknown: UnknownWatch | None) -> None:
        self.metrics = metrics
        self.unknown = unknown

    def lost(self, record: OperationRecord) -> None:
        """Counted UNKNOWN since its last transition (the LOSE, or the recovery's)."""
        if self.unknown is not None and record.state is DispatchState.UNKNOWN:
            self.unknown.dispatches.lost(record.operation_id, at=record.history[-1].at)

    def resolved(self, record: OperationRecord) -> None:
        """Call with the record the transition returned (or the store holds now); a record
        still UNKNOWN, or one this process never knew as UNKNOWN, changes nothing."""
        outcome = _RESOLVED.get(record.state)
        if self.unknown is not None and outcome is not None:
            _left_unknown(
                self.unknown, self.metrics, record.operation_id, record.manifest.api, outcome
            )

    def watched(self) -> list[str]:
        """The operations the UNKNOWN gauges count now."""
        return [] if self.unknown is None else self.unknown.dispatches.known()

    def forget(self, operation_id: str) -> None:
        """The operation is gone from the store (expired): no duration to record."""
        if self.unknown is not None:
            self.unknown.dispatches.resolved(operation_id, at=self.unknown.clock())

    def recovery_attempt(self, api: ApiName) -> None:
        self.metrics.recovery_attempt(api)

    def recovery_success(self, api: ApiName) -> None:
        self.metrics.recovery_success(api)

    def cas_conflict(self, api: ApiName, stage: CasStage) -> None:
        self.metrics.cas_conflict(api, stage)


OPERATIONS: Final = web.AppKey("turngate_operations", OperationTelemetry)


def quiet_operations() -> OperationTelemetry:
    """No-op operation telemetry, for services built without an app's."""
    return OperationTelemetry(quiet_telemetry().metrics, None)


def note_resolved(app: web.Application, record: OperationRecord) -> None:
    """``OperationTelemetry.resolved`` of the app's telemetry, for code that holds the app."""
    operations = app.get(OPERATIONS)
    if operations is not None:
        operations.resolved(record)


def _left_unknown(
    watch: UnknownWatch,
    metrics: DispatchMetrics,
    operation_id: str,
    api: ApiName,
    outcome: UnknownOutcome,
) -> None:
    seconds = watch.dispatches.resolved(operation_id, at=watch.clock())
    if seconds is not None:
        metrics.unknown_resolved(api, seconds, outcome)


class StreamReport(Protocol):
    """What ``stream_ended`` reads of a StreamSession."""

    relay: StreamRelay
    resumes: int
    withheld_commits: int


class DispatchObserver:
    """One dispatch's span, metrics and log line fields."""

    def __init__(
        self,
        telemetry: Telemetry,
        span: DispatchSpan,
        *,
        api: ApiName,
        route: str,
        unknown: UnknownWatch | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.telemetry = telemetry
        self.metrics = telemetry.metrics
        self.span = span
        self.api: ApiName = api
        self.route = route
        self.unknown = unknown
        self._clock = clock
        self._started = clock()
        self.verdict = "READY"
        self.rules: list[str] = []
        self.mode: str | None = None
        self.operation_id: str | None = None
        self.attempt: int | None = None
        self.state: str | None = None
        self.upstream_status: int | None = None
        self._counted = False
        self._sending: float | None = None
        self._first_byte: float | None = None
        self._upstream_ms = 0.0
        self._trace_headers: dict[str, str] = {}
        self._call: UpstreamCall | None = None
        self._stream_reported = False

    # -- before the claim ----------------------------------------------------------------

    def prepared(
        self,
        *,
        model: str | None,
        mode: str,
        stream: bool | None,
        conversation: str | None,
    ) -> None:
        self.mode = mode
        span = self.span.span
        if not span.is_recording():
            return
        if model:
            span.set_attribute(GEN_AI_REQUEST_MODEL, model)
            span.update_name(f"{OPERATION_NAME[self.api]} {model}")
        span.set_attribute("turngate.rollout_mode", mode)
        if stream is not None:
            span.set_attribute("gen_ai.request.stream", stream)
        if conversation:
            span.set_attribute("gen_ai.conversation.id", conversation)

    def validated(self, status: str, rules: Sequence[str], *, enforced: bool) -> None:
        """The verdict: rejections by rule when enforced and not READY, shadow rejections
        when a shadow route lets it through."""
        self._verdict(status, rules, enforced=enforced)
        if rules:
            self.metrics.validated(self.api, rules, enforced=enforced)

    def judged_batch(self, refused: Sequence[Sequence[str]], *, enforced: bool) -> None:
        """A batch's refused requests (each one's rules): counted as one verdict each, as
        they would be sent one by one; refused as a whole when ``enforced``."""
        self._verdict("REJECTED", [rule for rules in refused for rule in rules], enforced=enforced)
        for rules in refused:
            self.metrics.validated(self.api, rules, enforced=enforced)

    def _verdict(self, status: str, rules: Sequence[str], *, enforced: bool) -> None:
        self.rules = list(dict.fromkeys(rules))
        if rules and not enforced:
            self.verdict = "SHADOWED"
        elif status != "READY":
            self.verdict = status
        self.span.verdict(status, rules)
        if rules:
            self._counted = enforced

    def unjudged_chain(self) -> None:
        """The request is chained to a reply turngate does not know (replies.py): sent
        without the check that it answers the reply's calls."""
        self.metrics.chained_unjudged(self.api)
        span = self.span.span
        if span.is_recording():
            span.set_attribute("turngate.chained.judged", False)

    def refused(self, rule: str) -> None:
        """Refused before anything was sent (the validator's refusal counted already)."""
        if self.verdict in ("READY", "SHADOWED"):
            self.verdict = "REJECTED"
        if rule not in self.rules:
            self.rules.append(rule)
        if not self._counted:
            self.metrics.refused(self.api, rule)
        self.span.error(rule)

    def conflict(self, rule: str, stage: CasStage = "claim") -> None:
        """A claim that lost its CAS: the request's own (answered 409), or ``retry``, the
        claim of an automatic retry's next attempt."""
        self.metrics.cas_conflict(self.api, stage)
        self.span.error(rule)

    def failed(self, kind: str) -> None:
        self.span.error(kind)

    # -- the attempt ---------------------------------------------------------------------

    def claimed(self, record: OperationRecord) -> None:
        self.operation_id = record.operation_id
        self.attempt = record.manifest.attempt
        self.span.manifest(
            record.operation_id,
            revision=record.manifest.conversation_revision,
            attempt=record.manifest.attempt,
        )
        self.moved("claim", record.state, None)

    def recorded(self, record: OperationRecord, *, sent: bool = False) -> None:
        """The transition ``record`` ends with, after the SEND it carried when ``sent``."""
        history = record.history
        if sent and len(history) >= 2 and history[-2].transition is Transition.SEND:
            self.moved(str(Transition.SEND), history[-2].state, None)
        last = history[-1]
        self.moved(str(last.transition), record.state, last.detail)

    def moved(self, transition: str, state: DispatchState, detail: str | None) -> None:
        self.state = str(state)
        self.span.state(transition, str(state), detail)
        if self.unknown is None or self.operation_id is None:
            return
        if state is DispatchState.UNKNOWN:
            self.unknown.dispatches.lost(self.operation_id, at=self.unknown.clock())
            return
        outcome = _RESOLVED.get(state)
        if outcome is not None:
            _left_unknown(self.unknown, self.metrics, self.operation_id, self.api, outcome)

    @contextmanager
    def upstream(self, method: str, url: URL | str) -> Iterator[None]:
        """The upstream call's CLIENT span, around everything one attempt does upstream."""
        headers: dict[str, str] = {}
        with self.span.upstream(method, str(url), headers) as call:
            self._call, self._trace_headers = call, headers
            try:
                yield
            finally:
                self._call, self._trace_headers = None, {}
                if self._sending is not None:
                    self._upstream_ms += (self._clock() - self._sending) * 1000
                    self._sending = None

    def propagate(self, headers: CIMultiDict[str]) -> None:
        """The upstream span's ``traceparent`` into the outbound headers, replacing the
        client's copy; with tracing off the client's own is relayed unchanged."""
        if not self._trace_headers:
            return
        for name in propagate.get_global_textmap().fields:
            headers.popall(name, None)
        headers.update(self._trace_headers)

    def sending(self) -> None:
        self._sending = self._clock()

    def answered(self, status: int) -> None:
        """The upstream's status line: time to first byte, errors by status."""
        if self._sending is not None and self._first_byte is None:
            self._first_byte = self._clock() - self._sending
            self.metrics.first_byte(self.api, self._first_byte)
        self.upstream_status = status
        if self._call is not None:
            self._call.status(status)
        if status >= 400:
            self.metrics.upstream_error(self.api, status)
            self.span.error(str(status))

    def transport_failed(self, rule: str) -> None:
        self.metrics.upstream_error(self.api, rule)
        if self._call is not None:
            self._call.failed(rule)
        self.span.error(rule)

    def committed(self, turn: AssistantTurn) -> None:
        usage = turn.usage
        self.span.response(
            model=turn.model,
            response_id=turn.handle,
            finish_reasons=[turn.stop_reason] if turn.stop_reason else [],
            input_tokens=usage.input_tokens if usage else None,
            output_tokens=usage.output_tokens if usage else None,
        )

    def stream_ended(self, session: StreamReport) -> None:
        """What the stream relay did, once per streamed request (its attempts share it)."""
        if self._stream_reported:
            return
        self._stream_reported = True
        relay = session.relay
        assembler = relay.assembler
        metrics, api = self.metrics, self.api
        metrics.duplicate_deltas(api, assembler.duplicates)
        # Late: events the relay quarantined, and the blocks an attempt completed after the
        # store stopped holding it live (withheld, logged in quarantine as ``withheldBlocks``).
        metrics.late_blocks_quarantined(api, len(relay.quarantine) + session.withheld_commits)
        if relay.failed:
            # Terminal: ``finish`` hands back the recorded failure and changes nothing.
            outcome = assembler.finish()
            if isinstance(outcome, StreamFailed):
                metrics.previews_retracted(api, len(outcome.retracted))
        # A held kind (a tool call) is never previewed: one that was went out in pieces.
        for block in assembler._blocks.values():
            if block.previewed and block.start.kind in HELD_KINDS:
                metrics.partial_dispatch(api)
        if session.resumes:
            # Resumes of a dropped stream from its response handle.
            for _ in range(session.resumes):
                metrics.recovery_attempt(api)
            if relay.complete and not relay.failed:
                metrics.recovery_success(api)

    # -- after the answer ----------------------------------------------------------------

    def log(self) -> None:
        duration = (self._clock() - self._started) * 1000
        first_byte = self._first_byte
        log_dispatch(
            DispatchLine(
                route=self.route,
                api=self.api,
                verdict=self.verdict,
                duration_ms=duration,
                operation_id=self.operation_id,
                rule_codes=self.rules,
                state=self.state,
                attempt=self.attempt,
                upstream_status=self.upstream_status,
                ttfb_ms=None if first_byte is None else first_byte * 1000,
                upstream_ms=self._upstream_ms if self.upstream_status is not None else None,
                mode=self.mode,
            )
        )


OBSERVER: Final = web.RequestKey("turngate_observer", DispatchObserver)


def observer_of(request: web.Request) -> DispatchObserver:
    observer = request.get(OBSERVER)
    return observer if observer is not None else quiet_observer(request)


def quiet_observer(request: web.Request) -> DispatchObserver:
    return DispatchObserver(
        quiet_telemetry(), DispatchSpan(INVALID_SPAN, None), api="openai_chat", route="other"
    )


@contextmanager
def observe_dispatch(request: web.Request, api: ApiName) -> Iterator[DispatchObserver]:
    """The dispatch span from the client's ``traceparent``, and the observer on the request."""
    telemetry = request.app.get(TELEMETRY) or quiet_telemetry()
    route = route_label(request.path)
    with telemetry.dispatch_span(api=api, model=None, route=route, carrier=request.headers) as span:
        observer = DispatchObserver(
            telemetry, span, api=api, route=route, unknown=request.app.get(UNKNOWN)
        )
        request[OBSERVER] = observer
        yield observer
