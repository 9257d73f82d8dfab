"""A scripted run of the adversarial scenarios through the real core, then every metric exact.

Invalid sequences (enforced and shadowed), duplicate deltas, a truncated stream, a crash
with handle recovery, an UNKNOWN attempt settled and retried, late blocks of the old
generation, a CAS race, upstream errors. The proxy's calls are made by tests/telemetry/
script.py; what they report is what the validator, the store and the assembler decided.
Afterwards no span and no log line holds an API key or the prompt text.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from tests.graph.chat_builders import assistant, body, call, tool, user
from tests.telemetry.helpers import (
    ANTHROPIC_KEY,
    GEMINI_KEY,
    OPENAI_KEY,
    PROMPT,
    SECRETS,
    Captured,
    HistogramPoint,
    captured,
    dispatch_log,
    labels,
    nonzero,
    points,
    span_text,
)
from tests.telemetry.script import CRASH, DROP, Outcome, ProxyDouble, Request, Upstream
from turngate.adapters.base import RouteInfo
from turngate.graph.events import (
    ArgsDelta,
    BlockStart,
    BlockStop,
    ResponseStart,
    StreamDone,
    StreamEvent,
    TextDelta,
    TurnEnd,
    UsageEvent,
)
from turngate.graph.turn import Usage
from turngate.state.machine import DispatchState
from turngate.telemetry.metrics import APIS

CHAT = "/openai/v1/chat/completions"
MESSAGES = "/anthropic/v1/messages"
GEMINI = "/gemini/v1beta/models/{model}:streamGenerateContent"
OPENAI_HEADERS = {"Authorization": f"Bearer {OPENAI_KEY}", "Content-Type": "application/json"}
ANTHROPIC_HEADERS = {"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01"}
GEMINI_HEADERS = {"x-goog-api-key": GEMINI_KEY}


def chat(
    *messages: dict[str, Any], conversation: str | None = None, mode: str = "enforce"
) -> Request:
    return Request(
        "openai_chat",
        body(user(PROMPT), *messages),
        OPENAI_HEADERS,
        conversation_id=conversation,
        mode=mode,  # type: ignore[arg-type]
    )


def text(index: int, *parts: str, stop: bool = True) -> list[StreamEvent]:
    events: list[StreamEvent] = [BlockStart(index, "text")]
    events += [TextDelta(index, p, seq=k) for k, p in enumerate(parts)]
    return [*events, BlockStop(index)] if stop else events


def weather_call(index: int, *fragments: str, stop: bool = True) -> list[StreamEvent]:
    events: list[StreamEvent] = [
        BlockStart(index, "tool_call", call_id="call_9", name="get_weather")
    ]
    events += [ArgsDelta(index, f, seq=k) for k, f in enumerate(fragments)]
    return [*events, BlockStop(index)] if stop else events


def doubled(events: list[StreamEvent]) -> list[StreamEvent]:
    return [
        e
        for event in events
        for e in ((event, event) if isinstance(event, TextDelta) else (event,))
    ]


def operation(outcome: Outcome) -> str:
    assert outcome.operation_id is not None
    return outcome.operation_id


def start(handle: str) -> ResponseStart:
    return ResponseStart(handle=handle, model="gpt-4o-2024-08-06")


END: list[StreamEvent] = [UsageEvent(Usage(12, 5, 17)), TurnEnd("stop"), StreamDone()]
ANSWER = Upstream(events=[start("chatcmpl-1"), *text(0, "Revenue ", "is flat."), *END])
# Every delta arrives twice (a replayed upstream chunk): three repeats, all dropped.
DOUBLED = Upstream(
    events=[
        start("chatcmpl-2"),
        *doubled(text(0, "It ", "is ", "sunny.")),
        *weather_call(1, '{"city"', ': "Paris"}'),
        *END,
    ]
)
# Two text blocks previewed, a tool call half streamed, then the upstream connection breaks.
TRUNCATED = Upstream(
    events=[
        start("chatcmpl-3"),
        *text(0, "First."),
        *text(1, "Second, unfin", stop=False),
        *weather_call(2, '{"ci', stop=False),
        DROP,
    ]
)


async def run_script(px: ProxyDouble, reader: InMemoryMetricReader) -> dict[str, Any]:
    """The scenarios in order; returns what the test checks mid-run."""
    seen: dict[str, Any] = {}
    # 1. Invalid sequences, enforced: nothing is claimed or sent.
    refused = [
        chat(assistant("hello"), tool("call_7")),  # orphan
        chat(assistant("hello"), tool("call_7"), tool("call_8")),  # two orphans
        chat(assistant(None, [call("call_1")]), tool("call_1"), tool("call_1")),  # duplicate
        chat(assistant(None, [call("call_1")])),  # waiting for a result
        chat(assistant(None, [call("call_1"), call("call_1")]), tool("call_1")),  # dup call id
    ]
    for request in refused:
        assert (await px.send(request, ANSWER)).status == 400
    # 2. The same orphan on a shadowed route: sent anyway, counted as a shadow rejection.
    shadowed = await px.send(chat(assistant("hello"), tool("call_7"), mode="shadow"), ANSWER)
    assert shadowed.state is DispatchState.COMMITTED
    # 3. Duplicate deltas and a tool call streamed in pieces: committed once, whole.
    doubled = await px.send(chat(conversation="conv-c"), DOUBLED)
    assert doubled.state is DispatchState.COMMITTED
    # 4. A CAS race: two requests for the same conversation revision at once.
    race = chat(conversation="conv-race")
    quick = Upstream(events=ANSWER.events, ttfb=0.0, rest=0.0)
    statuses = sorted(
        o.status
        for o in await asyncio.gather(
            px.send(race, quick, took=0.0), px.send(race, quick, took=0.0)
        )
    )
    assert statuses == [200, 409]
    # 5. Upstream errors: an overloaded Anthropic (its error quotes the key), a rate limit.
    claude = Request(
        "anthropic",
        {"model": "claude-x", "max_tokens": 64, "messages": [{"role": "user", "content": PROMPT}]},
        ANTHROPIC_HEADERS,
    )
    detail = f"upstream status 500: invalid x-api-key: {ANTHROPIC_KEY}"
    assert (await px.send(claude, Upstream(status=500, error_detail=detail))).status == 500
    assert (await px.send(claude, Upstream(status=429))).status == 429
    # 6. Gemini with the key in the query string as well as the header.
    gemini = Request(
        "gemini",
        {"contents": [{"role": "user", "parts": [{"text": PROMPT}]}]},
        GEMINI_HEADERS,
        info=RouteInfo(model="gemini-2.0-flash", stream=True),
        query=f"?alt=sse&key={GEMINI_KEY}",
    )
    assert (await px.send(gemini, ANSWER)).state is DispatchState.COMMITTED
    # 7. A Chat stream whose upstream connection breaks (UNKNOWN), and 5 s later the
    # process dies with a Responses stream in flight (UNKNOWN at the restart).
    responses = Request(
        "openai_responses", {"model": "gpt-4o", "input": PROMPT, "stream": True}, OPENAI_HEADERS
    )
    in_flight = await px.send(
        responses, Upstream(events=[start("resp_1"), *text(0, "Hal", stop=False), CRASH])
    )
    assert in_flight.crashed
    truncated = await px.send(chat(conversation="conv-d"), TRUNCATED)
    assert truncated.state is DispatchState.UNKNOWN
    px.clock.advance(5)
    assert await px.crash_and_restart() == [in_flight.operation_id]
    # 8. The client retries the broken conversation: no new generation while the old
    # attempt's outcome is unknown.
    assert (await px.send(chat(conversation="conv-d"), ANSWER, took=0.0)).status == 409
    px.clock.advance(30)
    seen["after crash"] = points(reader)
    # 9. Handle recovery: the first query finds the response still in progress.
    assert await px.recover_handle(operation(in_flight), complete=False) is DispatchState.UNKNOWN
    px.clock.advance(10)
    assert await px.recover_handle(operation(in_flight), complete=True) is DispatchState.COMMITTED
    seen["after recovery"] = points(reader)
    # 10. The broken Chat attempt is over by the provider's deadline; the retry gets
    # attempt 2, and two late events of attempt 1 are quarantined.
    px.clock.advance(20)
    assert await px.settle(operation(truncated)) is DispatchState.FAILED
    retry = await px.send(chat(conversation="conv-d"), ANSWER)
    assert retry.state is DispatchState.COMMITTED
    late: list[StreamEvent] = [TextDelta(1, "ished.", seq=1), BlockStop(1)]
    assert [px.late_event(operation(retry), e, generation=1) for e in late] == [[], []]
    return seen


@pytest.fixture
async def run() -> tuple[Captured, ProxyDouble, dict[str, Any], str]:
    capture = captured()
    with dispatch_log() as log:
        px = await ProxyDouble.start(capture.telemetry)
        seen = await run_script(px, capture.reader)
        raw_log = log.raw
    return capture, px, seen, raw_log


def by_api(values: dict[str, int]) -> dict[Any, int]:
    return {labels(api=api): value for api, value in values.items()}


async def test_every_metric_has_its_exact_value(
    run: tuple[Captured, ProxyDouble, dict[str, Any], str],
) -> None:
    capture, _px, _seen, _ = run
    metrics = points(capture.reader)
    rejections = {
        labels(rule="orphan_result", api="openai_chat"): 2,
        labels(rule="duplicate_result", api="openai_chat"): 1,
        labels(rule="missing_result", api="openai_chat"): 1,
        labels(rule="duplicate_call_id", api="openai_chat"): 1,
    }
    assert metrics["turngate.validator.rejections"] == rejections
    assert metrics["turngate.validator.shadow_rejections"] == {
        labels(rule="orphan_result", api="openai_chat"): 1
    }
    # One, two, and the shadowed one: every orphaned result, not every request.
    assert nonzero(metrics["turngate.tool_results.orphaned"]) == by_api({"openai_chat": 4})
    assert nonzero(metrics["turngate.tool_results.duplicate"]) == by_api({"openai_chat": 1})
    assert nonzero(metrics["turngate.stream.duplicate_deltas"]) == by_api({"openai_chat": 3})
    # The truncated stream's two previewed text blocks; its tool call was never relayed.
    assert nonzero(metrics["turngate.stream.preview_retractions"]) == by_api({"openai_chat": 2})
    assert nonzero(metrics["turngate.stream.late_blocks_quarantined"]) == by_api({"openai_chat": 2})
    # The retry while UNKNOWN, and the race's loser.
    assert nonzero(metrics["turngate.cas.conflicts"]) == {
        labels(api="openai_chat", stage="claim"): 2
    }
    assert nonzero(metrics["turngate.recovery.attempts"]) == by_api({"openai_responses": 2})
    assert nonzero(metrics["turngate.recovery.successes"]) == by_api({"openai_responses": 1})
    # Must stay 0, and is exported as 0 for every API.
    assert metrics["turngate.tool_calls.partial_dispatches"] == by_api(dict.fromkeys(APIS, 0))
    assert metrics["turngate.upstream.errors"] == {
        labels(api="anthropic", status="500"): 1,
        labels(api="anthropic", status="429"): 1,
        labels(api="openai_chat", status="upstream_unavailable"): 1,
    }
    assert metrics["turngate.dispatch.unknown"] == {frozenset(): 0}
    assert metrics["turngate.dispatch.unknown_age"] == {frozenset(): 0}


async def test_durations_are_exact(run: tuple[Captured, ProxyDouble, dict[str, Any], str]) -> None:
    capture, _px, _seen, _ = run
    metrics = points(capture.reader)

    def summary(name: str) -> dict[Any, tuple[int, float]]:
        return {k: (v.count, v.sum) for k, v in metrics[name].items()}

    assert summary("turngate.request.duration") == {
        # Five refusals of 0.25 s each.
        labels(route=CHAT, api="openai_chat", status="400"): (5, 1.25),
        # Shadowed, doubled, truncated (0.25: the stream broke after the first byte),
        # the race's winner (0 s), the retry: 0.75 + 0.75 + 0.25 + 0 + 0.75.
        labels(route=CHAT, api="openai_chat", status="200"): (5, 2.5),
        # The race's loser and the retry while UNKNOWN, both refused at once.
        labels(route=CHAT, api="openai_chat", status="409"): (2, 0.0),
        labels(route=MESSAGES, api="anthropic", status="500"): (1, 0.25),
        labels(route=MESSAGES, api="anthropic", status="429"): (1, 0.25),
        labels(route=GEMINI, api="gemini", status="200"): (1, 0.75),
    }
    assert summary("turngate.stream.time_to_first_byte") == {
        labels(api="openai_chat"): (5, 1.0),
        labels(api="anthropic"): (2, 0.5),
        labels(api="gemini"): (1, 0.25),
        labels(api="openai_responses"): (1, 0.25),
    }
    assert summary("turngate.dispatch.unknown_duration") == {
        labels(api="openai_responses", outcome="recovered"): (1, 40.0),
        labels(api="openai_chat", outcome="settled"): (1, 65.0),
    }
    settled = metrics["turngate.dispatch.unknown_duration"][
        labels(api="openai_chat", outcome="settled")
    ]
    assert isinstance(settled, HistogramPoint)
    # 65 s falls in the (60, 300] bucket.
    assert settled.bucket_counts[settled.bounds.index(300)] == 1
    assert sum(settled.bucket_counts) == 1


async def test_unknown_gauges_follow_the_run(
    run: tuple[Captured, ProxyDouble, dict[str, Any], str],
) -> None:
    _capture, _px, seen, _ = run
    after_crash, after_recovery = seen["after crash"], seen["after recovery"]
    assert after_crash["turngate.dispatch.unknown"] == {frozenset(): 2}
    # The oldest: the broken Chat stream, lost 5 s before the crash.
    assert after_crash["turngate.dispatch.unknown_age"] == {frozenset(): 35.0}
    assert after_recovery["turngate.dispatch.unknown"] == {frozenset(): 1}
    assert after_recovery["turngate.dispatch.unknown_age"] == {frozenset(): 45.0}


async def test_one_log_line_per_dispatch_with_its_outcome(
    run: tuple[Captured, ProxyDouble, dict[str, Any], str],
) -> None:
    _capture, _px, _seen, raw_log = run
    lines = [orjson.loads(line) for line in raw_log.splitlines()]
    # Every request but the one the crash cut short.
    assert len(lines) == 15
    assert [line["rule_codes"] for line in lines[:5]] == [
        ["orphan_result"],
        ["orphan_result"],
        ["duplicate_result"],
        ["missing_result"],
        ["duplicate_call_id"],
    ]
    assert {line["verdict"] for line in lines[:5]} == {"REJECTED", "WAITING"}
    assert lines[5]["verdict"] == "SHADOWED"
    unknown = [line for line in lines if line["state"] == "UNKNOWN"]
    assert len(unknown) == 1
    assert unknown[0]["level"] == "warning"
    assert [line["level"] for line in lines if line["upstream_status"] == 500] == ["warning"]
    assert all(line["level"] == "info" for line in lines[:5])
    assert [line["state"] for line in lines if line["upstream_status"] == 429] == ["FAILED"]


async def test_no_span_or_log_line_holds_a_key_or_the_prompt(
    run: tuple[Captured, ProxyDouble, dict[str, Any], str],
) -> None:
    capture, px, _seen, raw_log = run
    spans = capture.finished()
    assert len(spans) > 20
    exported = "\n".join(span_text(s) for s in spans)
    for secret in (*SECRETS, PROMPT, "Zanzibar"):
        assert secret not in exported
        assert secret not in raw_log
    # The key the upstream's error quoted reached a span event detail, masked.
    assert "invalid x-api-key: [REDACTED]" in exported
    # The credentials did go upstream, untouched: masking is for telemetry only.
    assert any(h.get("Authorization") == f"Bearer {OPENAI_KEY}" for h in px.sent)
