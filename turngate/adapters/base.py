"""The one interface every wire-API adapter implements. Adapters are pure codecs: no HTTP.

An adapter parses a request body into a MessageSequence and renders one back. What
the graph does not model is kept in ``attrs`` as a *remainder*: the native object with
the modelled fields taken out. Rendering to the same API merges the remainder back, so
``render_request(parse_request(body)) == body`` for every valid request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from turngate.errors import TurngateError
from turngate.graph.capabilities import Capabilities
from turngate.graph.model import UNKNOWN_HINT, ApiName, Endpoint, MessageSequence, Role, Trust
from turngate.graph.turn import AssistantTurn


@dataclass(frozen=True)
class RouteInfo:
    """What the request path says about the request (Gemini puts model and streaming there,
    and whether it goes to the Gemini API or Vertex AI), and what its headers ask of the API
    (Anthropic's ``anthropic-beta`` features and ``anthropic-version``): all change what the
    API accepts."""

    model: str | None = None
    stream: bool | None = None
    betas: tuple[str, ...] = ()
    api_version: str | None = None
    # Google's service for a Gemini body; None when no path says.
    endpoint: Endpoint | None = None


@dataclass(frozen=True)
class ErrorResponse:
    """An error in an API's own envelope: status, JSON body and extra headers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


class Adapter(Protocol):
    api: ApiName
    version: str
    capabilities: Capabilities

    def parse_request(
        self, body: Mapping[str, Any], route: RouteInfo | None = None
    ) -> MessageSequence: ...

    def render_request(self, seq: MessageSequence) -> dict[str, Any]: ...

    def render_error(self, error: TurngateError) -> ErrorResponse: ...

    def parse_response(self, body: Mapping[str, Any]) -> AssistantTurn:
        """A non-streaming response body as the assistant turn it carries.

        Raises ``UpstreamProtocolError`` when the body is not a response of this API.
        """
        ...


def default_trust(role: Role) -> Trust:
    """System and developer text is trusted; everything else is untrusted until policy says."""
    return "trusted" if role in ("system", "developer") else "untrusted"


# The fix for ``model``, Gemini's name for the model's turns, in the other APIs.
MODEL_ROLE_HINT = "the model's turns are role assistant"


def with_hint(attrs: dict[str, Any], hint: str | None) -> dict[str, Any]:
    """``attrs`` of an unknown block, with the usual fix its refusal names, if there is one."""
    if hint:
        attrs[UNKNOWN_HINT] = hint
    return attrs


def without_hint(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """An unknown block's native fields as they came: its hint left out."""
    return {k: v for k, v in attrs.items() if k != UNKNOWN_HINT}


# The usual fix for a part with no ``type``: most often a tool's result passed on as the
# objects it returned.
UNTYPED_PART_FIX = (
    '(give each its type, {"type": "text", "text": ...}; send a tool\'s object result '
    "as text: json.dumps of it)"
)


def role_hint(hints: Mapping[str, str], role: Any) -> str | None:
    """An API's fix for a role it does not take (the role another API gives tool output or
    the model's turns), if it has one."""
    return hints.get(role) if isinstance(role, str) else None


def remainder(native: Mapping[str, Any], modelled: frozenset[str]) -> dict[str, Any]:
    """The native object's fields that the graph does not model."""
    if native.keys() <= modelled:
        return {}
    return {k: v for k, v in native.items() if k not in modelled}


def merged(modelled: dict[str, Any], attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Put a remainder back: nested dicts merge, modelled values win."""
    if not attrs:
        return modelled
    out = dict(attrs)
    for key, value in modelled.items():
        extra = out.get(key)
        if isinstance(value, dict) and isinstance(extra, dict):
            out[key] = merged(value, extra)
        else:
            out[key] = value
    return out
