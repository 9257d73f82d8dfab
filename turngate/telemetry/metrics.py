"""The dispatch metrics (SPEC §7): OTel instruments created once per meter, one method per
thing the proxy observes. The same instruments feed OTLP and ``GET /metrics``.

    instrument                                  kind              labels
    turngate.validator.rejections               counter           rule, api
    turngate.validator.shadow_rejections        counter           rule, api
    turngate.tool_results.orphaned              counter           api
    turngate.tool_results.duplicate             counter           api
    turngate.dispatch.unknown                   observable gauge  (none)
    turngate.dispatch.unknown_age               observable gauge  (none), seconds
    turngate.dispatch.unknown_duration          histogram         api, outcome, seconds
    turngate.recovery.attempts                  counter           api
    turngate.recovery.successes                 counter           api
    turngate.stream.late_blocks_quarantined     counter           api
    turngate.stream.preview_retractions         counter           api
    turngate.stream.duplicate_deltas            counter           api
    turngate.cas.conflicts                      counter           api, stage
    turngate.tool_calls.partial_dispatches      counter           api  (must stay 0)
    turngate.batch.unchecked                    counter           api
    turngate.batch.results_withheld             counter           api
    turngate.request.duration                   histogram         route, api, status, seconds
    turngate.stream.time_to_first_byte          histogram         api, seconds
    turngate.upstream.errors                    counter           api, status

Every counter labelled by ``api`` alone (and ``cas.conflicts`` for each stage) starts at 0
for each API, so a scrape shows the series before the first event and an alert on
``partial_dispatches > 0`` has a series to watch. Labels are bounded: rule codes are the
validator's stable codes, ``route`` is a template (``route_label``), never a raw path.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Literal, get_args

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from turngate.adapters.azure_paths import AZURE_MOUNT, azure_path_template
from turngate.adapters.batches import ANTHROPIC_BATCHES, GEMINI_BATCH
from turngate.adapters.gemini.paths import (
    CHAT_PATH,
    CLAUDE_ON_VERTEX,
    chat_path_template,
    claude_path_template,
)
from turngate.graph.model import ApiName
from turngate.graph.validator import DUPLICATE_RESULT, ORPHAN_RESULT

APIS: tuple[ApiName, ...] = get_args(ApiName)
UnknownOutcome = Literal["recovered", "settled", "cancelled"]
# Which compare-and-swap lost: a request's claim of its conversation revision (answered 409),
# the claim of an automatic retry's next attempt, or the canonical-turn commit.
CasStage = Literal["claim", "retry", "commit"]
CAS_STAGES: tuple[CasStage, ...] = get_args(CasStage)

_SECONDS_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip
# An UNKNOWN dispatch lasts from seconds (a quick resume) to a day (a provider deadline).
_UNKNOWN_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0)

UnknownAges = Callable[[], Iterable[float]]


def after_answer(
    record: Callable[[float, dict[str, str]], None], value: float, labels: dict[str, str]
) -> None:
    """A histogram value recorded in the event loop's next turn when one runs: each record
    costs the SDK some 20 us, and the request's handler calls this before aiohttp writes its
    answer, which then goes out first. At once where no loop runs."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        record(value, labels)
        return
    loop.call_soon(record, value, labels)


def _api(api: str | None) -> str:
    return api if api is not None else "none"


