"""Gemini: a field where Gemini has none of that name (rule ``gemini_misplaced_field``).

Google reads the body into its protocol types, and a field a type does not have fails the
whole request: "Invalid JSON payload received. Unknown name "safetySettings" at
'generation_config': Cannot find field." Only the fields that are certainly elsewhere are
judged, each with where it goes:

- in ``generationConfig``: the request's own fields (``safetySettings``, ``tools``,
  ``systemInstruction``…), the thinking settings that belong in its ``thinkingConfig``
  (``thinkingLevel``, as the Interactions API takes it flat), and OpenAI's names
  (``max_tokens``, ``stop``, ``response_format``);
- at the top level: ``generationConfig``'s own fields (``temperature``,
  ``maxOutputTokens``…) and OpenAI's (``messages``, ``max_tokens``, ``stream``).

Any other field is left to Google, whose types gain fields.
"""

from __future__ import annotations

from pydantic.alias_generators import to_snake

from turngate.graph.model import MessageSequence
from turngate.graph.rules import rule
from turngate.graph.rules.gemini import generation_config
from turngate.graph.validator import Violation, violation

MISPLACED_FIELD = "gemini_misplaced_field"


def _both(*camel: str) -> dict[str, str]:
    """Each camelCase name and its snake_case spelling (Google reads both)."""
    return {spelling: name for name in camel for spelling in (name, to_snake(name))}


_REQUEST_FIELDS = _both("safetySettings", "tools", "toolConfig", "systemInstruction")
_REQUEST_FIELDS |= _both("cachedContent", "contents")
_THINKING_FIELDS = _both("thinkingLevel", "thinkingBudget", "includeThoughts")
_CONFIG_FIELDS = _both(
    "temperature",
    "topP",
    "topK",
    "maxOutputTokens",
    "stopSequences",
    "candidateCount",
    "responseMimeType",
    "responseSchema",
    "thinkingConfig",
)
# OpenAI's names and what Gemini calls each.
_OPENAI_CONFIG = {
    "max_tokens": "Gemini calls it generationConfig.maxOutputTokens",
    "max_completion_tokens": "Gemini calls it generationConfig.maxOutputTokens",
    "stop": "Gemini calls it generationConfig.stopSequences",
    "response_format": "Gemini asks for JSON with responseMimeType and responseSchema",
}
_OPENAI_TOP = {
    **_OPENAI_CONFIG,
    "messages": "Gemini calls it contents",
    "stream": "stream with the streamGenerateContent path instead",
}


def _fix(name: str, found: str) -> str | None:
    """What to do with ``name``, found at ``found`` (generation_config, or "": the top
    level); None for a name left to Google."""
    if found == "generation_config":
        if name in _REQUEST_FIELDS:
            return "move it to the request's top level"
        if name in _THINKING_FIELDS:
            return "move it into generationConfig.thinkingConfig"
        return _OPENAI_CONFIG.get(name)
    if name in _CONFIG_FIELDS:
        return "move it into generationConfig"
    return _OPENAI_TOP.get(name)


@rule("gemini_misplaced_fields")
def misplaced_fields(seq: MessageSequence) -> list[Violation]:
    envelope = seq.envelope
    placed = [(name, "") for name in envelope if name in _CONFIG_FIELDS or name in _OPENAI_TOP]
    placed += [(name, "generation_config") for name in generation_config(seq)]
    out: list[Violation] = []
    for name, found in placed:
        fix = _fix(name, found)
        if fix is None:
            continue
        at = f" at '{found}'" if found else ""
        out.append(
            violation(
                MISPLACED_FIELD,
                f"{name!r} is not a field {'of generationConfig' if found else 'of the request'}"
                f'; Gemini: "Invalid JSON payload received. Unknown name "{name}"{at}: Cannot '
                f'find field." ({fix})',
                None,
            )
        )
    return out
