"""Anthropic: the ``thinking`` configuration the model and ``max_tokens`` allow.

    anthropic_thinking_mode    a manual budget (``"type": "enabled"``) on Claude 4.7 and
                               later, which take adaptive thinking only ("\\"thinking.type.
                               enabled\\" is not supported for this model"), or adaptive
                               thinking on a Claude 4 model before 4.6 ("adaptive thinking is
                               not supported on this model")
    anthropic_thinking_budget  a manual budget under 1,024 tokens, or not below ``max_tokens``
                               (the thinking is drawn from it) unless the request turns on
                               interleaved thinking, whose budget spans the whole turn

Agents meet both on every turn once a model id or an output limit changes under a fixed
thinking setting: a new model picked from a menu (opencode #23007, pi #3297, hermes-agent
#11152), a default ``max_tokens`` halved into a budget (llm.js #30, agent-afk #951, sudocode
PR #438); LiteLLM #9001 asked for exactly this refusal before sending. The model is read
from its id (``claude_version``); a model turngate cannot place, and any model whose id
does not name Claude (an Anthropic-compatible gateway's own), is left to the provider.
"""

from __future__ import annotations

from typing import Any

from turngate.graph.model import MessageSequence
from turngate.graph.rules import rule
from turngate.graph.rules.anthropic import claude_version, thinking_type
from turngate.graph.validator import Violation, violation

THINKING_MODE = "anthropic_thinking_mode"
THINKING_BUDGET = "anthropic_thinking_budget"
MIN_BUDGET = 1024
# The beta that lets the budget span a whole tool-using turn, past max_tokens.
_INTERLEAVED = "interleaved-thinking-"
_ENABLED_GONE = (
    '"thinking.type.enabled" is not supported for this model. Use "thinking.type.adaptive" '
    'and "output_config.effort" to control thinking behavior.'
)


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
    if thinking_type(seq) != "enabled" or "claude" not in (seq.model or "").lower():
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


def _thinking(seq: MessageSequence) -> dict[str, Any]:
    config = seq.envelope.get("thinking")
    return config if isinstance(config, dict) else {}


def _integer(value: object) -> int | None:
    return value if type(value) is int else None


def _interleaved(seq: MessageSequence) -> bool:
    """Interleaved thinking turned on, by header or (Bedrock's and Vertex's form) by the
    body's ``anthropic_beta`` list."""
    in_body = seq.envelope.get("anthropic_beta")
    named = [*seq.betas, *(in_body if isinstance(in_body, list) else ())]
    return any(isinstance(name, str) and name.startswith(_INTERLEAVED) for name in named)
