"""The request paths google-genai sends a chat request on, and their bounded templates.

    /{v1|v1beta|v1alpha|v1beta1}[/projects/P/locations/L][/publishers/X]
        /{models|tunedModels|endpoints}/M:{generateContent|streamGenerateContent}

The Gemini API's versions and tuned models, and Vertex AI's (``v1beta1`` by default; with a
project and location, or without them in express mode; a publisher's model or a deployed
endpoint). A chat path left out here would be relayed unchecked, so the proxy's routes and
the telemetry's labels both read this one pattern.
"""

from __future__ import annotations

import re

from turngate.adapters.base import RouteInfo
from turngate.graph.model import Endpoint

CHAT_PATH = re.compile(
    r"/(?P<version>v1|v1beta|v1alpha|v1beta1)"
    r"(?P<project>/projects/[^/]+/locations/[^/]+)?"
    r"(?P<publisher>/publishers/[^/]+)?"
    r"/(?P<kind>models|tunedModels|endpoints)/(?P<model>[^/:]+)"
    r":(?P<method>generateContent|streamGenerateContent)"
)


def gemini_endpoint(found: re.Match[str]) -> Endpoint:
    """The service a chat path addresses: Vertex AI for ``v1beta1``, a project, a publisher
    or a deployed endpoint; the Gemini API otherwise."""
    vertex = found["version"] == "v1beta1" or found["project"] or found["publisher"]
    return "vertex" if vertex or found["kind"] == "endpoints" else "gemini_api"


def chat_route(found: re.Match[str]) -> RouteInfo:
    """What a chat path says of its request: the model, whether it streams, the service."""
    streamed = found["method"] == "streamGenerateContent"
    return RouteInfo(model=found["model"], stream=streamed, endpoint=gemini_endpoint(found))


def chat_path_template(found: re.Match[str]) -> str:
    """The path with every name a client chose replaced by a placeholder (a metric label)."""
    project = "/projects/{project}/locations/{location}" if found["project"] else ""
    publisher = "/publishers/{publisher}" if found["publisher"] else ""
    return f"/{found['version']}{project}{publisher}/{found['kind']}/{{model}}:{found['method']}"


# Claude on Vertex AI (the anthropic SDK's ``AnthropicVertex``): an Anthropic Messages body
# (``anthropic_version`` in it, the model in the path) on the same Vertex host as Gemini's.
# The token counting endpoint is the model ``count-tokens``: not a chat request.
CLAUDE_ON_VERTEX = re.compile(
    r"/(?P<version>v1|v1beta1)/projects/[^/]+/locations/[^/]+/publishers/anthropic"
    r"/models/(?!count-tokens:)(?P<model>[^/:]+):(?P<method>rawPredict|streamRawPredict)"
)


def claude_path_template(found: re.Match[str]) -> str:
    """A Claude-on-Vertex path with the project, location and model as placeholders."""
    return (
        f"/{found['version']}/projects/{{project}}/locations/{{location}}/publishers/anthropic"
        f"/models/{{model}}:{found['method']}"
    )
