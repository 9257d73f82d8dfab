"""Gemini: the settings the model takes, by its id in the path (``gemini-2.5-pro``,
``models/gemini-3.1-pro-preview``).

    gemini_thinking_config     a thinking budget and a thinking level together, on any
        model ("You can only set only one of thinking budget and thinking level."): a
        gateway that adds one beside the client's other (eclipse-peon-ai #115); a thinking
        level before Gemini 3, which takes a budget only ("thinking_level is not supported
        for this model"; qwen-code PR #9094, kilocode PR #5139); a budget of 0 on a Pro
        model of 2.5 and later, which always thinks ("Budget 0 is invalid. This model only
        works in thinking mode."; vercel/ai #8027, pi #3460, docker-agent #2051)
    gemini_tool_combination    before Gemini 3, which combines them: JSON output
        (``responseMimeType: application/json``) beside declared functions ("Function
        calling with a response mime type: 'application/json' is unsupported"; symfony/ai
        #1777, ai-manus #101) or beside Google's own tools ("Tool use with a response mime
        type: 'application/json' is unsupported"; gemini-balance #264), and Google Search,
        code execution or URL context beside declared functions ("Tool use with function
        calling is unsupported"; symfony/ai #803)
    gemini_penalty             a ``presencePenalty`` or ``frequencyPenalty`` other than 0 on
        Gemini 2.5 and later, which take neither ("Penalty is not enabled for
        models/gemini-2.5-flash"; later "Penalty is not enabled for this model"): an
        application's anti-repetition preset, kept from Gemini 2.0 (openai-gemini #63,
        google-gemini/cookbook #1290, litellm PR #32273)
    gemini_function_config     on the Gemini API (Vertex AI takes it) before Gemini 3 (which
        tolerates it beside Google's own tools), a function-calling config while the
        request declares no function: "Function calling config is set without
        function_declarations." A search-only request with a tool config a library always
        sends, or an agent nested in an orchestrator that passed its tool config down
        without the tools (inspect_ai #2462, pydantic-ai PR #5791, Google ADK)
    gemini_max_output          on Vertex AI (the Gemini API writes up to the model's limit
        instead), a ``maxOutputTokens`` above what the model writes: "Unable to submit
        request because it has a maxOutputTokens value of 131072 but the supported range is
        from 1 (inclusive) to 65537 (exclusive)." A limit set for a larger model, or Gemini
        2.5's kept for 2.0 Flash (8,192): every request fails, and libraries parse the
        limit out of this refusal to retry (a Cline gateway's Gemini 3.8 Flash, 2026-09)

An alias whose family the id does not say (``gemini-flash-latest``) is judged only where the
model does not matter.
"""

from __future__ import annotations

import re
from typing import Any

from turngate.graph.model import MessageSequence
from turngate.graph.rules import rule
from turngate.graph.rules.gemini import either, generation_config
from turngate.graph.validator import Violation, violation

THINKING_CONFIG = "gemini_thinking_config"
TOOL_COMBINATION = "gemini_tool_combination"
PENALTY = "gemini_penalty"
FUNCTION_CONFIG = "gemini_function_config"
MAX_OUTPUT = "gemini_max_output"
_PENALTIES = (("presencePenalty", "presence_penalty"), ("frequencyPenalty", "frequency_penalty"))
# A Gemini model's version and tier from its id: "gemini-2.5-pro", "gemini-3.1-flash-lite".
_MODEL = re.compile(r"(?:^|/)gemini-(\d+)(?:\.(\d+))?-([a-z]+)")
# Google's own tools that Gemini 2 does not combine with declared functions.
_SEARCH_TOOLS = frozenset(
    {
        "googleSearch",
        "google_search",
        "googleSearchRetrieval",
        "google_search_retrieval",
        "codeExecution",
        "code_execution",
        "urlContext",
        "url_context",
    }
)


@rule(THINKING_CONFIG)
def thinking_config(seq: MessageSequence) -> list[Violation]:
    config = _thinking(seq)
    budget = either(config, "thinkingBudget", "thinking_budget")
    level = either(config, "thinkingLevel", "thinking_level")
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
    version = _version(seq)
    if version is None:
        return []
    major, minor, tier = version
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


def _version(seq: MessageSequence) -> tuple[int, int, str] | None:
    """The model's (major, minor, tier) from its id in the path; None for an alias whose
    family the id does not say."""
    found = _MODEL.search(seq.model or "")
    if found is None:
        return None
    return int(found.group(1)), int(found.group(2) or 0), found.group(3)


