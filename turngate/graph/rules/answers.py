"""Requests for what turngate does not commit as one checked turn, refused in enforce mode
and recorded in shadow mode like any other rule:

* ``chat_legacy_functions`` (code ``unknown_kind``): Chat's deprecated ``functions``, whose
  answers carry an id-less ``function_call`` answered by ``role: function`` messages;
* ``chat_stream_choices`` and ``gemini_stream_candidates`` (code ``unsupported_in_target``):
  a stream of several alternative answers (``n`` > 1, ``candidateCount`` > 1), which cannot
  be committed as one turn. A whole answer of several passes when only its first calls tools
  (the adapters' response parsers refuse the rest).
"""

from __future__ import annotations

from typing import Any

from turngate.graph.model import MessageSequence
from turngate.graph.rules import rule
from turngate.graph.validator import UNKNOWN_KIND, Violation, violation

UNSUPPORTED = "unsupported_in_target"
LEGACY_FUNCTIONS = (
    "'functions' (deprecated function calling) is not supported; declare the same functions "
    'as \'tools\' ({"type": "function", "function": {...}})'
)


def several_answers(what: str) -> str:
    """Why several alternative answers cannot pass: turngate commits one turn per request."""
    return (
        f"{what}; turngate commits one assistant turn per request, and a stream or tool calls "
        "of several alternatives cannot be checked as one"
    )


@rule("chat_legacy_functions")
def legacy_functions(seq: MessageSequence) -> list[Violation]:
    if seq.envelope.get("functions") is None:
        return []
    return [violation(UNKNOWN_KIND, LEGACY_FUNCTIONS, None)]


@rule("chat_stream_choices")
def stream_choices(seq: MessageSequence) -> list[Violation]:
    return _several(seq, "n", seq.envelope.get("n"), "choices")


@rule("gemini_stream_candidates")
def stream_candidates(seq: MessageSequence) -> list[Violation]:
    config = seq.envelope.get("generationConfig", seq.envelope.get("generation_config"))
    count = None
    if isinstance(config, dict):
        count = config.get("candidateCount", config.get("candidate_count"))
    return _several(seq, "candidateCount", count, "candidates")


def _several(seq: MessageSequence, name: str, count: Any, what: str) -> list[Violation]:
    if not seq.stream or not isinstance(count, int) or count < 2:
        return []
    return [violation(UNSUPPORTED, several_answers(f"a stream of {name}={count} {what}"), None)]
