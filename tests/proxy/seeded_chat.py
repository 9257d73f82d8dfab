"""A seeded mismatch for the shadow tests: an OpenAI Chat adapter version "2" whose renderer
puts the first two of a run of tool results in the other order. Chat accepts results in any
order, so only the shadow diff can show it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from turngate.adapters.base import ErrorResponse, RouteInfo
from turngate.adapters.openai_chat import ADAPTER as CURRENT
from turngate.errors import TurngateError
from turngate.graph.model import ApiName, MessageSequence
from turngate.graph.turn import AssistantTurn
from turngate.policies.pins import AdapterVersion

VERSION = AdapterVersion("openai_chat", "2", "tests.proxy.seeded_chat")


class SwappingChat:
    api: ApiName = "openai_chat"
    version = "2"
    capabilities = CURRENT.capabilities

    def parse_request(
        self, body: Mapping[str, Any], route: RouteInfo | None = None
    ) -> MessageSequence:
        return dataclasses.replace(CURRENT.parse_request(body, route), adapter=VERSION.id)

    def render_request(self, seq: MessageSequence) -> dict[str, Any]:
        messages = list(seq.messages)
        for i in range(len(messages) - 1):
            if messages[i].role == "tool" and messages[i + 1].role == "tool":
                messages[i], messages[i + 1] = messages[i + 1], messages[i]
                break
        return CURRENT.render_request(dataclasses.replace(seq, messages=tuple(messages)))

    def render_error(self, error: TurngateError) -> ErrorResponse:
        return CURRENT.render_error(error)

    def parse_response(self, body: Mapping[str, Any]) -> AssistantTurn:
        return CURRENT.parse_response(body)


ADAPTER = SwappingChat()
