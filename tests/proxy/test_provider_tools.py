"""Which requests the provider may act on by itself (``provider_runs_tools``): sent twice,
such a request may run a tool twice, so turngate neither sends it again nor lets the SDK
resend a lost answer, and a client that left it leaves it UNKNOWN. Each API's way of naming
a provider-run tool, against requests with only the client's own functions."""

from __future__ import annotations

from typing import Any

import pytest

from turngate.adapters import get_adapter
from turngate.proxy.stream import provider_runs_tools

FUNCTION = {"name": "lookup", "description": "d", "parameters": {"type": "object"}}
USER = "Find it."


def chat(**more: Any) -> dict[str, Any]:
    return {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": USER}],
        "tools": [{"type": "function", "function": FUNCTION}],
        **more,
    }


def responses(*tools: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": "gpt-4o",
        "input": USER,
        "tools": [{"type": "function", **FUNCTION}, *tools],
    }


def anthropic(*tools: dict[str, Any], **more: Any) -> dict[str, Any]:
    client = {"name": "lookup", "description": "d", "input_schema": {"type": "object"}}
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": USER}],
        "tools": [client, *tools],
        **more,
    }


def gemini(*tools: dict[str, Any]) -> dict[str, Any]:
    declared = {"functionDeclarations": [FUNCTION]}
    return {"contents": [{"role": "user", "parts": [{"text": USER}]}], "tools": [declared, *tools]}


NAMESPACE = {
    "type": "namespace",
    "name": "crm",
    "description": "CRM",
    "tools": [{"type": "function", **FUNCTION}],
}
MCP_SERVER = [{"type": "url", "url": "https://mcp.example/sse", "name": "tickets"}]


@pytest.mark.parametrize(
    ("api", "body", "provider_runs"),
    [
        ("openai_chat", chat(), False),
        ("openai_responses", responses(), False),
        ("openai_responses", responses(NAMESPACE), False),
        ("openai_responses", responses({"type": "web_search"}), True),
        (
            "openai_responses",
            responses({"type": "mcp", "server_label": "t", "server_url": "https://mcp.example"}),
            True,
        ),
        ("anthropic", anthropic(), False),
        ("anthropic", anthropic({"type": "web_search_20250305", "name": "web_search"}), True),
        ("anthropic", anthropic(mcp_servers=MCP_SERVER), True),
        ("gemini", gemini(), False),
        ("gemini", gemini({"codeExecution": {}}), True),
        ("gemini", gemini({"googleSearch": {}}), True),
    ],
    ids=[
        "chat-functions",
        "responses-functions",
        "responses-namespace",
        "responses-web-search",
        "responses-mcp",
        "anthropic-functions",
        "anthropic-web-search",
        "anthropic-mcp-servers",
        "gemini-functions",
        "gemini-code-execution",
        "gemini-google-search",
    ],
)
def test_what_the_provider_runs_itself(api: str, body: dict[str, Any], provider_runs: bool) -> None:
    seq = get_adapter(api).parse_request(body)  # type: ignore[arg-type]
    assert provider_runs_tools(seq) is provider_runs
