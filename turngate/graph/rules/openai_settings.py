"""OpenAI, Chat and Responses: request settings the model or the mode does not take.

``openai_reasoning_settings``, what a reasoning model does not take:

    a ``temperature`` other than 1 on o1, o3, o4 and GPT-5, which sample at their default
        only: on Chat "Unsupported value: 'temperature' does not support 0.2 with this
        model. Only the default (1) value is supported." (langchaingo #1355, chatbox #2564,
        code-gpt-docs #445, Open-WebUI-Functions #98), on Responses "Unsupported parameter:
        'temperature' is not supported with this model." (sourcebot #454, modAI #84)
    a ``top_p`` other than 1 on them, and on Chat a ``presence_penalty`` or
        ``frequency_penalty`` other than 0 or ``logprobs: true``: "Unsupported parameter:
        'top_p' is not supported with this model." (the same words for each; a
        presence_penalty refused to GPT-5, GPT-5 mini, o3 and o4-mini: LibreChat discussion
        #11689)
    Chat's ``max_tokens`` on them, which count reasoning tokens under
        ``max_completion_tokens``: "Unsupported parameter: 'max_tokens' is not supported
        with this model. Use 'max_completion_tokens' instead."
    Chat's ``stop`` sequences on GPT-5 and its point releases, o3 and o4-mini (o3-mini
        takes them): "Unsupported parameter: 'stop' is not supported with this model."
        An agent loop that cuts the model's answer at a marker (LangChain's ReAct agents,
        smolagents' CodeAgent) sends them on every turn (smolagents #1671 and #1893,
        NeMo-Agent-Toolkit #610, n8n #18149)

``openai_reasoning_effort``: a reasoning effort (Chat's ``reasoning_effort``, Responses'
``reasoning.effort``) sent to a model that does not reason, GPT-4o, GPT-4.1, GPT-4 and
GPT-3.5 and their variants, whatever the effort (``none`` too): "Unsupported parameter:
'reasoning_effort' is not supported with this model." (Responses: "... 'reasoning.effort'
..."): an effort setting kept after the agent's model was switched to GPT-4o or GPT-4.1
mini fails every call.

``responses_chat_parameter``: a Responses request holding a Chat Completions parameter that
Responses names otherwise: "Unsupported parameter: 'messages'. In the Responses API, this
parameter has moved to 'input'." (``max_tokens`` and ``max_completion_tokens`` moved to
``max_output_tokens``, ``response_format`` to ``text.format``, ``reasoning_effort`` to
``reasoning.effort``): a client moved to /v1/responses that kept its Chat body, or a model
switch that changed the endpoint under a saved configuration (OpenHands software-agent-sdk
#755).

``openai_max_tokens``: on Chat, a ``max_tokens`` or ``max_completion_tokens`` above what the
model writes in one answer: "max_tokens is too large: 20480. This model supports at most 16384
completion tokens, whereas you provided 20480." An output limit set for another model fails
every request to one that writes less, from the first "hello" (forgecode #1185,
ExtractThinker #346, catwalk #41, obsidian-copilot #256, NextChat #3195). On Responses, a
``max_output_tokens`` under 16, whatever the model: "Invalid 'max_output_tokens': integer
below minimum value. Expected a value >= 16, but got 10 instead." A connection test that asks
for a few tokens, or a limit clamped to what is left of the window (hindsight #58, new-api
#2438, Work-Review #41); and one above what the model writes, held to the same limits as
Chat's, in the same words.

``responses_history_source``: a Responses request that continues both a stored response and
a conversation (``previous_response_id`` beside ``conversation``): "Mutually exclusive
parameters. Ensure you are only providing one of: 'previous_response_id' or
'conversation'." A client that chains responses and was later given a conversation keeps
sending both; the provider holds the history either way, so one is enough.

``chat_stream_options``: on Chat, ``stream_options`` in a request that does not stream: "The
'stream_options' parameter is only allowed when 'stream' is enabled." A client or gateway
that always asks for usage in the stream (``{"include_usage": true}``) and also makes plain
calls; Azure OpenAI refuses it the same way.

All are refused with OpenAI's ``param``. The model is the body's ``model`` as OpenAI names
it. GPT-5.1 and later take sampling settings while their reasoning effort is none, so they
are left to OpenAI (but for ``stop``), as are a chat variant (``gpt-5-chat-latest``), a
gateway's name for the model (``openai/gpt-5``) and an Azure deployment named otherwise.
"""

from __future__ import annotations

import re
from functools import lru_cache

from turngate.graph.model import MessageSequence
from turngate.graph.rules import rule
from turngate.graph.validator import Violation, violation

