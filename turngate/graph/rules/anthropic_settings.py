"""Anthropic: the thinking and sampling settings the model and ``max_tokens`` allow.

    anthropic_thinking_mode    a manual budget (``"type": "enabled"``) on Claude 4.7 and
                               later, which take adaptive thinking only ('"thinking.type.
                               enabled" is not supported for this model'), or adaptive
                               thinking on a Claude 4 model before 4.6 ("adaptive thinking is
                               not supported on this model")
    anthropic_thinking_budget  a manual budget under 1,024 tokens, or not below ``max_tokens``
                               (the thinking is drawn from it) unless the request turns on
                               interleaved thinking, whose budget spans the whole turn
    anthropic_sampling         a ``temperature`` other than 1 on Claude 4.7 and later, which
                               dropped it ("`temperature` is deprecated for this model.");
                               ``temperature`` and ``top_p`` together on Claude 4.5 and later
                               ("cannot both be specified for this model"); beside thinking, a
                               ``temperature`` other than 1, a ``top_p`` under 0.95, any ``top_k``;
                               and under ``anthropic-version`` 2026-10-21 and later, which took
                               them out of the body, any of the three ("temperature: Extra
                               inputs are not permitted")
    anthropic_max_tokens       a ``max_tokens`` above what the model writes ("max_tokens: 64000 >
                               32000, which is the maximum allowed number of output tokens for
                               claude-opus-4-1-20250805"), unless a beta header raises it

Agents meet all three on every turn once a model id or an output limit changes under fixed
settings: a new model picked from a menu (opencode #23007, pi #3297, inspect_ai #3721), a
default ``max_tokens`` halved into a budget (llm.js #30, agent-afk #951, sudocode PR #438),
a caller's ``temperature: 0`` beside a thinking effort the gateway added (LibreChat #11949,
snow-app #42), a UI that sends both sampling settings (open-webui #17922, LiteLLM #15097).
LiteLLM #9001 asked for exactly this refusal before sending. An output limit set once for
every model meets a model that writes less (Opus 4.1's 32K under a 64K default, Haiku 3's
4K): every request to it fails, and libraries keep tables of these limits to avoid it
(vercel/ai PR #10554, JetBrains/koog PR #1825, Effect-TS PR #7129). The model is read from its id
(``claude_version``); a model turngate cannot place, and any model whose id does not name
Claude (an Anthropic-compatible gateway's own), is left to the provider.
"""

from __future__ import annotations

import re
from typing import Any

from turngate.graph.model import MessageSequence
from turngate.graph.rules import rule
from turngate.graph.rules.anthropic import (
    claude_3_name,
    claude_family,
    claude_version,
    thinking_type,
)
from turngate.graph.validator import Violation, violation

THINKING_MODE = "anthropic_thinking_mode"
THINKING_BUDGET = "anthropic_thinking_budget"
SAMPLING = "anthropic_sampling"
MAX_TOKENS = "anthropic_max_tokens"
MIN_BUDGET = 1024
# The beta that lets the budget span a whole tool-using turn, past max_tokens.
_INTERLEAVED = "interleaved-thinking-"
_ENABLED_GONE = (
    '"thinking.type.enabled" is not supported for this model. Use "thinking.type.adaptive" '
    'and "output_config.effort" to control thinking behavior.'
)
# Thinking allows top_p down to this, and temperature only at 1.
MIN_TOP_P = 0.95
# The first API version whose body takes no sampling settings.
SAMPLING_DROPPED = "2026-10-21"
_SAMPLING_NAMES = ("temperature", "top_p", "top_k")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}").fullmatch
# The most output tokens a Claude model writes, by its family and version as its id names
# them (Anthropic's models overview, and the limits its refusals name). A model left out is
# not judged; where a limit was raised the table holds the raised one.
_OUTPUT_LIMITS = {
    **dict.fromkeys((("opus", 4, 0), ("opus", 4, 1)), 32_000),
    **dict.fromkeys((("opus", 4, 5), ("sonnet", 4, 0), ("sonnet", 4, 5), ("haiku", 4, 5)), 64_000),
    **dict.fromkeys(
        (("opus", 4, 6), ("opus", 4, 7), ("opus", 4, 8), ("sonnet", 4, 6), ("opus", 5, 0)),
        128_000,
    ),
    ("fable", 5, 0): 128_000,
}
_CLAUDE_3_LIMITS = {"claude-3-haiku": 4_096, "claude-3-5-haiku": 8_192, "claude-3-7-sonnet": 64_000}
# Betas that raise a model's output limit: output-128k-2025-02-19 (Claude 3.7 Sonnet),
# output-300k-2026-03-24, max-tokens-3-5-sonnet-2024-07-15.
_RAISING_BETA = re.compile(r"output-|max-tokens-").match


