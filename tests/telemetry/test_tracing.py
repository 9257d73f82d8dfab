"""The dispatch span: GenAI semantic conventions, state events, the upstream CLIENT child,
traceparent to the upstream, errors without messages, and content only when opted in."""

from __future__ import annotations

from typing import Any

import pytest
from multidict import CIMultiDict
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.trace import INVALID_SPAN, NoOpTracerProvider, SpanKind, StatusCode

from tests.telemetry.helpers import (
    GEMINI_KEY,
    OPENAI_KEY,
    PROMPT,
    SECRETS,
    Captured,
    captured,
    span_text,
)
from turngate.errors import SequenceRejected
from turngate.graph.validator import Violation
from turngate.telemetry import tracing
from turngate.telemetry.config import TelemetryConfig
from turngate.telemetry.tracing import (
    NOOP_SPAN,
    OPERATION_NAME,
    PROVIDER_NAME,
    dispatch_span,
    inject_traceparent,
)

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
INBOUND = CIMultiDict(
    {
        "Authorization": f"Bearer {OPENAI_KEY}",
        "traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01",
    }
)
UPSTREAM_URL = (
    f"https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?key={GEMINI_KEY}"
)


@pytest.fixture
def capture() -> Captured:
    return captured(secrets=SECRETS)


def one_dispatch(capture: Captured, outbound: Any) -> None:
    with capture.telemetry.dispatch_span(
        api="openai_chat",
        model="gpt-4o",
        route="/openai/v1/chat/completions",
        stream=True,
        rollout_mode="enforce",
        conversation_id="conv-42",
        carrier=INBOUND,
    ) as span:
        span.verdict("READY", [])
        span.manifest("op_1", revision=3, attempt=2)
        span.state("claim", "DISPATCHING")
        with span.upstream("POST", "https://api.openai.com/v1/chat/completions", outbound) as call:
            span.state("send", "SENT")
            call.status(200)
            span.state("stream", "STREAMING")
        span.state("commit", "COMMITTED")
        span.response(
            model="gpt-4o-2024-08-06",
            response_id="chatcmpl-9",
            finish_reasons=["tool_calls"],
            input_tokens=1200,
            output_tokens=34,
        )


def spans_by_kind(capture: Captured) -> dict[SpanKind, ReadableSpan]:
    spans = capture.finished()
    assert len(spans) == 2
    return {s.kind: s for s in spans}


def test_attribute_names_and_values_are_the_genai_semantic_conventions() -> None:
    names = {
        tracing.GEN_AI_OPERATION_NAME: gen_ai.GEN_AI_OPERATION_NAME,
        tracing.GEN_AI_PROVIDER_NAME: gen_ai.GEN_AI_PROVIDER_NAME,
        tracing.GEN_AI_SYSTEM: gen_ai.GEN_AI_SYSTEM,
        tracing.GEN_AI_REQUEST_MODEL: gen_ai.GEN_AI_REQUEST_MODEL,
        tracing.GEN_AI_REQUEST_STREAM: gen_ai.GEN_AI_REQUEST_STREAM,
        tracing.GEN_AI_CONVERSATION_ID: gen_ai.GEN_AI_CONVERSATION_ID,
        tracing.GEN_AI_RESPONSE_MODEL: gen_ai.GEN_AI_RESPONSE_MODEL,
        tracing.GEN_AI_RESPONSE_ID: gen_ai.GEN_AI_RESPONSE_ID,
        tracing.GEN_AI_RESPONSE_FINISH_REASONS: gen_ai.GEN_AI_RESPONSE_FINISH_REASONS,
        tracing.GEN_AI_USAGE_INPUT_TOKENS: gen_ai.GEN_AI_USAGE_INPUT_TOKENS,
        tracing.GEN_AI_USAGE_OUTPUT_TOKENS: gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS,
        tracing.GEN_AI_INPUT_MESSAGES: gen_ai.GEN_AI_INPUT_MESSAGES,
        tracing.GEN_AI_OUTPUT_MESSAGES: gen_ai.GEN_AI_OUTPUT_MESSAGES,
    }
    assert all(ours == theirs for ours, theirs in names.items())
    providers = {v.value for v in gen_ai.GenAiProviderNameValues}
    systems = {v.value for v in gen_ai.GenAiSystemValues}
    operations = {v.value for v in gen_ai.GenAiOperationNameValues}
    assert set(PROVIDER_NAME.values()) <= providers & systems
    assert set(OPERATION_NAME.values()) <= operations


