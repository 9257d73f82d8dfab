"""An assistant turn as the provider returned it: what a dispatch commits.

Adapters build one from a non-streaming response body (``parse_response``); the stream
assembler builds one from canonical stream events. Either way it is canonical only when
its stop reason arrived and every block is complete.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from turngate.graph.codec import digest_of
from turngate.graph.model import AnyBlock, ToolCallBlock


@dataclass(frozen=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None


@dataclass(frozen=True)
class AssistantTurn:
    # The provider's response handle: chatcmpl-…, msg_…, resp_…, or Gemini's responseId.
    handle: str | None
    model: str | None
    blocks: tuple[AnyBlock, ...]
    # The API's own stop reason (finish_reason, stop_reason, status, finishReason).
    stop_reason: str | None
    usage: Usage | None = None

    @property
    def tool_calls(self) -> list[ToolCallBlock]:
        return [b for b in self.blocks if isinstance(b, ToolCallBlock)]

    @cached_property
    def semantic_digest(self) -> str:
        """Digest of what the turn says (modelled fields only, no native extras or ids).

        A later request's history must hold this same turn: see ``semantic_digest_of``.
        """
        return semantic_digest_of(self.blocks)


def semantic_digest_of(blocks: tuple[AnyBlock, ...] | list[AnyBlock]) -> str:
    items = []
    for block in blocks:
        content = block.semantic()
        content.pop("attrs", None)
        content.pop("role", None)
        items.append(content)
    return digest_of(items)
