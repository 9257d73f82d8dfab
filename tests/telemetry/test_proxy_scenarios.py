"""The adversarial scenarios through the REAL proxy app, with in-memory span exporter and metric
reader injected: every metric has its exact value afterwards, spans and log lines carry what
the dispatch did and no API key or prompt text, and ``GET /metrics`` shows the same counts.

Scenarios: five invalid Chat sequences (four rules, three orphaned results, one duplicate),
a valid answer, a Responses stream with repeated deltas, a Chat stream cut mid-text, a CAS
race of two requests for one conversation revision, an Anthropic 500.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest
from opentelemetry.trace import SpanKind, format_trace_id
from prometheus_client.parser import text_string_to_metric_families

from tests.adapters.stream_faults import first_tool_call_end
from tests.fixtures_dir import FIXTURES_DIR, FIXTURES_PRESENT, fixture_paths, load_json
from tests.graph.chat_builders import assistant, body, call, tool, user
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import CHAT_ANSWER
from tests.telemetry.helpers import (
    ANTHROPIC_KEY,
    OPENAI_KEY,
    PROMPT,
    SECRETS,
    dispatch_log,
    labels,
    nonzero,
    points,
    span_text,
)
from tests.telemetry.proxy_stack import TracedStack, TracedStackFactory, traced_stack
from turngate.proxy.app import SERVICES
from turngate.proxy.observe import note_resolved
from turngate.state.machine import Transition
from turngate.telemetry.metrics import APIS

__all__ = ["traced_stack"]

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures are absent")

CHAT = "/openai/v1/chat/completions"
RESPONSES = "/openai/v1/responses"
MESSAGES = "/anthropic/v1/messages"
OPENAI = {"Authorization": f"Bearer {OPENAI_KEY}"}
ANTHROPIC = {"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01"}
CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_PARENT = f"00-{CLIENT_TRACE}-b7ad6b7169203331-01"


def chat(*messages: dict[str, Any], stream: bool = False) -> dict[str, Any]:
    request = body(user(PROMPT), *messages)
    if stream:
        request["stream"] = True
    return request


REFUSED = [
    (chat(assistant("hello"), tool("call_7")), "orphan_result"),
    (chat(assistant("hello"), tool("call_7"), tool("call_8")), "orphan_result"),
    (chat(assistant(None, [call("call_1")]), tool("call_1"), tool("call_1")), "duplicate_result"),
    (chat(assistant(None, [call("call_1")])), "missing_result"),
    (chat(assistant(None, [call("call_1"), call("call_1")]), tool("call_1")), "duplicate_call_id"),
]


def frames(path: str) -> list[bytes]:
    data = next(p for p in fixture_paths(path)).read_bytes()
    return [f + b"\n\n" for f in data.split(b"\n\n") if f.strip()]


def with_repeats(recorded: list[bytes], kind: bytes) -> tuple[bytes, int]:
    """Every frame of ``kind`` sent twice (a replayed chunk); how many repeats that makes."""
    out, repeats = b"", 0
    for frame in recorded:
        out += frame
        if kind in frame:
            out += frame
            repeats += 1
    return out, repeats


def cut_after_text(recorded: list[bytes], deltas: int) -> tuple[bytes, int]:
    """The stream's bytes up to its ``deltas``-th text delta; the cut point."""
    out, seen = b"", 0
    for frame in recorded:
        out += frame
        if b'"content":"' in frame and b'"content":""' not in frame:
            seen += 1
            if seen == deltas:
                break
    return out, len(out)


