"""Blocks Anthropic puts in a turn that are neither a call nor a result: ``mcp_tool_listing``
(the tools an MCP server listed, sent back so that the server is not asked again) and
``fallback`` (where a fallback model took over from one that declined). The application
sends the turn back unchanged; neither may be refused as an unknown kind.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import anthropic_sdk, claude_answer, claude_stream, get
from tests.proxy.stack import Stack
from tests.proxy.test_anthropic_compaction import message

CONVERSATION = "marks-1"
LISTING = {
    "type": "mcp_tool_listing",
    "mcp_server_name": "crm",
    "tools": [{"name": "lookup_order", "input_schema": {"type": "object"}}],
}
FALLBACK = {
    "type": "fallback",
    "from": {"model": "claude-opus-4-6"},
    "to": {"model": "claude-sonnet-4-5-20250929"},
    "trigger": {"type": "refusal"},
}


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("mark", [LISTING, FALLBACK], ids=["mcp-tool-listing", "fallback"])
async def test_a_turn_with_a_provider_mark_is_sent_back_and_matches(
    stack: Stack, mark: dict[str, Any], streamed: bool
):
    blocks = [mark, {"type": "text", "text": "Order A-77 ships today."}]
    first = claude_stream(message(blocks)) if streamed else Reply.json(message(blocks))
    stack.upstream.replies(first, claude_answer("You are welcome.", message_id="msg_2"))
    async with anthropic_sdk(stack, **{"Turngate-Conversation-Id": CONVERSATION}) as sdk:
        ask: dict[str, Any] = {"model": "claude-opus-4-6", "max_tokens": 1024}
        question = {"role": "user", "content": "Where is order A-77?"}
        if streamed:
            async with sdk.beta.messages.stream(**ask, messages=[question]) as stream:
                answer = await stream.get_final_message()
        else:
            answer = await sdk.beta.messages.create(**ask, messages=[question])
        assert [block.type for block in answer.content] == [mark["type"], "text"]
        sent_back = [block.model_dump(exclude_none=True, by_alias=True) for block in answer.content]
        follow_up = [question, {"role": "assistant", "content": sent_back}]
        follow_up.append({"role": "user", "content": "Thanks!"})
        await sdk.beta.messages.create(**ask, messages=follow_up)
    assert stack.upstream.received[1].json()["messages"][1]["content"][0] == sent_back[0]
    status, kept = await get(stack, f"/turngate/v1/conversations/{CONVERSATION}")
    assert (status, [t["revision"] for t in kept["turns"]]) == (200, [0, 1])
