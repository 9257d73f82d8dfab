"""Rollout modes through the proxy: which invalid requests each mode refuses before any send,
and which it sends unchanged and records in the shadow report."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from tests.graph.chat_builders import assistant, body, call, tool, user
from tests.proxy.helpers import CHAT_ANSWER, operation, post
from tests.proxy.policy_stack import shadow_records, shadow_report, start_policy_stack
from tests.proxy.stack import Stack
from turngate.policies.config import PolicyFile
from turngate.policies.modes import MODES, Mode

CHAT = "/openai/v1/chat/completions"
StackMaker = Callable[..., Any]


def without_tools(request: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in request.items() if k != "tools"}


# Invalid requests, one per way of using tools: (body, the rule enforcing refuses it with).
INVALID: dict[str, tuple[dict[str, Any], str]] = {
    "no tools": (without_tools(body({"role": "user", "content": [{"type": "x"}]})), "unknown_kind"),
    "tools defined": (body({"role": "user", "content": [{"type": "x"}]}), "unknown_kind"),
    "tool blocks in history": (
        without_tools(body(user("hi"), assistant(calls=[call("c1")]), tool("c1"), tool("c1"))),
        "duplicate_result",
    ),
    "tools defined and in history": (
        body(user("hi"), assistant(calls=[call("c1")]), tool("c1"), tool("c1")),
        "duplicate_result",
    ),
}

# mode -> request -> what the proxy does with it. Written out by hand: this is the contract.
TABLE: dict[Mode, dict[str, str]] = {
    "shadow": {
        "no tools": "shadow",
        "tools defined": "shadow",
        "tool blocks in history": "shadow",
        "tools defined and in history": "shadow",
    },
    "enforce-no-tools": {
        "no tools": "enforce",
        "tools defined": "shadow",
        "tool blocks in history": "shadow",
        "tools defined and in history": "shadow",
    },
    "enforce": {
        "no tools": "enforce",
        "tools defined": "enforce",
        "tool blocks in history": "enforce",
        "tools defined and in history": "enforce",
    },
}


@pytest.fixture
def make(aiohttp_server: Any) -> StackMaker:
    async def start(**options: Any) -> Stack:
        return await start_policy_stack(aiohttp_server, **options)

    return start


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(INVALID))
async def test_each_mode_refuses_or_shadows_each_kind_of_invalid_request(
    make: StackMaker, mode: Mode, name: str
):
    stack = await make(policy={"defaults": {"mode": mode}})
    stack.upstream.reply(CHAT_ANSWER)
    request, rule = INVALID[name]
    raw = orjson.dumps(request)
    status, headers, answer = await post(stack, CHAT, raw)
    if TABLE[mode][name] == "enforce":
        assert (status, headers["Turngate-Rejection"]) == (400, rule)
        assert orjson.loads(answer)["error"]["code"] == rule
        assert stack.upstream.received == []
        assert await shadow_records(stack) == []
        return
    assert status == 200
    assert "Turngate-Rejection" not in headers
    assert [r.body for r in stack.upstream.received] == [raw]
    (record,) = await shadow_records(stack)
    assert record["operationId"] == headers["Turngate-Operation-Id"]
    assert record["rules"] == [rule]
    report = await shadow_report(stack)
    assert (report["wouldRefuse"], report["byRule"][0]["rule"]) == (1, rule)


async def test_a_route_by_model_shadows_what_the_defaults_enforce(make: StackMaker):
    config = {
        "defaults": {"mode": "enforce"},
        "routes": [{"match": {"prefix": "openai", "model": "gpt-4o-mini*"}, "mode": "shadow"}],
    }
    stack = await make(policy=config)
    stack.upstream.reply(CHAT_ANSWER)
    request, rule = INVALID["tools defined and in history"]
    status, headers, _answer = await post(stack, CHAT, request)
    assert (status, headers["Turngate-Rejection"]) == (400, rule)
    assert stack.upstream.received == []

    mini = {**request, "model": "gpt-4o-mini-2024-07-18"}
    status, headers, _answer = await post(stack, CHAT, mini)
    assert status == 200
    assert [r.json() for r in stack.upstream.received] == [mini]
    # The manifest binds the policy the request was served under: the route's.
    policies = PolicyFile.model_validate(config)
    route_policy = policies.policy_for("openai_chat", "gpt-4o-mini-2024-07-18")
    assert route_policy.mode == "shadow"
    manifest = (await operation(stack, headers["Turngate-Operation-Id"]))["manifest"]
    assert manifest["policyDigest"] == route_policy.digest != policies.defaults.digest


async def test_a_valid_request_is_sent_in_every_mode_and_recorded_only_when_shadowed(
    make: StackMaker,
):
    for mode in MODES:
        stack = await make(policy={"defaults": {"mode": mode}})
        stack.upstream.reply(CHAT_ANSWER)
        request = body(user("weather in Paris?"))
        status, _headers, _answer = await post(stack, CHAT, request)
        assert status == 200
        assert [r.json() for r in stack.upstream.received] == [request]
        records = await shadow_records(stack)
        assert len(records) == (0 if TABLE[mode]["tools defined"] == "enforce" else 1)
        assert all(r["rules"] == [] and r["bytes"]["equal"] for r in records)
