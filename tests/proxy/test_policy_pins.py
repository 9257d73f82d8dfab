"""Adapter pins through the proxy, and the rollback: a conversation whose stored graph holds a
block kind the pinned older adapter does not know is paused (409), with nothing sent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import orjson
import pytest

from tests.proxy import anthropic_v0
from tests.proxy.helpers import claude_answer, operation, post
from tests.proxy.policy_stack import shadow_records, start_policy_stack
from tests.proxy.stack import ANTHROPIC_KEY, Stack
from turngate.policies.loading import PolicyConfigError
from turngate.policies.pins import AdapterRegistry
from turngate.proxy.app import create_app
from turngate.proxy.policy import graph_log
from turngate.settings import Settings

MESSAGES = "/anthropic/v1/messages"
CONVERSATION = {"Turngate-Conversation-Id": "conv-rollback"}
REGISTRY = AdapterRegistry().register(anthropic_v0.VERSION)
PINNED_OLD = {
    "routes": [{"match": {"prefix": "anthropic"}, "adapter_versions": {"anthropic": "0"}}]
}
ANSWER = claude_answer("Next: the budget.", "msg_rollback")


def turn(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "claude-haiku-4-5-20251001", "max_tokens": 1024, "messages": list(messages)}


COMPACTED = {
    "role": "assistant",
    "content": [
        {"type": "compaction", "encrypted_content": "Q29tcGFjdGVkIGhpc3Rvcnk="},
        {"type": "text", "text": "We agreed on the plan."},
    ],
}
FIRST = turn(
    {"role": "user", "content": "Summarise our plan."},
    COMPACTED,
    {"role": "user", "content": "Go on."},
)
SECOND = turn(
    *FIRST["messages"],
    {"role": "assistant", "content": [{"type": "text", "text": "Next: the budget."}]},
    {"role": "user", "content": "And then?"},
)


async def stack_on(aiohttp_server: Any, state: Path, **options: Any) -> Stack:
    stack = await start_policy_stack(
        aiohttp_server, adapters=REGISTRY, state=f"sqlite://{state}", **options
    )
    stack.upstream.reply(ANSWER)
    return stack


async def test_a_conversation_rolled_back_to_an_older_adapter_is_paused_with_nothing_sent(
    aiohttp_server: Any, tmp_path: Path
):
    state = tmp_path / "state.db"
    # The current turngate serves the conversation; its graph holds a compaction block,
    # which version 0 does not know, so the graph is kept with the conversation.
    current = await stack_on(aiohttp_server, state)
    status, _headers, _answer = await post(current, MESSAGES, FIRST, CONVERSATION)
    assert status == 200
    (stored,) = await current.store.read_log(graph_log("conv-rollback"), limit=5)
    kinds = [b["kind"] for m in stored["messages"] for b in m["blocks"]]
    assert "compression" in kinds
    assert stored["adapter"] == "anthropic@1"

    # Rolled back: the route pins version 0. The next turn pauses; the upstream gets nothing.
    older = await stack_on(aiohttp_server, state, policy=PINNED_OLD)
    async with anthropic.AsyncAnthropic(
        api_key=ANTHROPIC_KEY,
        base_url=older.base("/anthropic"),
        max_retries=0,
        default_headers=CONVERSATION,
    ) as client:
        with pytest.raises(anthropic.ConflictError) as raised:
            await client.messages.create(**SECOND)
    assert raised.value.status_code == 409
    assert raised.value.response.headers["Turngate-Rejection"] == "conversation_paused"
    # Waiting will not un-pause it: the SDK's own retries (twice by default) are told off.
    assert raised.value.response.headers["x-should-retry"] == "false"
    message = raised.value.body["error"]["message"]  # type: ignore[index]
    assert "kind 'compression', which adapter anthropic@0 does not know" in message
    assert older.upstream.received == []

    # Without the stored graph the older adapter would have refused the part as unknown
    # (400): the pause is what tells the client to roll forward, not to edit its history.
    fresh = await stack_on(aiohttp_server, tmp_path / "other.db", policy=PINNED_OLD)
    status, headers, _answer = await post(fresh, MESSAGES, SECOND, CONVERSATION)
    assert (status, headers["Turngate-Rejection"]) == (400, "unknown_kind")
    assert fresh.upstream.received == []

    # Rolled forward again, the conversation goes on.
    status, _headers, _answer = await post(current, MESSAGES, SECOND, CONVERSATION)
    assert status == 200
    assert len(current.upstream.received) == 2


async def test_a_pinned_route_dispatches_with_that_version(aiohttp_server: Any, tmp_path: Path):
    stack = await stack_on(aiohttp_server, tmp_path / "state.db", policy=PINNED_OLD)
    plain = turn({"role": "user", "content": "Hello"})
    status, headers, _answer = await post(stack, MESSAGES, plain)
    assert status == 200
    manifest = (await operation(stack, headers["Turngate-Operation-Id"]))["manifest"]
    assert manifest["adapter"] == "anthropic@0"
    assert [r.json() for r in stack.upstream.received] == [plain]
    # A graph every version knows is not kept: no store write per request.
    await post(stack, MESSAGES, plain, {"Turngate-Conversation-Id": "conv-plain"})
    assert await stack.store.read_log(graph_log("conv-plain"), limit=5) == []


async def test_a_shadowed_rollback_is_sent_and_records_the_pause(
    aiohttp_server: Any, tmp_path: Path
):
    state = tmp_path / "state.db"
    current = await stack_on(aiohttp_server, state)
    assert (await post(current, MESSAGES, FIRST, CONVERSATION))[0] == 200
    shadowed = await stack_on(
        aiohttp_server, state, policy={**PINNED_OLD, "defaults": {"mode": "shadow"}}
    )
    raw = orjson.dumps(SECOND)
    status, _headers, _answer = await post(shadowed, MESSAGES, raw, CONVERSATION)
    assert status == 200
    assert [r.body for r in shadowed.upstream.received] == [raw]
    (record,) = await shadow_records(shadowed)
    assert "conversation_paused" in record["rules"]


def test_a_pin_naming_no_registered_version_refuses_to_start(tmp_path: Path):
    config = tmp_path / "pins.yaml"
    config.write_text(
        "routes:\n"
        "  - match: {prefix: anthropic}\n"
        "    adapter_versions: {anthropic: '0'}\n"
        "  - match: {prefix: gemini}\n"
        "    adapter_versions: {gemini: '7'}\n"
    )
    settings = Settings(state="memory://", config=str(config))
    with pytest.raises(PolicyConfigError) as raised:
        create_app(settings, adapters=REGISTRY)
    assert str(raised.value) == (
        f"invalid policy {config} (1 problem):\n"
        f"  {config}:5:32: routes[1].adapter_versions.gemini: gemini has no adapter version "
        "'7' (registered: 1)"
    )
    # The older Anthropic version is registered here, so its pin is fine; without it, not.
    with pytest.raises(PolicyConfigError, match=r"anthropic has no adapter version '0'"):
        create_app(settings)
