"""Provider-defined tools the application runs: the schema is the provider's, the execution
the application's.

``bash``, ``str_replace_based_edit_tool``, ``computer`` and ``memory`` are declared by type
(``{"type": "bash_20250124", "name": "bash"}``), with no ``input_schema``; the model calls
them with ordinary ``tool_use`` blocks, and the application runs them. Those calls must reach
the application (checked as complete JSON objects: turngate does not hold Anthropic's
schemas), and since the provider runs nothing of them, a request with only these tools is
as safe to send again as one with the application's functions. Gemini's ``computerUse`` is
the same, except that its calls name the UI actions (``click_at``, ``type_text_at``...),
declared nowhere in the request.
"""

from __future__ import annotations

from typing import Any

import anthropic
import orjson
import pytest
from google.genai import types

from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import claude_stream, genai_sdk
from tests.proxy.sdk_support import GENAI_AIOHTTP_WARNING
from tests.proxy.stack import ANTHROPIC_KEY, Stack
from turngate.adapters import get_adapter
from turngate.adapters.anthropic import ADAPTER
from turngate.proxy.stream import provider_runs_tools

CLIENT_TOOLS = [
    ({"type": "bash_20250124", "name": "bash"}, {"command": "ls -la /srv"}),
    (
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
        {"command": "view", "path": "/srv/app.py"},
    ),
    (
        {
            "type": "computer_20250124",
            "name": "computer",
            "display_width_px": 1280,
            "display_height_px": 800,
        },
        {"action": "screenshot"},
    ),
    ({"type": "memory_20250818", "name": "memory"}, {"command": "view", "path": "/memories"}),
]


def tool_use_answer(name: str, arguments: dict[str, Any], streamed: bool, **fields: Any) -> Reply:
    block = {"type": "tool_use", "id": "toolu_01A", "name": name, "input": arguments, **fields}
    message = {
        "id": "msg_client_tool",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5",
        "content": [block],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 900, "output_tokens": 40},
    }
    return claude_stream(message) if streamed else Reply.json(message)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(("tool", "arguments"), CLIENT_TOOLS, ids=lambda v: v.get("name", ""))
async def test_a_call_to_an_anthropic_client_tool_reaches_the_application(
    stack: Stack, tool: dict[str, Any], arguments: dict[str, Any], streamed: bool
):
    stack.upstream.reply(tool_use_answer(tool["name"], arguments, streamed))
    block = await the_call(stack, tool, streamed)
    assert (block.name, block.input) == (tool["name"], arguments)


async def the_call(stack: Stack, tool: dict[str, Any], streamed: bool) -> Any:
    """The one tool_use block the anthropic SDK's beta client gets back, asked with ``tool``."""
    async with anthropic.AsyncAnthropic(
        api_key=ANTHROPIC_KEY, base_url=stack.base("/anthropic"), max_retries=0
    ) as sdk:
        ask: dict[str, Any] = {
            "model": "claude-haiku-4-5",
            "max_tokens": 1024,
            "tools": [tool],
            "messages": [{"role": "user", "content": "Go ahead."}],
        }
        if streamed:
            async with sdk.beta.messages.stream(**ask) as stream:
                message = await stream.get_final_message()
        else:
            message = await sdk.beta.messages.create(**ask)
    (block,) = message.content
    assert block.type == "tool_use"
    return block


@pytest.mark.parametrize(("tool", "arguments"), CLIENT_TOOLS, ids=lambda v: v.get("name", ""))
def test_the_provider_runs_none_of_them(tool: dict[str, Any], arguments: dict[str, Any]):
    seq = ADAPTER.parse_request(
        {
            "model": "m",
            "max_tokens": 8,
            "tools": [tool],
            "messages": [{"role": "user", "content": "x"}],
        }
    )
    assert not provider_runs_tools(seq)
    web_search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}
    with_search = ADAPTER.parse_request(
        {
            "model": "m",
            "max_tokens": 8,
            "tools": [tool, web_search],
            "messages": [{"role": "user", "content": "x"}],
        }
    )
    assert provider_runs_tools(with_search)