def test_one_internal_span_per_dispatch_with_genai_and_turngate_attributes(
    capture: Captured,
) -> None:
    one_dispatch(capture, CIMultiDict())
    dispatch = spans_by_kind(capture)[SpanKind.INTERNAL]
    assert dispatch.name == "chat gpt-4o"
    assert dict(dispatch.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.request.stream": True,
        "gen_ai.conversation.id": "conv-42",
        "gen_ai.response.model": "gpt-4o-2024-08-06",
        "gen_ai.response.id": "chatcmpl-9",
        "gen_ai.response.finish_reasons": ("tool_calls",),
        "gen_ai.usage.input_tokens": 1200,
        "gen_ai.usage.output_tokens": 34,
        "turngate.api": "openai_chat",
        "turngate.route": "/openai/v1/chat/completions",
        "turngate.rollout_mode": "enforce",
        "turngate.verdict": "READY",
        "turngate.rule_codes": (),
        "turngate.operation_id": "op_1",
        "turngate.conversation.revision": 3,
        "turngate.attempt": 2,
        "turngate.state": "COMMITTED",
    }
    transitions = [(e.name, dict(e.attributes or {})) for e in dispatch.events]
    assert transitions == [
        ("turngate.state_change", {"turngate.transition": t, "turngate.state": s})
        for t, s in [
            ("claim", "DISPATCHING"),
            ("send", "SENT"),
            ("stream", "STREAMING"),
            ("commit", "COMMITTED"),
        ]
    ]


def test_the_dispatch_continues_the_clients_trace(capture: Captured) -> None:
    one_dispatch(capture, CIMultiDict())
    dispatch = spans_by_kind(capture)[SpanKind.INTERNAL]
    assert dispatch.context is not None
    assert dispatch.parent is not None
    assert f"{dispatch.context.trace_id:032x}" == CLIENT_TRACE
    assert f"{dispatch.parent.span_id:016x}" == CLIENT_SPAN


def test_the_upstream_call_is_a_client_child_whose_context_goes_upstream(capture: Captured) -> None:
    # The client's own traceparent, in another letter case, is replaced, never doubled.
    outbound = {"Traceparent": INBOUND["traceparent"], "Authorization": f"Bearer {OPENAI_KEY}"}
    one_dispatch(capture, outbound)
    spans = spans_by_kind(capture)
    dispatch, client = spans[SpanKind.INTERNAL], spans[SpanKind.CLIENT]
    assert client.parent is not None
    assert dispatch.context is not None
    assert client.context is not None
    assert client.parent.span_id == dispatch.context.span_id
    assert client.name == "POST"
    assert dict(client.attributes or {}) == {
        "http.request.method": "POST",
        "url.full": "https://api.openai.com/v1/chat/completions",
        "server.address": "api.openai.com",
        "server.port": 443,
        "http.response.status_code": 200,
    }
    assert [k for k in outbound if k.lower() == "traceparent"] == ["traceparent"]
    expected = f"00-{CLIENT_TRACE}-{client.context.span_id:016x}-01"
    assert outbound["traceparent"] == expected
    assert outbound["Authorization"] == f"Bearer {OPENAI_KEY}"


def test_the_upstream_url_loses_its_query_and_userinfo(capture: Captured) -> None:
    url = UPSTREAM_URL.replace("https://", "https://u:p@")
    with (
        capture.telemetry.dispatch_span(api="gemini", model="m", route="r") as span,
        span.upstream("POST", url, {}) as call,
    ):
        call.status(503)
    client = spans_by_kind(capture)[SpanKind.CLIENT]
    attributes = dict(client.attributes or {})
    assert attributes["url.full"] == (
        "https://generativelanguage.googleapis.com/v1beta/models/m:generateContent"
    )
    assert attributes["error.type"] == "503"
    assert client.status.status_code is StatusCode.ERROR
    assert GEMINI_KEY not in span_text(client)
    assert "u:p@" not in span_text(client)


def test_an_error_sets_its_rule_code_never_its_message(capture: Captured) -> None:
    violation = Violation("orphan_result", f"tool result quoting {PROMPT}", call_id="call_7")
    with (  # noqa: PT012
        pytest.raises(SequenceRejected),
        capture.telemetry.dispatch_span(api="anthropic", model="claude", route="r") as span,
    ):
        span.verdict("REJECTED", ["orphan_result", "orphan_result"])
        raise SequenceRejected([violation])
    (dispatch,) = capture.finished()
    attributes = dict(dispatch.attributes or {})
    assert attributes["error.type"] == "orphan_result"
    assert attributes["turngate.rule_codes"] == ("orphan_result",)
    assert dispatch.status.status_code is StatusCode.ERROR
    assert dispatch.events == ()
    assert PROMPT not in span_text(dispatch)


