"""Gemini: the thinking settings the model takes (``gemini_thinking_config``).

    a thinking budget and a thinking level together, on any model ("You can only set only
        one of thinking budget and thinking level."): a gateway that adds one beside the
        client's other (eclipse-peon-ai #115)
    a thinking level on a model before Gemini 3, which takes a budget only
        ("thinking_level is not supported for this model"; qwen-code PR #9094, kilocode
        PR #5139)
    a budget of 0 on a Pro model of 2.5 and later, which always thinks ("Budget 0 is
        invalid. This model only works in thinking mode."; vercel/ai #8027, pi #3460,
        docker-agent #2051)

The model is read from its id in the path (``gemini-2.5-pro``, ``models/gemini-3.1-pro-
preview``); an alias such as ``gemini-flash-latest``, whose family the id does not say, is
judged on the first point only.
"""

from __future__ import annotations

import re
from typing import Any

from turngate.graph.model import MessageSequence
from turngate.graph.rules import rule
from turngate.graph.validator import Violation, violation

THINKING_CONFIG = "gemini_thinking_config"
# A Gemini model's version and tier from its id: "gemini-2.5-pro", "gemini-3.1-flash-lite".
_MODEL = re.compile(r"(?:^|/)gemini-(\d+)(?:\.(\d+))?-([a-z]+)")


@rule(THINKING_CONFIG)
def thinking_config(seq: MessageSequence) -> list[Violation]:
    config = _thinking(seq)
    budget = _either(config, "thinkingBudget", "thinking_budget")
    level = _either(config, "thinkingLevel", "thinking_level")
    if budget is None and level is None:
        return []
    if budget is not None and level is not None:
        return [
            _refused(
                f"thinkingConfig sets both a budget ({budget}) and a level ({level}); Gemini: "
                '"You can only set only one of thinking budget and thinking level." (keep the '
                "level on Gemini 3 and later, the budget before)"
            )
        ]
    model = _MODEL.search(seq.model or "")
    if model is None:
        return []
    major, minor, tier = int(model.group(1)), int(model.group(2) or 0), model.group(3)
    if level is not None and major < 3:
        return [
            _refused(
                f"{seq.model} takes a thinking budget, not a level ({level}); Gemini: "
                '"thinking_level is not supported for this model" (send thinkingBudget)'
            )
        ]
    if type(budget) is int and budget == 0 and tier == "pro" and (major, minor) >= (2, 5):
        return [
            _refused(
                f"{seq.model} always thinks, so its thinking budget cannot be 0; Gemini: "
                '"Budget 0 is invalid. This model only works in thinking mode." (leave the '
                "budget out, or give it -1 for dynamic thinking)"
            )
        ]
    return []


def _refused(text: str) -> Violation:
    return violation(THINKING_CONFIG, text, None)


def _thinking(seq: MessageSequence) -> dict[str, Any]:
    generation = _either(seq.envelope, "generationConfig", "generation_config")
    if not isinstance(generation, dict):
        return {}
    config = _either(generation, "thinkingConfig", "thinking_config")
    return config if isinstance(config, dict) else {}


def _either(value: dict[str, Any], camel: str, snake: str) -> Any:
    found = value.get(camel)
    return found if found is not None else value.get(snake)
