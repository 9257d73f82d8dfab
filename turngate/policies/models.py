"""The built-in model table: context windows of current models, by glob pattern.

Looked up after the policy file's own ``models`` (first match wins, so the file can override
any row). Figures are the providers' published limits as of late 2026; where sources
disagree the table takes the larger window, so turngate never refuses a request the provider
would accept: the provider stays the last word, turngate only stops what cannot fit.

``counting`` says how the prompt is counted: ``exact`` with the model's own encoding (OpenAI,
offline with toktok), or ``estimate``: the o200k count times ``factor``, plus
``tool_overhead_tokens`` when the request defines tools (docs/policies.md explains each
figure).
"""

from __future__ import annotations

from typing import Any

# Claude's hidden tool-use prompt. Anthropic documents 346 tokens for Claude 4 models; the
# recorded Haiku 4.5 requests show 471-484 beyond the estimate of the rest, so 500.
_CLAUDE_TOOL_PROMPT = 500
# Claude's tokenizer yields ~16-30% more tokens than o200k for English prose and code
# (published comparisons); Opus 4.7 and the Claude 5 models use a tokenizer that yields up to
# 1.35x more again.
_CLAUDE_FACTOR = 1.35
_CLAUDE_47_FACTOR = 1.8
# Gemini's SentencePiece vocabulary is close to o200k on English; 1.2 covers code and
# non-Latin scripts, where it splits finer.
_GEMINI_FACTOR = 1.2

BUILTIN_MODELS: tuple[dict[str, Any], ...] = (
    # OpenAI: exact counts.
    {"match": "gpt-5.[4-9]*", "context_window": 1_050_000},
    {"match": "gpt-5*", "context_window": 400_000},
    {"match": "gpt-4.1*", "context_window": 1_047_576},
    {"match": "gpt-4o*", "context_window": 128_000},
    {"match": "chatgpt-4o*", "context_window": 128_000},
    {"match": "gpt-4.5*", "context_window": 128_000},
    {"match": "o1-mini*", "context_window": 128_000},
    {"match": "o1-preview*", "context_window": 128_000},
    {"match": "o[1-9]*", "context_window": 200_000},
    {"match": "codex-mini*", "context_window": 200_000},
    {"match": "gpt-4-turbo*", "context_window": 128_000, "encoding": "cl100k_base"},
    {"match": "gpt-4-1106*", "context_window": 128_000, "encoding": "cl100k_base"},
    {"match": "gpt-4-0125*", "context_window": 128_000, "encoding": "cl100k_base"},
    {"match": "gpt-4-32k*", "context_window": 32_768, "encoding": "cl100k_base"},
    {"match": "gpt-4", "context_window": 8_192, "encoding": "cl100k_base"},
    {"match": "gpt-4-0613", "context_window": 8_192, "encoding": "cl100k_base"},
    {"match": "gpt-3.5-turbo*", "context_window": 16_385, "encoding": "cl100k_base"},
    # Anthropic: estimates. Sonnet 4 and 4.5 reach 1M only with a beta header; a route that
    # sends it should raise the window in its policy file.
    *(
        {
            "match": pattern,
            "context_window": window,
            "counting": "estimate",
            "factor": factor,
            "tool_overhead_tokens": _CLAUDE_TOOL_PROMPT,
        }
        for pattern, window, factor in (
            ("claude-opus-4-[7-9]*", 1_000_000, _CLAUDE_47_FACTOR),
            ("claude-opus-5*", 1_000_000, _CLAUDE_47_FACTOR),
            ("claude-sonnet-5*", 1_000_000, _CLAUDE_47_FACTOR),
            ("claude-fable-*", 1_000_000, _CLAUDE_47_FACTOR),
            ("claude-mythos-*", 1_000_000, _CLAUDE_47_FACTOR),
            ("claude-opus-4-6*", 1_000_000, _CLAUDE_FACTOR),
            ("claude-sonnet-4-[6-9]*", 1_000_000, _CLAUDE_FACTOR),
            ("claude-*", 200_000, _CLAUDE_FACTOR),
        )
    ),
    # Gemini: estimates. The input limit is separate from the output limit.
    {
        "match": "gemini-1.5-pro*",
        "max_input_tokens": 2_097_152,
        "counting": "estimate",
        "factor": _GEMINI_FACTOR,
    },
    {
        "match": "gemini-*",
        "max_input_tokens": 1_048_576,
        "counting": "estimate",
        "factor": _GEMINI_FACTOR,
    },
)