class DispatchMetrics:
    def __init__(self, meter: Meter) -> None:
        counter = meter.create_counter
        self._rejections = counter(
            "turngate.validator.rejections",
            unit="{request}",
            description="Requests refused before anything was sent, by rule code",
        )
        self._shadow_rejections = counter(
            "turngate.validator.shadow_rejections",
            unit="{request}",
            description="Requests a shadowed route would have refused, by rule code",
        )
        self._orphaned = counter(
            "turngate.tool_results.orphaned",
            unit="{result}",
            description="Tool results answering no tool call, in requests seen",
        )
        self._duplicate = counter(
            "turngate.tool_results.duplicate",
            unit="{result}",
            description="Tool results repeating an answered call, in requests seen",
        )
        self._recovery_attempts = counter(
            "turngate.recovery.attempts",
            unit="{attempt}",
            description="Queries or resumes of an UNKNOWN dispatch's response handle",
        )
        self._recovery_successes = counter(
            "turngate.recovery.successes",
            unit="{attempt}",
            description="Handle recoveries that gave back the complete turn",
        )
        self._quarantined = counter(
            "turngate.stream.late_blocks_quarantined",
            unit="{event}",
            description="Stream events of an attempt generation no longer active, never relayed",
        )
        self._retracted = counter(
            "turngate.stream.preview_retractions",
            unit="{block}",
            description="Previewed blocks retracted because they will never be canonical",
        )
        self._duplicate_deltas = counter(
            "turngate.stream.duplicate_deltas",
            unit="{delta}",
            description="Stream deltas dropped as repeats of one already relayed",
        )
        self._cas_conflicts = counter(
            "turngate.cas.conflicts",
            unit="{conflict}",
            description="Claims and canonical commits that lost their compare-and-swap",
        )
        self._partial = counter(
            "turngate.tool_calls.partial_dispatches",
            unit="{dispatch}",
            description="Tool calls relayed before they were complete and valid; must stay 0",
        )
        self._unjudged = counter(
            "turngate.chained.unjudged",
            unit="{request}",
            description="Requests chained to a provider-held reply turngate does not know, "
            "sent without checking that they answer its calls",
        )
        self._batch_unchecked = counter(
            "turngate.batch.unchecked",
            unit="{batch}",
            description="Batches sent without checking their requests: too large to read "
            "whole (--max-body-bytes, or JSON containers beyond the limit), or an input "
            "file whose pieces could not all be kept",
        )
        self._results_withheld = counter(
            "turngate.batch.results_withheld",
            unit="{result}",
            description="Results of a batch answered as failed: a tool call in them broke "
            "its request's tools",
        )
        self._upstream_errors = counter(
            "turngate.upstream.errors",
            unit="{error}",
            description="Upstream error answers by HTTP status, or transport failures by rule",
        )
        self._duration = meter.create_histogram(
            "turngate.request.duration",
            unit="s",
            description="Time from request received to response finished",
            explicit_bucket_boundaries_advisory=_SECONDS_BUCKETS,
        )
        self._ttfb = meter.create_histogram(
            "turngate.stream.time_to_first_byte",
            unit="s",
            description="Time from the request's bytes sent upstream to the first byte back",
            explicit_bucket_boundaries_advisory=_SECONDS_BUCKETS,
        )
        self._unknown_duration = meter.create_histogram(
            "turngate.dispatch.unknown_duration",
            unit="s",
            description="How long a dispatch stayed UNKNOWN before it was recovered or settled",
            explicit_bucket_boundaries_advisory=_UNKNOWN_BUCKETS,
        )
        self._unknown_ages: UnknownAges | None = None
        meter.create_observable_gauge(
            "turngate.dispatch.unknown",
            callbacks=[self._observe_unknown_count],
            unit="{dispatch}",
            description="Dispatches whose outcome is UNKNOWN now",
        )
        meter.create_observable_gauge(
            "turngate.dispatch.unknown_age",
            callbacks=[self._observe_unknown_age],
            unit="s",
            description="Age of the oldest UNKNOWN dispatch now (0 when there is none)",
        )
        self._by_api = {api: {"api": api} for api in (*APIS, "none")}
        for instrument in (
            self._orphaned,
            self._duplicate,
            self._recovery_attempts,
            self._recovery_successes,
            self._quarantined,
            self._retracted,
            self._duplicate_deltas,
            self._partial,
            self._unjudged,
            self._batch_unchecked,
            self._results_withheld,
        ):
            for api in APIS:
                instrument.add(0, self._by_api[api])
        self._by_stage = {
            (api, stage): {"api": api, "stage": stage}
            for api in (*APIS, "none")
            for stage in CAS_STAGES
        }
        for api in APIS:
            for stage in CAS_STAGES:
                self._cas_conflicts.add(0, self._by_stage[api, stage])

    def _labels(self, api: str | None) -> dict[str, str]:
        labels = self._by_api.get(_api(api))
        return labels if labels is not None else {"api": _api(api)}

    # -- validation ----------------------------------------------------------------------

    def validated(self, api: str, rules: Sequence[str], *, enforced: bool = True) -> None:
        """A verdict's rule codes (empty when READY). ``enforced``: the request was refused;
        otherwise the route only shadows and the rules count as shadow rejections. Orphaned
        and duplicate results are counted one by one either way."""
        if not rules:
            return
        labels = self._labels(api)
        orphaned = rules.count(ORPHAN_RESULT)
        duplicate = rules.count(DUPLICATE_RESULT)
        if orphaned:
            self._orphaned.add(orphaned, labels)
        if duplicate:
            self._duplicate.add(duplicate, labels)
        counter = self._rejections if enforced else self._shadow_rejections
        for rule in dict.fromkeys(rules):
            counter.add(1, {"rule": rule, "api": labels["api"]})

    def refused(self, api: str | None, rule: str) -> None:
        """A refusal that is not a validator verdict (context length, paused, bad body…)."""
        self._rejections.add(1, {"rule": rule, "api": _api(api)})

    # -- dispatch state ------------------------------------------------------------------

    def cas_conflict(self, api: str | None, stage: CasStage = "claim") -> None:
        labels = self._by_stage.get((_api(api), stage))
        self._cas_conflicts.add(1, labels or {"api": _api(api), "stage": stage})

    def recovery_attempt(self, api: str) -> None:
        self._recovery_attempts.add(1, self._labels(api))

    def recovery_success(self, api: str) -> None:
        self._recovery_successes.add(1, self._labels(api))

    def watch_unknown(self, ages: UnknownAges) -> None:
        """``ages()`` returns the age in seconds of every UNKNOWN dispatch now; read at each
        collection (a scrape, an OTLP export), from the collecting thread: keep it cheap and
        free of I/O (``UnknownDispatches.ages`` is)."""
        self._unknown_ages = ages

    def unknown_resolved(self, api: str, seconds: float, outcome: UnknownOutcome) -> None:
        self._unknown_duration.record(seconds, {"api": api, "outcome": outcome})

    def _current_ages(self) -> list[float]:
        source = self._unknown_ages
        return [] if source is None else list(source())

    def _observe_unknown_count(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(len(self._current_ages()))]

    def _observe_unknown_age(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(max(self._current_ages(), default=0.0))]

    # -- streams -------------------------------------------------------------------------

    def late_blocks_quarantined(self, api: str, count: int = 1) -> None:
        if count:
            self._quarantined.add(count, self._labels(api))

    def previews_retracted(self, api: str, count: int = 1) -> None:
        if count:
            self._retracted.add(count, self._labels(api))

    def duplicate_deltas(self, api: str, count: int = 1) -> None:
        if count:
            self._duplicate_deltas.add(count, self._labels(api))

    def partial_dispatch(self, api: str) -> None:
        self._partial.add(1, self._labels(api))

    def chained_unjudged(self, api: str) -> None:
        self._unjudged.add(1, self._labels(api))

    def batch_unchecked(self, api: str) -> None:
        self._batch_unchecked.add(1, self._labels(api))

    def results_withheld(self, api: str, count: int) -> None:
        self._results_withheld.add(count, self._labels(api))

    # -- requests ------------------------------------------------------------------------

    def request_finished(self, *, route: str, api: str | None, status: int, seconds: float) -> None:
        labels = {"route": route, "api": _api(api), "status": str(status)}
        after_answer(self._duration.record, seconds, labels)

    def first_byte(self, api: str | None, seconds: float) -> None:
        after_answer(self._ttfb.record, seconds, self._labels(api))

    def upstream_error(self, api: str | None, status: int | str) -> None:
        """An upstream error status (``500``), or a transport failure's rule code
        (``upstream_unavailable``) when no status came back."""
        self._upstream_errors.add(1, {"api": _api(api), "status": str(status)})


