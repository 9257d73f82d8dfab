"""Spans of a dispatch: one INTERNAL span per dispatch, a CLIENT child for the upstream call.

    with dispatch_span(tracer, api="openai_chat", model="gpt-4o", route=route,
                       carrier=request.headers) as span:
        span.verdict("READY", [])
        span.manifest(operation_id, revision=3, attempt=1)
        span.state("claim", "DISPATCHING")
        with span.upstream("POST", url, headers) as call:   # sets traceparent in ``headers``
            call.status(200)
        span.response(model=..., finish_reasons=["stop"], input_tokens=12, output_tokens=3)

Attributes follow the GenAI semantic conventions (``gen_ai.*``) plus ``turngate.*``. Nothing
of the prompt or the completion is recorded unless ``capture_content`` is on, and then it
goes through the redactor; no header value is ever an attribute (the upstream URL loses its
query, where Gemini may carry ``key=``). Exceptions set ``error.type`` to the rule code or
class name, never the message, and are not recorded as events (a message may quote content).
With the no-op tracer ``dispatch_span`` yields a shared no-op span: the hot path does nothing.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from typing import Final

import orjson
from opentelemetry import propagate, trace
from opentelemetry.trace import NoOpTracer, Span, SpanKind, Status, StatusCode, Tracer

from turngate.errors import TurngateError
from turngate.graph.model import ApiName
from turngate.telemetry.redaction import DEFAULT_REDACTOR, Redactor

# GenAI semantic conventions (gen_ai_attributes in opentelemetry-semantic-conventions).
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
# Deprecated in favour of gen_ai.provider.name; still what many backends group by.
GEN_AI_SYSTEM: Final = "gen_ai.system"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_REQUEST_STREAM: Final = "gen_ai.request.stream"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"

MAX_UPSTREAM_TEXT: Final = 256
MAX_FINISH_REASONS: Final = 16
MAX_TOKEN_COUNT: Final = 2**63 - 1
ERROR_TYPE: Final = "error.type"

PROVIDER_NAME: dict[ApiName, str] = {
    "openai_chat": "openai",
    "openai_responses": "openai",
    "anthropic": "anthropic",
    "gemini": "gcp.gemini",
}
OPERATION_NAME: dict[ApiName, str] = {
    "openai_chat": "chat",
    "openai_responses": "chat",
    "anthropic": "chat",
    "gemini": "generate_content",
}
STATE_EVENT = "turngate.state_change"


def dispatch_attributes(
    *,
    api: ApiName,
    model: str | None,
    route: str,
    stream: bool | None,
    rollout_mode: str | None,
    conversation_id: str | None,
) -> dict[str, str | bool]:
    attributes: dict[str, str | bool] = {
        GEN_AI_OPERATION_NAME: OPERATION_NAME[api],
        GEN_AI_PROVIDER_NAME: PROVIDER_NAME[api],
        GEN_AI_SYSTEM: PROVIDER_NAME[api],
        "turngate.api": api,
        "turngate.route": route,
    }
    if model:
        attributes[GEN_AI_REQUEST_MODEL] = model
    if stream is not None:
        attributes[GEN_AI_REQUEST_STREAM] = stream
    if rollout_mode:
        attributes["turngate.rollout_mode"] = rollout_mode
    if conversation_id:
        attributes[GEN_AI_CONVERSATION_ID] = conversation_id
    return attributes


def token_count(value: object) -> int | None:
    """An upstream's token count as the exporters can carry it (int64), or None."""
    if type(value) is not int or not 0 <= value <= MAX_TOKEN_COUNT:
        return None
    return value


def error_kind(exc: BaseException) -> str:
    return exc.rule if isinstance(exc, TurngateError) else type(exc).__name__


def state_event(
    span: Span,
    transition: str,
    state: str,
    detail: str | None = None,
    *,
    redactor: Redactor = DEFAULT_REDACTOR,
) -> None:
    """A dispatch state change as a span event; ``turngate.state`` follows the last one."""
    if not span.is_recording():
        return
    attributes = {"turngate.transition": str(transition), "turngate.state": str(state)}
    if detail:
        attributes["turngate.detail"] = redactor.scrub(detail)
    span.add_event(STATE_EVENT, attributes)
    span.set_attribute("turngate.state", str(state))


def inject_traceparent(headers: MutableMapping[str, str], span: Span | None = None) -> None:
    """W3C trace context of ``span`` (default: the current span) into outbound headers, and
    whatever else OTEL_PROPAGATORS names, replacing the client's own copies in any case."""
    fields = propagate.get_global_textmap().fields
    for name in [k for k in headers if k.lower() in fields]:
        headers.pop(name, None)
    context = trace.set_span_in_context(span) if span is not None else None
    propagate.inject(headers, context=context)