# Anthropic-defined toolsets: one ``tools[]`` entry, no name, declares a family whose members
# the model calls by name, with ``toolset_name`` (anthropic.tools.browser / .computer run them).
TOOLSETS = [
    ({"type": "browser_toolset_20260801"}, "navigate", "browser", {"url": "https://example.com"}),
    ({"type": "computer_toolset_20260801"}, "screenshot", "computer", {}),
]


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(
    ("tool", "member", "family", "arguments"), TOOLSETS, ids=["browser", "computer"]
)
async def test_a_call_to_an_anthropic_toolset_member_reaches_the_application(
    stack: Stack,
    tool: dict[str, Any],
    member: str,
    family: str,
    arguments: dict[str, Any],
    streamed: bool,
):
    stack.upstream.reply(tool_use_answer(member, arguments, streamed, toolset_name=family))
    got = await the_call(stack, tool, streamed)
    assert (got.name, got.toolset_name, got.input) == (member, family, arguments)


COMPUTER = types.Tool(
    computer_use=types.ComputerUse(environment=types.Environment.ENVIRONMENT_BROWSER)
)


@GENAI_AIOHTTP_WARNING
@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_gemini_computer_use_actions_reach_the_application(stack: Stack, streamed: bool):
    click = {"functionCall": {"name": "click_at", "args": {"x": 412, "y": 88}}}
    chunk = {
        "candidates": [{"content": {"role": "model", "parts": [click]}, "finishReason": "STOP"}],
        "modelVersion": "gemini-2.5-computer-use-preview-10-2025",
        "responseId": "cu-1",
    }
    if streamed:
        body = b"data: " + orjson.dumps(chunk) + b"\r\n\r\n"
        stack.upstream.reply(Reply(body=body, content_type="text/event-stream"))
    else:
        stack.upstream.reply(Reply.json(chunk))
    sdk = genai_sdk(stack)
    ask: dict[str, Any] = {
        "model": "gemini-2.5-computer-use-preview-10-2025",
        "contents": "Open the pricing page.",
        "config": types.GenerateContentConfig(tools=[COMPUTER]),
    }
    if streamed:
        chunks = [c async for c in await sdk.aio.models.generate_content_stream(**ask)]
    else:
        chunks = [await sdk.aio.models.generate_content(**ask)]
    await sdk.aio.aclose()
    (call,) = [call for c in chunks for call in c.function_calls or []]
    assert (call.name, call.args) == ("click_at", {"x": 412, "y": 88})


@pytest.mark.parametrize(
    ("kind", "client_run"),
    [
        ({"type": "computer_use_preview", "display_width": 1024, "display_height": 768}, True),
        ({"type": "computer"}, True),  # the GA computer tool (openai.lib.computer runs it)
        ({"type": "local_shell"}, True),
        ({"type": "apply_patch"}, True),
        ({"type": "web_search"}, False),
        ({"type": "code_interpreter", "container": {"type": "auto"}}, False),
        ({"type": "shell"}, False),  # may run in OpenAI's own container
    ],
)
def test_responses_tools_openai_defines_and_the_application_runs(
    kind: dict[str, Any], client_run: bool
):
    seq = get_adapter("openai_responses").parse_request(
        {"model": "m", "input": "x", "tools": [kind]}
    )
    assert provider_runs_tools(seq) is not client_run


def test_gemini_computer_use_is_the_clients():
    gemini = get_adapter("gemini")
    body = {"contents": [{"role": "user", "parts": [{"text": "x"}]}]}
    computer = gemini.parse_request({**body, "tools": [{"computerUse": {"environment": "E"}}]})
    assert not provider_runs_tools(computer)
    search = gemini.parse_request({**body, "tools": [{"googleSearch": {}}]})
    assert provider_runs_tools(search)