class UnknownDispatches:
    """The UNKNOWN dispatches this process knows of, and since when: ``ages`` is the
    gauge's source. Fed from the store's recovery at start and from LOSE/RECOVER/SETTLE
    transitions; with a shared Redis store each replica sees only what it lost or
    recovered itself."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._since: dict[str, float] = {}

    def lost(self, operation_id: str, *, at: float) -> None:
        self._since.setdefault(operation_id, at)

    def resolved(self, operation_id: str, *, at: float) -> float | None:
        """How long it was UNKNOWN, or None when this process did not know it as UNKNOWN."""
        since = self._since.pop(operation_id, None)
        return None if since is None else max(0.0, at - since)

    def known(self) -> list[str]:
        return list(self._since)

    def ages(self) -> list[float]:
        now = self._clock()
        return [max(0.0, now - since) for since in self._since.values()]

    def __len__(self) -> int:
        return len(self._since)


# The routes parsed into the message graph (SPEC §1) by their label, but Gemini's, which
# are every template of ``gemini.paths.CHAT_PATH`` (``parsed_api``).
PARSED_ROUTES: dict[str, ApiName] = {
    "/openai/v1/chat/completions": "openai_chat",
    "/openai/v1/responses": "openai_responses",
    "/anthropic/v1/messages": "anthropic",
}
_GEMINI_MOUNT = "/gemini"
_GEMINI_METHODS = (":generateContent", ":streamGenerateContent", ":batchGenerateContent")
_CLAUDE_METHODS = (":rawPredict", ":streamRawPredict")
# Batches whose chat requests are checked (proxy/batches.py).
_ANTHROPIC_BATCHES = "/anthropic" + ANTHROPIC_BATCHES
_OWN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
_RESPONSE_ID = re.compile(r"^/openai/v1/responses/[^/]+$")


def route_label(path: str) -> str:
    """A bounded ``route`` label for a request path: a parsed route's template (the Gemini
    model becomes ``{model}``), a relayed one's prefix (``/openai/*``), turngate's own
    paths, ``other`` for the rest."""
    if path in PARSED_ROUTES or path in _OWN_PATHS or path == _ANTHROPIC_BATCHES:
        return path
    if path.startswith(_GEMINI_MOUNT + "/"):
        gemini = CHAT_PATH.fullmatch(path, len(_GEMINI_MOUNT))
        if gemini:
            return _GEMINI_MOUNT + chat_path_template(gemini)
        claude = CLAUDE_ON_VERTEX.fullmatch(path, len(_GEMINI_MOUNT))
        if claude:
            return _GEMINI_MOUNT + claude_path_template(claude)
        batch = GEMINI_BATCH.fullmatch(path, len(_GEMINI_MOUNT))
        if batch:
            return f"{_GEMINI_MOUNT}/{batch['version']}/models/{{model}}:batchGenerateContent"
    if path.startswith(AZURE_MOUNT + "/"):
        template = azure_path_template(path[len(AZURE_MOUNT) :])
        if template is not None:
            return AZURE_MOUNT + template
    if path.startswith("/turngate/v1/operations/"):
        return "/turngate/v1/operations/{id}"
    if path.startswith("/turngate/v1/conversations/"):
        return "/turngate/v1/conversations/{id}"
    if _RESPONSE_ID.match(path):
        return "/openai/v1/responses/{id}"
    for prefix in ("/openai/", "/anthropic/", "/gemini/", AZURE_MOUNT + "/"):
        if path.startswith(prefix):
            return prefix + "*"
    return "other"


def parsed_api(label: str) -> ApiName | None:
    """The API a ``route_label`` is parsed as, None for a relayed or turngate's own route."""
    if label in PARSED_ROUTES:
        return PARSED_ROUTES[label]
    if label == _ANTHROPIC_BATCHES:
        return "anthropic"
    if label.startswith(AZURE_MOUNT + "/") and label != AZURE_MOUNT + "/*":
        return "openai_responses" if label.endswith("/responses") else "openai_chat"
    if label.startswith(_GEMINI_MOUNT + "/") and label.endswith(_CLAUDE_METHODS):
        return "anthropic"
    if label.startswith(_GEMINI_MOUNT + "/") and label.endswith(_GEMINI_METHODS):
        return "gemini"
    return None
