"""An older Anthropic adapter version "0", for the rollback tests: it predates compaction
blocks. Like any adapter meeting a native part it cannot map, it parses one into an
``unknown`` block (which the validator refuses), and it declares it does not know the
``compression`` kind, so a stored graph holding one pauses the conversation instead."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from turngate.adapters.anthropic import ADAPTER as CURRENT
from turngate.adapters.base import ErrorResponse, RouteInfo
from turngate.errors import TurngateError
from turngate.graph.model import (
    AnyBlock,
    ApiName,
    CompressionBlock,
    Message,
    MessageSequence,
    UnknownBlock,
)
from turngate.graph.turn import AssistantTurn
from turngate.policies.pins import GRAPH_V1_KINDS, AdapterVersion

VERSION = AdapterVersion(
    "anthropic", "0", "tests.proxy.anthropic_v0", known_kinds=GRAPH_V1_KINDS - {"compression"}
)


def _unmapped(block: AnyBlock) -> AnyBlock:
    if not isinstance(block, CompressionBlock):
        return block
    return UnknownBlock(
        id=block.id, role=block.role, order=block.order, trust=block.trust, native_type="compaction"
    )


def _older(message: Message) -> Message:
    return dataclasses.replace(message, blocks=tuple(_unmapped(b) for b in message.blocks))


class AnthropicV0:
    api: ApiName = "anthropic"
    version = "0"
    capabilities = CURRENT.capabilities

    def parse_request(
        self, body: Mapping[str, Any], route: RouteInfo | None = None
    ) -> MessageSequence:
        seq = CURRENT.parse_request(body, route)
        messages = tuple(_older(m) for m in seq.messages)
        return dataclasses.replace(seq, adapter=VERSION.id, messages=messages)

    def render_request(self, seq: MessageSequence) -> dict[str, Any]:
        return CURRENT.render_request(seq)

    def render_error(self, error: TurngateError) -> ErrorResponse:
        return CURRENT.render_error(error)

    def parse_response(self, body: Mapping[str, Any]) -> AssistantTurn:
        return CURRENT.parse_response(body)


ADAPTER = AnthropicV0()
