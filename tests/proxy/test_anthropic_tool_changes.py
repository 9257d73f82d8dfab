"""Anthropic's mid-conversation tool changes (the inline-tools beta): ``tool_addition``
offers a tool from that point on, by reference to a declared one or by its definition
inline; ``tool_removal`` withdraws one. They are the client's directives, sent as they came;
a call to a tool defined inline is checked against that definition, as a declared one is.
"""

from __future__ import annotations

from typing import Any

import anthropic
import orjson
import pytest

from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import anthropic_sdk, claude_stream
from tests.proxy.stack import Stack
from tests.proxy.test_anthropic_compaction import message

REFUND = {
    "name": "refund",
    "input_schema": {
        "type": "object",
        "properties": {"order": {"type": "string"}},
        "required": ["order"],
    },
}
LOOKUP = {"name": "lookup_order", "input_schema": {"type": "object"}}
CHANGES = [
    {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "lookup_order"}},
    {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": REFUND}},
]


def call(arguments: dict[str, Any], streamed: bool) -> Reply:
    blocks = [{"type": "tool_use", "id": "toolu_01R", "name": "refund", "input": arguments}]
    answer = {**message(blocks), "stop_reason": "tool_use"}
    return claude_stream(answer) if streamed else Reply.json(answer)


async def ask(stack: Stack, streamed: bool) -> Any:
    async with anthropic_sdk(stack) as sdk:
        request: dict[str, Any] = {
            "model": "claude-opus-4-6",
            "max_tokens": 1024,
            "betas": ["inline-tools-2026-09-15"],
            "tools": [LOOKUP],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Refund A-77."}, *CHANGES]}
            ],
        }
        if not streamed:
            return await sdk.beta.messages.create(**request)
        async with sdk.beta.messages.stream(**request) as stream:
            return await stream.get_final_message()


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_a_call_to_a_tool_defined_inline_reaches_the_application(
    stack: Stack, streamed: bool
):
    stack.upstream.reply(call({"order": "A-77"}, streamed))
    answer = await ask(stack, streamed)
    assert [(b.type, b.name, b.input) for b in answer.content] == [
        ("tool_use", "refund", {"order": "A-77"})
    ]
    sent = stack.upstream.received[0].json()
    assert sent["messages"][0]["content"][1:] == CHANGES


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_a_call_that_breaks_the_inline_definition_is_refused(stack: Stack, streamed: bool):
    stack.upstream.reply(call({"order": 77}, streamed))
    with pytest.raises((anthropic.APIStatusError, anthropic.APIError)) as raised:
        await ask(stack, streamed)
    assert "breaks its schema" in str(raised.value)


@pytest.mark.parametrize("conversation", [False, True], ids=["plain", "conversation"])
async def test_the_tool_runner_changes_its_tools_mid_run(stack: Stack, conversation: bool):
    # runner.add_tools() / remove_tools(): the changes go with the next request, in a system
    # message after the tool results (in the thread's continue, which sends no tools).
    answers = [
        message([{"type": "tool_use", "id": "toolu_1", "name": "lookup_order", "input": {}}]),
        message([{"type": "tool_use", "id": "toolu_2", "name": "refund", "input": {"order": "A"}}]),
        message([{"type": "text", "text": "Refunded."}]),
    ]
    answers[0]["stop_reason"] = answers[1]["stop_reason"] = "tool_use"
    answers[0]["id"], answers[1]["id"], answers[2]["id"] = "msg_1", "msg_2", "msg_3"
    stack.upstream.replies(*(Reply.json(a) for a in answers))
    ran: list[str] = []

    @anthropic.beta_async_tool
    async def lookup_order() -> str:
        """Look the order up."""
        ran.append("lookup_order")
        return "order A, paid"

    @anthropic.beta_async_tool
    async def refund(order: str) -> str:
        """Refund an order."""
        ran.append(f"refund {order}")
        return "done"

    headers = {"Turngate-Conversation-Id": "tool-changes-1"} if conversation else {}
    async with anthropic_sdk(stack, **headers) as sdk:
        runner = sdk.beta.messages.tool_runner(
            model="claude-opus-4-6",
            max_tokens=1024,
            betas=["inline-tools-2026-09-15"],
            tools=[lookup_order],
            messages=[{"role": "user", "content": "Refund order A if it was paid."}],
        )
        async for reply in runner:
            if reply.id == "msg_1":
                runner.add_tools(refund)
            elif reply.id == "msg_2":
                runner.remove_tools(lookup_order)
    assert ran == ["lookup_order", "refund A"]
    later = [orjson.loads(r.body)["messages"] for r in stack.upstream.received[1:]]
    assert [[m["role"] for m in messages] for messages in later] == [["user", "system"]] * 2
    assert [[b["type"] for b in messages[1]["content"]] for messages in later] == [
        ["tool_addition"],
        ["tool_removal"],
    ]
