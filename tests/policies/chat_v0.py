"""An older OpenAI Chat adapter version, for the pin tests: it predates compression blocks.

It shows how two versions of one adapter coexist: a second package with its own ``ADAPTER``
and a registry row; the current adapter stays where it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turngate.adapters.base import ErrorResponse, RouteInfo
from turngate.adapters.openai_chat import ADAPTER as CURRENT
from turngate.errors import TurngateError
from turngate.graph.model import ApiName, MessageSequence
from turngate.graph.turn import AssistantTurn
from turngate.policies.pins import GRAPH_V1_KINDS, AdapterVersion

VERSION = AdapterVersion(
    "openai_chat", "0", "tests.policies.chat_v0", known_kinds=GRAPH_V1_KINDS - {"compression"}
)


class OpenAIChatV0:
    api: ApiName = "openai_chat"
    version = "0"
    capabilities = CURRENT.capabilities

    def parse_request(
        self, body: Mapping[str, Any], route: RouteInfo | None = None
    ) -> MessageSequence:
        return CURRENT.parse_request(body, route)

    def render_request(self, seq: MessageSequence) -> dict[str, Any]:
        return CURRENT.render_request(seq)

    def render_error(self, error: TurngateError) -> ErrorResponse:
        return CURRENT.render_error(error)

    def parse_response(self, body: Mapping[str, Any]) -> AssistantTurn:
        return CURRENT.parse_response(body)


ADAPTER = OpenAIChatV0()