REASONING_SETTINGS = "openai_reasoning_settings"
REASONING_EFFORT = "openai_reasoning_effort"
CHAT_PARAMETER = "responses_chat_parameter"
MAX_TOKENS = "openai_max_tokens"
STREAM_OPTIONS = "chat_stream_options"
HISTORY_SOURCE = "responses_history_source"
# Chat Completions' name of a parameter -> where Responses takes it.
_MOVED = {
    "messages": "input",
    "max_tokens": "max_output_tokens",
    "max_completion_tokens": "max_output_tokens",
    "response_format": "text.format",
    "reasoning_effort": "reasoning.effort",
}
_REASONING_MODEL = re.compile(r"o[134](?:-[a-z0-9-]+)?|gpt-5(?:-(?!chat)[a-z0-9-]+)?").fullmatch
_UNREASONING_MODEL = re.compile(
    r"(?:gpt-4o|chatgpt-4o|gpt-4\.1|gpt-4|gpt-3\.5-turbo)(?:-[a-z0-9.-]+)?"
).fullmatch
# The models that refuse ``stop`` whatever their reasoning effort: GPT-5 and its point
# releases (gpt-5.2), o3 but o3-mini, o4-mini.
_STOPLESS_MODEL = re.compile(
    r"gpt-5(?:\.\d+)?(?:-(?!chat)[a-z0-9-]+)?|o3(?:-(?!mini)[a-z0-9-]+)?|o4-mini(?:-[a-z0-9-]+)?"
).fullmatch


@lru_cache(maxsize=256)
def _reasoning_model(model: str) -> bool:
    return _REASONING_MODEL(model) is not None


@lru_cache(maxsize=256)
def _stopless_model(model: str) -> bool:
    return _STOPLESS_MODEL(model) is not None


# The most tokens a model writes in one Chat answer, by its id (OpenAI's model pages); a
# snapshot whose limit was lower (gpt-4o-2024-05-13: 4,096) is held to its family's, and a
# model left out is not judged.
_DATE_SUFFIX = r"(?:-\d{4}-\d{2}-\d{2})?"
_OUTPUT_LIMITS = tuple(
    (re.compile(pattern).fullmatch, limit)
    for pattern, limit in (
        (r"(?:gpt-4o|chatgpt-4o)(?:-[a-z0-9-]+)?", 16_384),
        (rf"gpt-4\.1(?:-mini|-nano)?{_DATE_SUFFIX}", 32_768),
        (r"gpt-4-turbo(?:-[a-z0-9-]+)?|gpt-4-\d{4}-preview|gpt-3\.5-turbo(?:-\d{4})?", 4_096),
        (r"gpt-4(?:-0613)?", 8_192),
        (rf"(?:o1|o3|o3-mini|o4-mini){_DATE_SUFFIX}", 100_000),
        (rf"gpt-5(?:-mini|-nano)?{_DATE_SUFFIX}", 128_000),
    )
)


@lru_cache(maxsize=256)
def _output_limit(model: str) -> int | None:
    return next((limit for matches, limit in _OUTPUT_LIMITS if matches(model)), None)


# A sampling setting a reasoning model refuses unless it is the default: (name, default,
# whether Responses takes the name at all).
_FIXED = (
    ("top_p", 1, True),
    ("presence_penalty", 0, False),
    ("frequency_penalty", 0, False),
    ("logprobs", False, False),
)
_JUDGED = ("temperature", "max_tokens", "stop", *(name for name, _, _ in _FIXED))


@rule(REASONING_SETTINGS)
def reasoning_settings(seq: MessageSequence) -> list[Violation]:
    envelope = seq.envelope
    if envelope.keys().isdisjoint(_JUDGED) or seq.model is None:
        return []
    chat = seq.api == "openai_chat"
    out = _sampling(seq, seq.model, chat) if _reasoning_model(seq.model) else []
    if chat and _stops(envelope.get("stop")) and _stopless_model(seq.model):
        fix = "leave it out, and cut the answer at the marker yourself"
        out.append(_refused(seq.model, _unsupported("stop"), "stop", fix))
    return out


def _sampling(seq: MessageSequence, model: str, chat: bool) -> list[Violation]:
    envelope = seq.envelope
    out: list[Violation] = []
    temperature = envelope.get("temperature")
    if type(temperature) in (int, float) and temperature != 1:
        text = (
            f"Unsupported value: 'temperature' does not support {temperature:g} with this "
            "model. Only the default (1) value is supported."
            if chat
            else _unsupported("temperature")
        )
        out.append(_refused(model, text, "temperature", "leave it out"))
    for name, default, on_responses in _FIXED:
        if (chat or on_responses) and _differs(envelope.get(name), default):
            out.append(_refused(model, _unsupported(name), name, "leave it out"))
    if envelope.get("max_tokens") is not None and chat:
        text = _unsupported("max_tokens") + " Use 'max_completion_tokens' instead."
        out.append(_refused(model, text, "max_tokens", "send max_completion_tokens"))
    return out