def test_a_failed_upstream_call_is_marked_on_the_client_span(capture: Captured) -> None:
    with (
        pytest.raises(ConnectionResetError),
        capture.telemetry.dispatch_span(api="gemini", model="m", route="r") as span,
        span.upstream("POST", "http://127.0.0.1:1/x", {}),
    ):
        raise ConnectionResetError("peer said something")
    spans = spans_by_kind(capture)
    for kind in (SpanKind.CLIENT, SpanKind.INTERNAL):
        assert dict(spans[kind].attributes or {})["error.type"] == "ConnectionResetError"
        assert "peer said something" not in span_text(spans[kind])


def test_content_is_recorded_only_when_opted_in_and_credentials_stay_masked() -> None:
    messages = [{"role": "user", "content": f"{PROMPT}. My key is {OPENAI_KEY}."}]
    for opted_in in (False, True):
        capture = captured(TelemetryConfig(capture_content=opted_in), secrets=SECRETS)
        with capture.telemetry.dispatch_span(api="openai_chat", model="m", route="r") as span:
            span.content(input_messages=messages, output_messages=[{"text": "sunny"}])
        text = span_text(capture.finished()[0])
        assert (PROMPT in text) is opted_in
        assert ("sunny" in text) is opted_in
        assert OPENAI_KEY not in text
    assert "My key is [REDACTED]" in text


def test_a_route_policy_overrides_the_content_default() -> None:
    capture = captured(TelemetryConfig(capture_content=True))
    with capture.telemetry.dispatch_span(
        api="openai_chat", model="m", route="r", capture_content=False
    ) as span:
        span.content(input_messages=[{"content": PROMPT}])
    assert PROMPT not in span_text(capture.finished()[0])


def test_the_noop_tracer_yields_one_shared_span_and_leaves_headers_alone() -> None:
    tracer = NoOpTracerProvider().get_tracer("t")
    headers = {"traceparent": INBOUND["traceparent"]}
    with dispatch_span(tracer, api="openai_chat", model="m", route="r", carrier=INBOUND) as span:
        assert span is NOOP_SPAN
        assert span.span is INVALID_SPAN
        span.verdict("READY", [])
        span.state("claim", "DISPATCHING")
        with span.upstream("POST", "https://api.openai.com/v1/x", headers) as call:
            call.status(500)
    assert headers == {"traceparent": INBOUND["traceparent"]}


def test_inject_without_a_span_uses_the_current_one(capture: Captured) -> None:
    headers: dict[str, str] = {}
    with capture.telemetry.dispatch_span(api="gemini", model="m", route="r") as span:
        inject_traceparent(headers)
        context = span.span.get_span_context()
    flags = f"{context.trace_flags:02x}"
    assert headers["traceparent"] == f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags}"


def test_every_copy_of_the_clients_trace_headers_is_replaced(capture: Captured) -> None:
    outbound = CIMultiDict([("Traceparent", "00-1-2-01"), ("traceparent", "00-3-4-01"), ("X", "y")])
    with capture.telemetry.dispatch_span(api="gemini", model="m", route="r") as span:
        inject_traceparent(outbound)
    assert len(outbound.getall("traceparent")) == 1
    assert outbound["traceparent"].split("-")[2] == f"{span.span.get_span_context().span_id:016x}"
    assert outbound["X"] == "y"


@pytest.mark.parametrize("tokens", [10**30, -5, True, 2**63])
def test_an_upstreams_impossible_token_count_is_left_out_not_exported(
    capture: Captured, tokens: int
) -> None:
    with capture.telemetry.dispatch_span(
        api="openai_chat", model="m", route="/r", stream=False, rollout_mode="enforce"
    ) as span:
        span.response(input_tokens=tokens, output_tokens=7)
    (dispatch,) = capture.finished()
    attributes = dict(dispatch.attributes or {})
    assert "gen_ai.usage.input_tokens" not in attributes
    assert attributes["gen_ai.usage.output_tokens"] == 7


def test_an_upstreams_model_id_and_finish_reasons_are_bounded(capture: Captured) -> None:
    with capture.telemetry.dispatch_span(
        api="openai_chat", model="m", route="/r", stream=False, rollout_mode="enforce"
    ) as span:
        span.response(
            model="x" * 100_000,
            response_id="y" * 100_000,
            finish_reasons=["stop" * 1000] * 1000,
            input_tokens=2**63 - 1,
        )
    (dispatch,) = capture.finished()
    attributes = dict(dispatch.attributes or {})
    assert attributes["gen_ai.response.model"] == "x" * tracing.MAX_UPSTREAM_TEXT
    assert attributes["gen_ai.response.id"] == "y" * tracing.MAX_UPSTREAM_TEXT
    reasons = attributes["gen_ai.response.finish_reasons"]
    assert isinstance(reasons, tuple)
    assert len(reasons) == tracing.MAX_FINISH_REASONS
    assert all(len(r) == tracing.MAX_UPSTREAM_TEXT for r in reasons)
    assert attributes["gen_ai.usage.input_tokens"] == 2**63 - 1
