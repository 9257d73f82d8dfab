"""The request paths the openai SDK's ``AzureOpenAI`` client (and ``OpenAI`` aimed at an
Azure resource's ``/openai/v1``) sends a chat request on, below an Azure OpenAI resource.

    /openai/deployments/{deployment}/chat/completions?api-version=...   the deployments API
    /openai/v1/chat/completions                                          the v1 API
    /openai/responses?api-version=...,  /openai/v1/responses            Responses

One module, so that the proxy's routes and the telemetry's labels read the same patterns.
"""

from __future__ import annotations

import re

AZURE_MOUNT = "/azure"
AZURE_CHAT = re.compile(r"/openai(?:/v1|/deployments/(?P<deployment>[^/]+))/chat/completions")
AZURE_RESPONSES = re.compile(r"/openai(?:/v1)?/responses")


def azure_path_template(path: str) -> str | None:
    """A parsed Azure path (below the resource) with the deployment as a placeholder."""
    found = AZURE_CHAT.fullmatch(path)
    if found is not None:
        if found["deployment"] is None:
            return path
        return "/openai/deployments/{deployment}/chat/completions"
    if AZURE_RESPONSES.fullmatch(path):
        return path
    return None


def as_openai_path(path: str) -> str | None:
    """An Azure path below the resource as the OpenAI API names it (``/v1/...``): Azure's
    ``/openai/v1/...`` and ``/openai/...`` (the deployments API's, for non-deployment
    routes such as ``/openai/responses/{id}`` or ``/openai/files``); None for any other."""
    if path.startswith("/openai/v1/"):
        return path.removeprefix("/openai")
    if path.startswith("/openai/") and not path.startswith("/openai/deployments/"):
        return "/v1" + path.removeprefix("/openai")
    return None
