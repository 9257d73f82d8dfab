"""OpenAI: the settings a reasoning model does not take (``openai_reasoning_settings``).

    a ``temperature`` other than 1 on o1, o3, o4 and GPT-5, which sample at their default
        only: on Chat "Unsupported value: 'temperature' does not support 0.2 with this
        model. Only the default (1) value is supported." (langchaingo #1355, chatbox #2564,
        code-gpt-docs #445, Open-WebUI-Functions #98), on Responses "Unsupported parameter:
        'temperature' is not supported with this model." (sourcebot #454, modAI #84)
    Chat's ``max_tokens`` on them, which count reasoning tokens under
        ``max_completion_tokens``: "Unsupported parameter: 'max_tokens' is not supported
        with this model. Use 'max_completion_tokens' instead."

Both are refused with OpenAI's ``param``. The model is the body's ``model`` as OpenAI names
it. GPT-5.1 and later take a temperature while their reasoning effort is none, so they are
left to OpenAI, as are a chat variant (``gpt-5-chat-latest``), a gateway's name for the
model (``openai/gpt-5``) and an Azure deployment named otherwise.
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import lru_cache

from turngate.graph.model import MessageSequence
from turngate.graph.rules import rule
from turngate.graph.validator import Violation, violation

REASONING_SETTINGS = "openai_reasoning_settings"
_REASONING_MODEL = re.compile(r"o[134](?:-[a-z0-9-]+)?|gpt-5(?:-(?!chat)[a-z0-9-]+)?").fullmatch


@lru_cache(maxsize=256)
def _reasoning_model(model: str) -> bool:
    return _REASONING_MODEL(model) is not None


@rule(REASONING_SETTINGS)
def reasoning_settings(seq: MessageSequence) -> list[Violation]:
    envelope = seq.envelope
    temperature, max_tokens = envelope.get("temperature"), envelope.get("max_tokens")
    if temperature is None and max_tokens is None:
        return []
    if seq.model is None or not _reasoning_model(seq.model):
        return []
    out: list[Violation] = []
    if type(temperature) in (int, float) and temperature != 1:
        text = (
            f"Unsupported value: 'temperature' does not support {temperature:g} with this "
            "model. Only the default (1) value is supported."
            if seq.api == "openai_chat"
            else "Unsupported parameter: 'temperature' is not supported with this model."
        )
        out.append(_refused(seq.model, text, "temperature", "leave it out"))
    if max_tokens is not None and seq.api == "openai_chat":
        text = (
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
            "'max_completion_tokens' instead."
        )
        out.append(_refused(seq.model, text, "max_tokens", "send max_completion_tokens"))
    return out


def _refused(model: str, text: str, param: str, fix: str) -> Violation:
    found = violation(
        REASONING_SETTINGS, f'{model} is a reasoning model; OpenAI: "{text}" ({fix})', None
    )
    return replace(found, location=param)