@rule(THINKING_MODE)
def thinking_mode(seq: MessageSequence) -> list[Violation]:
    kind, version = thinking_type(seq), claude_version(seq.model)
    if version is None:
        return []
    if kind == "enabled" and version >= (4, 7):
        return [
            violation(
                THINKING_MODE,
                f"{seq.model} takes adaptive thinking only, not a manual budget; Anthropic: "
                f'{_ENABLED_GONE!r} (send thinking {{"type": "adaptive"}}, with '
                "output_config.effort for depth)",
                None,
            )
        ]
    if kind == "adaptive" and (4, 0) <= version < (4, 6):
        return [
            violation(
                THINKING_MODE,
                f"{seq.model} has no adaptive thinking (Claude 4.6 and later do); Anthropic: "
                '"adaptive thinking is not supported on this model" (send thinking '
                '{"type": "enabled", "budget_tokens": N} with N below max_tokens)',
                None,
            )
        ]
    return []


@rule(THINKING_BUDGET)
def thinking_budget(seq: MessageSequence) -> list[Violation]:
    if thinking_type(seq) != "enabled" or not _names_claude(seq.model):
        return []
    budget = _integer(_thinking(seq).get("budget_tokens"))
    if budget is None:
        return []
    if budget < MIN_BUDGET:
        return [
            violation(
                THINKING_BUDGET,
                f'thinking.budget_tokens is {budget}; Anthropic: "thinking.enabled.'
                f'budget_tokens: Input should be greater than or equal to {MIN_BUDGET}" '
                f"(give it at least {MIN_BUDGET}, below max_tokens, or turn thinking off)",
                None,
            )
        ]
    limit = _integer(seq.envelope.get("max_tokens"))
    if limit is None or budget < limit or _interleaved(seq):
        return []
    return [
        violation(
            THINKING_BUDGET,
            f"thinking.budget_tokens ({budget}) is not below max_tokens ({limit}), from which "
            'the thinking is drawn; Anthropic: "`max_tokens` must be greater than '
            '`thinking.budget_tokens`." (raise max_tokens, or lower the budget)',
            None,
        )
    ]


def _names_claude(model: str | None) -> bool:
    """Judged only for a model whose id names Claude, not an Anthropic-compatible gateway's."""
    return "claude" in (model or "").lower()


def _thinking(seq: MessageSequence) -> dict[str, Any]:
    config = seq.envelope.get("thinking")
    return config if isinstance(config, dict) else {}


def _integer(value: object) -> int | None:
    return value if type(value) is int else None


def _interleaved(seq: MessageSequence) -> bool:
    """Interleaved thinking turned on."""
    return any(name.startswith(_INTERLEAVED) for name in betas_named(seq))


def betas_named(seq: MessageSequence) -> list[str]:
    """The betas the request turns on, by header or (Bedrock's and Vertex's form) by the
    body's ``anthropic_beta`` list."""
    in_body = seq.envelope.get("anthropic_beta")
    named = [*seq.betas, *(in_body if isinstance(in_body, list) else ())]
    return [name for name in named if isinstance(name, str)]