async def run_script(stack: TracedStack) -> dict[str, Any]:
    up = stack.upstream
    seen: dict[str, Any] = {}
    # 1. Invalid sequences: refused, nothing sent.
    for request, rule in REFUSED:
        status, answer = await stack.post(CHAT, request, OPENAI)
        assert status == 400, answer
        assert rule.encode() in answer
    assert up.received == []
    # 2. A valid answer, with the client's own trace context.
    up.reply(CHAT_ANSWER, path="/v1/chat/completions")
    status, _ = await stack.post(CHAT, chat(), {**OPENAI, "traceparent": CLIENT_PARENT})
    assert status == 200
    # 3. A Responses stream whose every text delta arrives twice.
    repeated, seen["repeats"] = with_repeats(
        frames("openai-responses/cc-text-only.sse"), b"response.output_text.delta"
    )
    up.reply(Reply(body=repeated, content_type="text/event-stream"), path="/v1/responses")
    streamed = {"model": "gpt-4o", "input": PROMPT, "stream": True}
    status, answer = await stack.post(RESPONSES, streamed, OPENAI)
    assert status == 200
    # Each delta relayed once.
    assert answer.count(b"event: response.output_text.delta") == seen["repeats"]
    # 4. A Chat stream cut after two text deltas: the previewed block is retracted; nothing
    # the provider runs, no tool call delivered: the attempt is over (FAILED), not UNKNOWN.
    recorded = frames("openai-chat/cc-text-only.sse")
    whole = b"".join(recorded)
    _, cut = cut_after_text(recorded, 2)
    up.reply(
        Reply(body=whole, content_type="text/event-stream", drop_after=cut),
        path="/v1/chat/completions",
    )
    status, answer = await stack.post(CHAT, chat(stream=True), OPENAI)
    assert (status, answer) == (200, b"<broken>")
    seen["after cut"] = points(stack.capture.reader)
    # 5. A CAS race: two requests for one conversation revision while the first is in flight
    # (two different ones: the same request again would wait for the first and replay it).
    up.reply(Reply(body=CHAT_ANSWER.body, delay=0.3), path="/v1/chat/completions")
    race = {**OPENAI, "Turngate-Conversation-Id": "conv-race"}
    results = await asyncio.gather(
        stack.post(CHAT, chat(assistant("hi"), user("again")), race),
        stack.post(CHAT, chat(assistant("hi"), user("and again")), race),
    )
    assert sorted(status for status, _ in results) == [200, 409]
    # 6. Anthropic overloaded: its 500 is relayed, counted by status.
    error = {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}
    up.reply(Reply.json(error, status=500), path="/v1/messages")
    claude = {
        "model": "claude-x",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": PROMPT}],
    }
    status, _ = await stack.post(MESSAGES, claude, ANTHROPIC)
    assert status == 500
    return seen


@pytest.fixture
async def run(traced_stack: TracedStackFactory) -> tuple[TracedStack, dict[str, Any], str]:
    stack = await traced_stack()
    with dispatch_log() as log:
        seen = await run_script(stack)
        seen["metrics text"] = await stack.get("/metrics")
        raw = log.raw
    return stack, seen, raw


Run = tuple[TracedStack, dict[str, Any], str]


def by_api(values: dict[str, int]) -> dict[Any, int]:
    return {labels(api=api): value for api, value in values.items()}


async def test_every_metric_has_its_exact_value(run: Run) -> None:
    stack, seen, _ = run
    metrics = points(stack.capture.reader)
    rejections: dict[Any, int] = {}
    for _, rule in REFUSED:
        key = labels(rule=rule, api="openai_chat")
        rejections[key] = rejections.get(key, 0) + 1
    assert metrics["turngate.validator.rejections"] == rejections
    assert "turngate.validator.shadow_rejections" not in metrics
    # One, then two orphaned results; one repeated result: counted one by one.
    assert nonzero(metrics["turngate.tool_results.orphaned"]) == by_api({"openai_chat": 3})
    assert nonzero(metrics["turngate.tool_results.duplicate"]) == by_api({"openai_chat": 1})
    assert nonzero(metrics["turngate.stream.duplicate_deltas"]) == by_api(
        {"openai_responses": seen["repeats"]}
    )
    # The cut stream's one previewed text block.
    assert nonzero(metrics["turngate.stream.preview_retractions"]) == by_api({"openai_chat": 1})
    assert nonzero(metrics["turngate.stream.late_blocks_quarantined"]) == {}
    assert nonzero(metrics["turngate.cas.conflicts"]) == {
        labels(api="openai_chat", stage="claim"): 1
    }
    assert metrics["turngate.tool_calls.partial_dispatches"] == by_api(dict.fromkeys(APIS, 0))
    assert metrics["turngate.upstream.errors"] == {labels(api="anthropic", status="500"): 1}
    # The cut stream is over, not UNKNOWN: nothing is left to wait for.
    assert metrics["turngate.dispatch.unknown"] == {frozenset(): 0}
    assert seen["after cut"]["turngate.dispatch.unknown"] == {frozenset(): 0}