def _url_parts(url: str) -> tuple[str, str, int | None]:
    """``url.full`` without userinfo, query or fragment; server address and port."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", "")), host, port


class UpstreamSpan:
    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def status(self, code: int) -> None:
        if not self.span.is_recording():
            return
        self.span.set_attribute("http.response.status_code", code)
        if code >= 400:
            self.span.set_attribute(ERROR_TYPE, str(code))
            self.span.set_status(Status(StatusCode.ERROR, str(code)))

    def failed(self, kind: str) -> None:
        if not self.span.is_recording():
            return
        self.span.set_attribute(ERROR_TYPE, kind)
        self.span.set_status(Status(StatusCode.ERROR, kind))


class DispatchSpan:
    """The span of one dispatch and what the proxy learns along the way."""

    __slots__ = ("_recording", "capture_content", "redactor", "span", "tracer")

    def __init__(
        self,
        span: Span,
        tracer: Tracer | None,
        *,
        capture_content: bool = False,
        redactor: Redactor = DEFAULT_REDACTOR,
    ) -> None:
        self.span = span
        self.tracer = tracer
        self.capture_content = capture_content
        self.redactor = redactor
        self._recording = span.is_recording()

    def verdict(self, status: str, rules: Sequence[str]) -> None:
        if not self._recording:
            return
        self.span.set_attributes(
            {"turngate.verdict": status, "turngate.rule_codes": list(dict.fromkeys(rules))}
        )

    def manifest(self, operation_id: str, *, revision: int | None, attempt: int) -> None:
        if not self._recording:
            return
        attributes: dict[str, str | int] = {
            "turngate.operation_id": operation_id,
            "turngate.attempt": attempt,
        }
        if revision is not None:
            attributes["turngate.conversation.revision"] = revision
        self.span.set_attributes(attributes)

    def state(self, transition: str, state: str, detail: str | None = None) -> None:
        if self._recording:
            state_event(self.span, transition, state, detail, redactor=self.redactor)

    def response(
        self,
        *,
        model: str | None = None,
        response_id: str | None = None,
        finish_reasons: Sequence[str] = (),
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> None:
        if not self._recording:
            return
        # Every value here comes from the upstream's answer: bounded, so a hostile or broken
        # upstream cannot make a span huge or a count the exporter cannot encode (int64).
        attributes: dict[str, str | int | list[str]] = {}
        if model:
            attributes[GEN_AI_RESPONSE_MODEL] = model[:MAX_UPSTREAM_TEXT]
        if response_id:
            attributes[GEN_AI_RESPONSE_ID] = response_id[:MAX_UPSTREAM_TEXT]
        if finish_reasons:
            attributes[GEN_AI_RESPONSE_FINISH_REASONS] = [
                reason[:MAX_UPSTREAM_TEXT] for reason in finish_reasons[:MAX_FINISH_REASONS]
            ]
        for key, tokens in (
            (GEN_AI_USAGE_INPUT_TOKENS, input_tokens),
            (GEN_AI_USAGE_OUTPUT_TOKENS, output_tokens),
        ):
            count = token_count(tokens)
            if count is not None:
                attributes[key] = count
        self.span.set_attributes(attributes)

    def content(self, *, input_messages: object = None, output_messages: object = None) -> None:
        """Prompt and completion as JSON, only when content capture is on; credentials in
        them are masked all the same."""
        if not (self._recording and self.capture_content):
            return
        for key, value in (
            (GEN_AI_INPUT_MESSAGES, input_messages),
            (GEN_AI_OUTPUT_MESSAGES, output_messages),
        ):
            if value is not None:
                text = orjson.dumps(value, default=str).decode()
                self.span.set_attribute(key, self.redactor.scrub(text))

    def error(self, kind: str) -> None:
        """The dispatch ended in error: a rule code, an HTTP status, a class name."""
        if not self._recording:
            return
        self.span.set_attribute(ERROR_TYPE, kind)
        self.span.set_status(Status(StatusCode.ERROR, kind))

    @contextmanager
    def upstream(
        self, method: str, url: str, headers: MutableMapping[str, str]
    ) -> Iterator[UpstreamSpan]:
        """The upstream call as a CLIENT child span; its trace context goes into ``headers``."""
        if self.tracer is None:
            yield NOOP_UPSTREAM
            return
        full, host, port = _url_parts(str(url))
        attributes: dict[str, str | int] = {
            "http.request.method": method,
            "url.full": full,
            "server.address": host,
        }
        if port is not None:
            attributes["server.port"] = port
        with self.tracer.start_as_current_span(
            method,
            kind=SpanKind.CLIENT,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            inject_traceparent(headers, span)
            call = UpstreamSpan(span)
            try:
                yield call
            except BaseException as exc:
                call.failed(error_kind(exc))
                raise


NOOP_SPAN = DispatchSpan(trace.INVALID_SPAN, None)
NOOP_UPSTREAM = UpstreamSpan(trace.INVALID_SPAN)


@contextmanager
def dispatch_span(
    tracer: Tracer,
    *,
    api: ApiName,
    model: str | None,
    route: str,
    stream: bool | None = None,
    rollout_mode: str | None = None,
    conversation_id: str | None = None,
    carrier: Mapping[str, str] | None = None,
    capture_content: bool = False,
    redactor: Redactor = DEFAULT_REDACTOR,
) -> Iterator[DispatchSpan]:
    """One INTERNAL span per dispatch, a child of the client's ``traceparent`` in
    ``carrier`` (the inbound headers) when there is one."""
    if isinstance(tracer, NoOpTracer):
        yield NOOP_SPAN
        return
    parent = propagate.extract(carrier) if carrier is not None else None
    name = f"{OPERATION_NAME[api]} {model}" if model else OPERATION_NAME[api]
    attributes = dispatch_attributes(
        api=api,
        model=model,
        route=route,
        stream=stream,
        rollout_mode=rollout_mode,
        conversation_id=conversation_id,
    )
    with tracer.start_as_current_span(
        name,
        context=parent,
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        dispatch = DispatchSpan(span, tracer, capture_content=capture_content, redactor=redactor)
        try:
            yield dispatch
        except BaseException as exc:
            dispatch.error(error_kind(exc))
            raise
