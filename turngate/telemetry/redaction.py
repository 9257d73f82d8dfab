"""Masking of credentials in anything telemetry writes: log records, span details, content.

Spans and log lines are built from named fields that never hold a header value, so this is
the second line of defence: a value that still looks like a credential is replaced before
it leaves the process. Masked: ``Authorization``, ``x-api-key``, ``x-goog-api-key`` and
``api-key`` (Azure OpenAI's) values in any ``name: value`` / ``name=value`` form, Bearer
tokens, ``key=`` query values, OpenAI/Anthropic-style ``sk-…`` keys, Google ``AIza…``
keys, and every configured secret verbatim.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "[REDACTED]"

# Each pattern keeps group 1 (the name) and replaces what follows it.
_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"(?i)([?&;]key=)[^&#\s\"']*"),
    # A header's whole value: an auth scheme word and its credential go together.
    re.compile(
        r"(?i)((?:authorization|x-api-key|x-goog-api-key|api[_-]?key)[\"']?\s*[:=]\s*[\"']?)"
        r"(?:(?:bearer|basic|digest|token)\s+)?[^\s\"',;]+"
    ),
    re.compile(r"(?i)(bearer\s+)(?!\[REDACTED\])[^\s\"',;]+"),
    re.compile(r"()\bsk-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"()\bAIza[0-9A-Za-z_\-]{30,}"),
)
# Shorter configured values would mask ordinary words.
MIN_SECRET_LENGTH = 6


class Redactor:
    """``scrub(text)``: ``text`` with every credential-looking value and configured secret
    replaced by ``[REDACTED]``."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        chosen = sorted({s for s in secrets if len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True)
        self._secrets = tuple(chosen)

    def scrub(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        for pattern in _PATTERNS:
            text = pattern.sub(r"\1" + REDACTED, text)
        return text

    def scrub_value(self, value: object) -> object:
        """A JSON-like value with every string in it scrubbed (dict keys included)."""
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, dict):
            return {self.scrub(str(k)): self.scrub_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.scrub_value(v) for v in value]
        return value


DEFAULT_REDACTOR = Redactor()