async def test_durations_count_every_request(run: Run) -> None:
    stack, _, _ = run
    metrics = points(stack.capture.reader)
    counts = {k: v.count for k, v in metrics["turngate.request.duration"].items()}
    assert counts == {
        labels(route=CHAT, api="openai_chat", status="400"): 5,
        # The valid answer, the cut stream (its status line was 200), the race's winner.
        labels(route=CHAT, api="openai_chat", status="200"): 3,
        labels(route=CHAT, api="openai_chat", status="409"): 1,
        labels(route=RESPONSES, api="openai_responses", status="200"): 1,
        labels(route=MESSAGES, api="anthropic", status="500"): 1,
        # The scrape in the fixture.
        labels(route="/metrics", api="none", status="200"): 1,
    }
    # The race's winner waited 0.3 s for its upstream; the slowest 200 is at least that.
    winner = metrics["turngate.request.duration"][
        labels(route=CHAT, api="openai_chat", status="200")
    ]
    assert winner.sum >= 0.3
    first_bytes = {k: v.count for k, v in metrics["turngate.stream.time_to_first_byte"].items()}
    assert first_bytes == by_api({"openai_chat": 3, "openai_responses": 1, "anthropic": 1})


async def test_spans_nest_and_carry_the_dispatch(run: Run) -> None:
    stack, _, _ = run
    spans = stack.capture.finished()
    dispatches = [s for s in spans if s.kind is SpanKind.INTERNAL]
    calls = [s for s in spans if s.kind is SpanKind.CLIENT]
    # Five refusals, the answer, the Responses stream, the cut stream, two racers, Anthropic.
    assert len(dispatches) == 11
    # Only the claimed requests that reached the upstream: the race's loser never did.
    assert len(calls) == len(stack.upstream.received) == 5
    by_id = {s.context.span_id: s for s in dispatches}
    for client in calls:
        assert client.parent is not None
        assert client.parent.span_id in by_id
    # Each upstream request carried its own CLIENT span's context, not the client's.
    sent = sorted(r.headers["traceparent"] for r in stack.upstream.received)
    expected = sorted(
        f"00-{format_trace_id(s.context.trace_id)}-{s.context.span_id:016x}"
        f"-{int(s.context.trace_flags):02x}"
        for s in calls
    )
    assert sent == expected
    answered = [s for s in dispatches if s.parent is not None]
    assert [format_trace_id(s.context.trace_id) for s in answered] == [CLIENT_TRACE]
    assert answered[0].attributes is not None
    attributes = dict(answered[0].attributes)
    assert attributes["gen_ai.request.model"] == "gpt-4o"
    assert attributes["gen_ai.response.model"] == "gpt-4o"
    assert attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert attributes["turngate.state"] == "COMMITTED"
    assert [e.attributes["turngate.transition"] for e in answered[0].events if e.attributes] == [
        "claim",
        "send",
        "commit",
    ]
    refused = [s for s in dispatches if s.attributes and s.attributes.get("turngate.rule_codes")]
    codes = [list(s.attributes["turngate.rule_codes"]) for s in refused if s.attributes]  # type: ignore[arg-type]
    assert sorted(codes) == sorted([rule] for _, rule in REFUSED)
    failed = [
        s for s in dispatches if s.attributes and s.attributes.get("turngate.state") == "FAILED"
    ]
    # The cut stream and Anthropic's 500; nothing is left UNKNOWN.
    assert len(failed) == 2
    assert not [s for s in dispatches if s.attributes.get("turngate.state") == "UNKNOWN"]  # type: ignore[union-attr]


async def test_one_log_line_per_dispatch(run: Run) -> None:
    _, _, raw = run
    lines = [orjson.loads(line) for line in raw.splitlines()]
    assert len(lines) == 11
    assert [line["rule_codes"] for line in lines[:5]] == [[rule] for _, rule in REFUSED]
    assert [line["state"] for line in lines[:5]] == [None] * 5
    assert lines[5]["state"] == "COMMITTED"
    assert lines[5]["upstream_status"] == 200
    cut = [line for line in lines if line["state"] == "FAILED" and line["upstream_status"] == 200]
    assert [line["level"] for line in cut] == ["warning"]
    assert [line["level"] for line in lines if line["upstream_status"] == 500] == ["warning"]


async def test_no_span_or_log_line_holds_a_key_or_the_prompt(run: Run) -> None:
    stack, _, raw = run
    exported = "\n".join(span_text(s) for s in stack.capture.finished())
    for secret in (*SECRETS, PROMPT, "Zanzibar"):
        assert secret not in exported
        assert secret not in raw
    # The keys did go upstream: masking is for telemetry only.
    assert any(r.headers.get("x-api-key") == ANTHROPIC_KEY for r in stack.upstream.received)


