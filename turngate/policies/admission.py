"""Context admission: does the final rendered request, plus its output budget, fit the model?

``admit`` counts the body that will be sent (``policies/tokens.py``) and checks it against the
model's row of the model table: ``input + output <= context_window`` and
``input <= max_input_tokens``, each when the row sets it. ``output`` is the request's own max
output tokens, or the policy's ``default_output_tokens`` when it sets none.

A request that does not fit is refused before anything is sent with ``ContextLengthExceeded``
(rule ``context_length_exceeded``, 400), worded as the target API words its own
context-length error (``CONTEXT_ERRORS``), so a client that recognises the provider's error
recognises turngate's too. Each adapter's ``render_error`` puts it in the API's envelope.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from turngate.errors import ContextLengthExceeded
from turngate.graph.model import ApiName
from turngate.policies.config import ModelEntry, Policy, PolicyFile
from turngate.policies.tokens import TokenCache, TokenCount, count_request

AdmissionStatus = Literal["admitted", "disabled", "unknown_model"]


@dataclass(frozen=True)
class ContextErrorForm:
    """How an API reports a prompt too long for the model (provider-rules.md, recorded errors).

    ``kind`` is the envelope's error type: OpenAI ``error.type``, Anthropic ``error.type``,
    Gemini ``error.status``. ``code`` is OpenAI's ``error.code`` (Gemini's ``error.code`` is the
    HTTP status; Anthropic has none).
    """

    status: int
    kind: str
    code: str | None
    param: str | None
    # Placeholders: {input}, {output}, {total}, {limit}.
    window_message: str
    input_message: str


CONTEXT_ERRORS: Mapping[ApiName, ContextErrorForm] = {
    "openai_chat": ContextErrorForm(
        status=400,
        kind="invalid_request_error",
        code="context_length_exceeded",
        param="messages",
        window_message="This model's maximum context length is {limit} tokens. However, you "
        "requested {total} tokens ({input} in the messages, {output} in the completion). "
        "Please reduce the length of the messages or completion.",
        input_message="This model's maximum context length is {limit} tokens. However, your "
        "messages resulted in {input} tokens. Please reduce the length of the messages.",
    ),
    "openai_responses": ContextErrorForm(
        status=400,
        kind="invalid_request_error",
        code="context_length_exceeded",
        param="input",
        window_message="Your input exceeds the context window of this model. Please adjust "
        "your input and try again.",
        input_message="Your input exceeds the context window of this model. Please adjust "
        "your input and try again.",
    ),
    "anthropic": ContextErrorForm(
        status=400,
        kind="invalid_request_error",
        code=None,
        param=None,
        window_message="input length and `max_tokens` exceed context limit: {input} + {output} "
        "> {limit}, decrease input length or `max_tokens` and try again",
        input_message="prompt is too long: {input} tokens > {limit} maximum",
    ),
    "gemini": ContextErrorForm(
        status=400,
        kind="INVALID_ARGUMENT",
        code=None,
        param=None,
        window_message="The input token count ({input}) exceeds the maximum number of tokens "
        "allowed ({limit}).",
        input_message="The input token count ({input}) exceeds the maximum number of tokens "
        "allowed ({limit}).",
    ),
}


@dataclass(frozen=True)
class Admission:
    status: AdmissionStatus
    model: str | None
    count: TokenCount | None = None
    output_tokens: int = 0
    entry: ModelEntry | None = None

    @property
    def input_tokens(self) -> int | None:
        return None if self.count is None else self.count.total


def admit(
    body: Mapping[str, Any],
    *,
    api: ApiName,
    model: str | None,
    max_output_tokens: int | None,
    config: PolicyFile,
    policy: Policy,
    cache: TokenCache | None = None,
) -> Admission:
    """Admit ``body`` (the final rendered request for ``api``) or raise ContextLengthExceeded.

    Nothing is counted unless the policy enables admission and the model has a row in the
    model table. ``cache`` keeps the counts of strings seen before (a conversation's history).
    """
    if not policy.admission.enabled:
        return Admission(status="disabled", model=model)
    entry = config.model_entry(model)
    if entry is None:
        # No window known: the provider stays the judge.
        return Admission(status="unknown_model", model=model)
    count = count_request(body, entry, config.media, cache)
    output = output_budget(policy, max_output_tokens)
    refusal = refusal_for(api, entry, count.total, output, estimated=count.estimated)
    if refusal is not None:
        raise refusal
    return Admission(status="admitted", model=model, count=count, output_tokens=output, entry=entry)


def output_budget(policy: Policy, max_output_tokens: int | None) -> int:
    """The output tokens a request reserves: its own maximum, else the policy's default."""
    if max_output_tokens is not None:
        return max_output_tokens
    return policy.admission.default_output_tokens


def refusal_for(
    api: ApiName, entry: ModelEntry, used: int, output: int, *, estimated: bool
) -> ContextLengthExceeded | None:
    """The refusal of ``used`` input tokens plus ``output`` for the model ``entry``
    describes, or None when they fit (also for an exact count from a provider)."""
    form = CONTEXT_ERRORS[api]
    if entry.max_input_tokens is not None and used > entry.max_input_tokens:
        text = form.input_message.format(
            input=used, output=output, total=used + output, limit=entry.max_input_tokens
        )
        limit = entry.max_input_tokens
        return _error(text, form, used=used, output=0, limit=limit, estimated=estimated)
    if entry.context_window is not None and used + output > entry.context_window:
        window = entry.context_window
        template = form.window_message if output else form.input_message
        limit = window
        if api == "gemini":
            # Gemini states only an input limit: what is left of the window after the output.
            limit = max(window - output, 0)
        text = template.format(input=used, output=output, total=used + output, limit=limit)
        return _error(text, form, used=used, output=output, limit=window, estimated=estimated)
    return None


def _error(
    text: str, form: ContextErrorForm, *, used: int, output: int, limit: int, estimated: bool
) -> ContextLengthExceeded:
    how = "estimated" if estimated else "counted"
    return ContextLengthExceeded(
        f"{text} (turngate: {how} before sending, nothing was sent; rule context_length_exceeded)",
        input_tokens=used,
        output_tokens=output,
        limit=limit,
        estimated=estimated,
        param=form.param,
    )