@rule(MAX_TOKENS)
def max_tokens(seq: MessageSequence) -> list[Violation]:
    asked = _integer(seq.envelope.get("max_tokens"))
    if asked is None or seq.model is None:
        return []
    limit = _output_limit(seq.model)
    if limit is None or asked <= limit or any(_RAISING_BETA(name) for name in betas_named(seq)):
        return []
    return [
        violation(
            MAX_TOKENS,
            f'{seq.model} writes at most {limit} output tokens; Anthropic: "max_tokens: '
            f"{asked} > {limit}, which is the maximum allowed number of output tokens for "
            f'{seq.model}" (lower max_tokens to {limit} or less)',
            None,
        )
    ]


def _output_limit(model: str) -> int | None:
    family = claude_family(model)
    if family is not None:
        return _OUTPUT_LIMITS.get(family)
    name = claude_3_name(model)
    return _CLAUDE_3_LIMITS.get(name) if name is not None else None


@rule(SAMPLING)
def sampling(seq: MessageSequence) -> list[Violation]:
    if _takes_no_sampling(seq.api_version):
        texts = [
            f"anthropic-version {seq.api_version} takes no {name}; Anthropic: "
            f'"{name}: Extra inputs are not permitted" (leave it out, or send '
            "anthropic-version 2023-06-01)"
            for name in _SAMPLING_NAMES
            if seq.envelope.get(name) is not None
        ]
    else:
        texts = _by_model(seq) or _beside_thinking(seq)
    return [violation(SAMPLING, text, None) for text in texts]


def _by_model(seq: MessageSequence) -> list[str]:
    """What Claude 4.5 and later refuse on their own, thinking or not."""
    version = claude_version(seq.model)
    if version is None or version < (4, 5):
        return []
    temperature, top_p = (
        _number(seq.envelope.get("temperature")),
        _number(seq.envelope.get("top_p")),
    )
    if version >= (4, 7) and temperature not in (None, 1):
        return [
            f"{seq.model} takes no temperature (it was {temperature:g}); Anthropic: "
            '"`temperature` is deprecated for this model." (leave it out)'
        ]
    if temperature is not None and top_p is not None:
        return [
            f"{seq.model} takes temperature or top_p, not both (they were {temperature:g} "
            f'and {top_p:g}); Anthropic: "`temperature` and `top_p` cannot both be '
            'specified for this model. Please use only one."'
        ]
    return []


def _beside_thinking(seq: MessageSequence) -> list[str]:
    thinking = thinking_type(seq)
    if thinking not in ("enabled", "adaptive") or not _names_claude(seq.model):
        return []
    envelope = seq.envelope
    temperature, top_p = _number(envelope.get("temperature")), _number(envelope.get("top_p"))
    top_k = _number(envelope.get("top_k"))
    found: list[str] = []
    if temperature not in (None, 1):
        found.append(
            f'temperature is {temperature:g}; Anthropic: "`temperature` may only be set to 1 '
            'when thinking is enabled or in adaptive mode."'
        )
    if top_p is not None and top_p < MIN_TOP_P:
        found.append(
            f'top_p is {top_p:g}; Anthropic: "`top_p` must be greater than or equal to 0.95 '
            'or unset when thinking is enabled"'
        )
    if top_k is not None:
        found.append(
            f'top_k is {top_k:g}; Anthropic: "`top_k` must be unset when thinking is enabled '
            'or in adaptive mode"'
        )
    fix = "(leave the sampling settings out, or turn thinking off)"
    return [f"thinking is {thinking}, and {text} {fix}" for text in found]


def _takes_no_sampling(version: str | None) -> bool:
    """API version 2026-10-21 and later dropped the sampling settings from the body."""
    return version is not None and _DATE(version) is not None and version >= SAMPLING_DROPPED


def _number(value: object) -> float | None:
    if type(value) is int or type(value) is float:
        return float(value)
    return None