def _stops(value: object) -> bool:
    """Whether ``value`` asks for at least one stop sequence."""
    if isinstance(value, str):
        return bool(value)
    return isinstance(value, list) and any(isinstance(item, str) and item for item in value)


def _differs(value: object, default: object) -> bool:
    """Whether ``value`` is a setting of the right type other than its default (a value of
    the wrong type is OpenAI's to refuse, in its own words)."""
    if type(default) is bool:
        return type(value) is bool and value != default
    return type(value) in (int, float) and value != default


def _unsupported(name: str) -> str:
    return f"Unsupported parameter: '{name}' is not supported with this model."


@rule(REASONING_EFFORT)
def reasoning_effort(seq: MessageSequence) -> list[Violation]:
    if seq.api == "openai_chat":
        param, effort = "reasoning_effort", seq.envelope.get("reasoning_effort")
    else:
        reasoning = seq.envelope.get("reasoning")
        param = "reasoning.effort"
        effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    if effort is None or seq.model is None or _UNREASONING_MODEL(seq.model) is None:
        return []
    return [
        violation(
            REASONING_EFFORT,
            f"{seq.model} does not reason, so it takes no reasoning effort "
            f'({str(effort)[:40]!r}); OpenAI: "{_unsupported(param)}" (leave it out, or pick a '
            "reasoning model)",
            None,
            param=param,
        )
    ]


@rule(CHAT_PARAMETER)
def chat_parameter(seq: MessageSequence) -> list[Violation]:
    if seq.envelope.keys().isdisjoint(_MOVED):
        return []
    out: list[Violation] = []
    for name, moved in _MOVED.items():
        if seq.envelope.get(name) is not None:
            out.append(
                violation(
                    CHAT_PARAMETER,
                    f"the request sets Chat Completions' {name}; OpenAI: \"Unsupported "
                    f"parameter: '{name}'. In the Responses API, this parameter has moved to "
                    f"'{moved}'.\" (send {moved})",
                    None,
                    param=name,
                )
            )
    return out


# The least ``max_output_tokens`` Responses takes.
MIN_OUTPUT_TOKENS = 16


@rule(MAX_TOKENS)
def max_tokens(seq: MessageSequence) -> list[Violation]:
    envelope = seq.envelope
    responses = seq.api == "openai_responses"
    if responses and (floor := _output_floor(envelope.get("max_output_tokens"))):
        return floor
    names = ("max_output_tokens",) if responses else ("max_completion_tokens", "max_tokens")
    asked = [(name, value) for name in names if type(value := envelope.get(name)) is int]
    limit = _output_limit(seq.model) if asked and seq.model else None
    if limit is None:
        return []
    return [
        violation(
            MAX_TOKENS,
            f'{seq.model} writes at most {limit} tokens in one answer; OpenAI: "{name} is too '
            f"large: {value}. This model supports at most {limit} completion tokens, whereas "
            f'you provided {value}." (lower {name} to {limit} or less)',
            None,
            param=name,
        )
        for name, value in asked
        if value > limit
    ]


def _output_floor(asked: object) -> list[Violation]:
    if type(asked) is not int or asked >= MIN_OUTPUT_TOKENS:
        return []
    return [
        violation(
            MAX_TOKENS,
            f"max_output_tokens is {asked}, and Responses takes no limit under "
            f'{MIN_OUTPUT_TOKENS}; OpenAI: "Invalid '
            "'max_output_tokens': integer below minimum value. Expected a value >= "
            f'{MIN_OUTPUT_TOKENS}, but got {asked} instead." (ask for {MIN_OUTPUT_TOKENS} or '
            "more)",
            None,
            param="max_output_tokens",
        )
    ]


@rule(HISTORY_SOURCE)
def history_source(seq: MessageSequence) -> list[Violation]:
    envelope = seq.envelope
    if envelope.get("previous_response_id") is None or envelope.get("conversation") is None:
        return []
    return [
        violation(
            HISTORY_SOURCE,
            "the request continues both a stored response and a conversation; OpenAI: "
            '"Mutually exclusive parameters. Ensure you are only providing one of: '
            "'previous_response_id' or 'conversation'.\" (send the conversation alone: it "
            "holds the responses made in it)",
            None,
        )
    ]


@rule(STREAM_OPTIONS)
def stream_options(seq: MessageSequence) -> list[Violation]:
    if seq.stream or seq.envelope.get("stream_options") is None:
        return []
    return [
        violation(
            STREAM_OPTIONS,
            'the request sets stream_options but does not stream; OpenAI: "The '
            "'stream_options' parameter is only allowed when 'stream' is enabled.\" (leave "
            "stream_options out of a call that does not stream)",
            None,
            param="stream_options",
        )
    ]


def _refused(model: str, text: str, param: str, fix: str) -> Violation:
    return violation(
        REASONING_SETTINGS,
        f'{model} is a reasoning model; OpenAI: "{text}" ({fix})',
        None,
        param=param,
    )