async def test_metrics_endpoint_of_the_real_app_parses(run: Run) -> None:
    _, seen, _ = run
    status, text = seen["metrics text"]
    assert status == 200
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    orphan = frozenset({"rule": "orphan_result", "api": "openai_chat"}.items())
    assert samples[("turngate_validator_rejections_total", orphan)] == 2
    chat_api = frozenset({"api": "openai_chat"}.items())
    assert samples[("turngate_tool_results_orphaned_total", chat_api)] == 3
    lost_claim = frozenset({"api": "openai_chat", "stage": "claim"}.items())
    assert samples[("turngate_cas_conflicts_total", lost_claim)] == 1
    assert samples[("turngate_dispatch_unknown", frozenset())] == 0
    for api in APIS:
        assert (
            samples[
                ("turngate_tool_calls_partial_dispatches_total", frozenset({"api": api}.items()))
            ]
            == 0
        )
    error = frozenset({"api": "anthropic", "status": "500"}.items())
    assert samples[("turngate_upstream_errors_total", error)] == 1


async def test_a_shadowed_route_counts_what_it_would_have_refused(
    traced_stack: TracedStackFactory,
) -> None:
    stack = await traced_stack(mode="shadow")
    stack.upstream.reply(CHAT_ANSWER, path="/v1/chat/completions")
    with dispatch_log() as log:
        request, rule = REFUSED[1]
        status, _ = await stack.post(CHAT, request, OPENAI)
        lines = log.lines
    assert status == 200
    metrics = points(stack.capture.reader)
    assert "turngate.validator.rejections" not in metrics
    assert metrics["turngate.validator.shadow_rejections"] == {
        labels(rule=rule, api="openai_chat"): 1
    }
    assert nonzero(metrics["turngate.tool_results.orphaned"]) == by_api({"openai_chat": 2})
    assert [(line["verdict"], line["state"], line["mode"]) for line in lines] == [
        ("SHADOWED", "COMMITTED", "shadow")
    ]


async def test_with_tracing_off_the_clients_traceparent_goes_up_unchanged(
    traced_stack: TracedStackFactory,
) -> None:
    stack = await traced_stack(tracing=False)
    assert not stack.capture.telemetry.tracing
    stack.upstream.reply(CHAT_ANSWER, path="/v1/chat/completions")
    status, _ = await stack.post(CHAT, chat(), {**OPENAI, "traceparent": CLIENT_PARENT})
    assert status == 200
    assert [r.headers["traceparent"] for r in stack.upstream.received] == [CLIENT_PARENT]
    # Metrics are counted all the same.
    first_bytes = points(stack.capture.reader)["turngate.stream.time_to_first_byte"]
    assert {k: v.count for k, v in first_bytes.items()} == by_api({"openai_chat": 1})


async def test_an_unknown_dispatch_settled_later_leaves_the_gauges(
    traced_stack: TracedStackFactory,
) -> None:
    stack = await traced_stack()
    # Cut after a tool call reached the client (it may be running it): UNKNOWN.
    stem = "openai-chat/pai-parallel-2-tool-calls"
    recorded = b"".join(frames(stem + ".sse"))
    cut = first_tool_call_end("openai_chat", recorded)
    reply = Reply(body=recorded, content_type="text/event-stream", drop_after=cut)
    stack.upstream.reply(reply, path="/v1/chat/completions")
    request = load_json(FIXTURES_DIR / (stem + ".request.json"))
    assert isinstance(request, dict)
    assert await stack.post(CHAT, request, OPENAI) == (200, b"<broken>")
    assert points(stack.capture.reader)["turngate.dispatch.unknown"] == {frozenset(): 1}
    store = stack.app[SERVICES].store
    (lost,) = [s for s in stack.capture.finished() if s.kind is SpanKind.INTERNAL]
    assert lost.attributes is not None
    operation_id = str(lost.attributes["turngate.operation_id"])
    record = await store.transition(operation_id, Transition.SETTLE, now=time.time())
    note_resolved(stack.app, record)
    metrics = points(stack.capture.reader)
    assert metrics["turngate.dispatch.unknown"] == {frozenset(): 0}
    durations = metrics["turngate.dispatch.unknown_duration"]
    assert list(durations) == [labels(api="openai_chat", outcome="settled")]
    assert durations[labels(api="openai_chat", outcome="settled")].count == 1