def _refused(text: str) -> Violation:
    return violation(THINKING_CONFIG, text, None)


def _thinking(seq: MessageSequence) -> dict[str, Any]:
    config = either(generation_config(seq), "thinkingConfig", "thinking_config")
    return config if isinstance(config, dict) else {}


@rule(TOOL_COMBINATION)
def tool_combination(seq: MessageSequence) -> list[Violation]:
    if not seq.tools:
        return []
    version = _version(seq)
    if version is None or version[0] >= 3:
        return []
    functions = any(tool.tool_type == "function" for tool in seq.tools)
    searches = [t.name for t in seq.tools if t.tool_type == "hosted" and t.name in _SEARCH_TOOLS]
    mime = either(generation_config(seq), "responseMimeType", "response_mime_type")
    fix = "(Gemini 3 combines them; or make two calls)"
    if isinstance(mime, str) and mime.lower() == "application/json" and (functions or searches):
        kind = "Function calling" if functions else "Tool use"
        what = "declared functions" if functions else f"the {searches[0]} tool"
        return [
            violation(
                TOOL_COMBINATION,
                f"{seq.model} takes no JSON output (responseMimeType application/json) beside "
                f"{what}; Gemini: \"{kind} with a response mime type: 'application/json' is "
                f'unsupported" {fix}',
                None,
            )
        ]
    if functions and searches:
        return [
            violation(
                TOOL_COMBINATION,
                f"{seq.model} takes no {searches[0]} tool beside declared functions; Gemini: "
                f'"Tool use with function calling is unsupported" {fix}',
                None,
            )
        ]
    return []


@rule(PENALTY)
def penalty(seq: MessageSequence) -> list[Violation]:
    config = generation_config(seq)
    if not config:
        return []
    found = [
        (camel, value)
        for camel, snake in _PENALTIES
        if type(value := either(config, camel, snake)) in (int, float) and value != 0
    ]
    version = _version(seq) if found else None
    if version is None or version[:2] < (2, 5):
        return []
    return [
        violation(
            PENALTY,
            f'{seq.model} takes no {name} (the request sets {value:g}); Gemini: "Penalty is '
            'not enabled for this model" (leave it out; Gemini 2.0 Flash took it)',
            None,
        )
        for name, value in found
    ]


@rule(FUNCTION_CONFIG)
def function_config(seq: MessageSequence) -> list[Violation]:
    tool_config = either(seq.envelope, "toolConfig", "tool_config")
    if seq.endpoint != "gemini_api" or not isinstance(tool_config, dict):
        return []
    calling = either(tool_config, "functionCallingConfig", "function_calling_config")
    mode = calling.get("mode") if isinstance(calling, dict) else "NONE"
    if (isinstance(mode, str) and mode.upper() == "NONE") or seq.history == "partial":
        return []
    version = _version(seq)
    if version is None or version[0] >= 3:
        return []
    if any(tool.tool_type == "function" for tool in seq.tools):
        return []
    return [
        violation(
            FUNCTION_CONFIG,
            "toolConfig sets a function-calling config but the request declares no function, "
            f'and {seq.model} refuses that; Gemini: "Function calling config is set without '
            'function_declarations." (leave toolConfig out of a request without '
            "functionDeclarations)",
            None,
        )
    ]


@rule(MAX_OUTPUT)
def max_output(seq: MessageSequence) -> list[Violation]:
    asked = either(generation_config(seq), "maxOutputTokens", "max_output_tokens")
    if seq.endpoint != "vertex" or type(asked) is not int:
        return []
    limit = _output_limit(seq)
    if limit is None or asked <= limit:
        return []
    return [
        violation(
            MAX_OUTPUT,
            f'{seq.model} writes at most {limit} tokens; Vertex AI: "Unable to submit request '
            f"because it has a maxOutputTokens value of {asked} but the supported range is "
            f'from 1 (inclusive) to {limit + 1} (exclusive)." (lower maxOutputTokens to {limit} '
            "or less)",
            None,
        )
    ]


def _output_limit(seq: MessageSequence) -> int | None:
    """The most a Gemini model writes: 65,536 from 2.5 through 3.x (an image or speech
    variant writes less, and is held to that), 8,192 for 1.5 and 2.0 but their thinking
    previews (65,536); None for a model turngate cannot place."""
    version = _version(seq)
    if version is None:
        return None
    if (2, 5) <= version[:2] < (4, 0):
        return 65_536
    if version[:2] in ((1, 5), (2, 0)) and "thinking" not in (seq.model or ""):
        return 8_192
    return None
