"""The official anthropic SDK (sync and async) after a base-URL swap to /anthropic."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest

from tests.adapters.test_anthropic_rules import TABLE, VALID
from tests.fixtures_dir import COUNTS, FIXTURES_DIR, FIXTURES_PRESENT, load_json
from tests.proxy.conftest import StackFactory
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import claude_answer
from tests.proxy.sdk_support import MODES, call, consume, requires_adapter, sdk_kwargs
from tests.proxy.stack import ANTHROPIC_KEY, Stack

pytestmark = [
    pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT"),
    requires_adapter("anthropic"),
    # The recorded conversations name models the SDK now calls deprecated.
    pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning"),
]

CONVERSATIONS = [
    "anthropic/lla-after-2-tool-results.sse",
    "anthropic/lla-thinking-signature-roundtrip.sse",
    "anthropic/pai-nonstream-after-4-tool-results.json",
    "anthropic/pai-nonstream-thinking-history.json",
]
# Anthropic SDK 2.x sends the key as a Bearer token; older ones, and many apps, send x-api-key.
AUTH = {
    "bearer": None,
    "x-api-key": {"x-api-key": ANTHROPIC_KEY, "Authorization": anthropic.Omit()},
}


@pytest.fixture(params=[(m, a) for m in MODES for a in AUTH], ids=lambda p: f"{p[0]}-{p[1]}")
async def client(request: pytest.FixtureRequest, make_stack: StackFactory) -> AsyncIterator[Any]:
    mode, auth = request.param
    stack = await make_stack(record_bodies=True)
    cls = anthropic.Anthropic if mode == "sync" else anthropic.AsyncAnthropic
    sdk = cls(
        api_key=ANTHROPIC_KEY,
        base_url=stack.base("/anthropic"),
        max_retries=0,
        default_headers=AUTH[auth],
    )
    sdk.stack, sdk.mode, sdk.auth = stack, mode, auth  # type: ignore[attr-defined]
    yield sdk
    await call(mode, sdk.close)


@pytest.mark.parametrize("answer", CONVERSATIONS)
async def test_tool_conversations_pass_through(client: Any, answer: str):
    stack: Stack = client.stack
    stack.upstream.reply(Reply.fixture(answer))
    request = load_json(
        FIXTURES_DIR / answer.replace(answer[answer.rindex(".") :], ".request.json")
    )
    assert isinstance(request, dict)
    create = client.messages.create
    result = await call(client.mode, create, **sdk_kwargs(create, request))
    if request.get("stream"):
        events = await consume(client.mode, result)
        assert events[-1].type == "message_stop"
    else:
        assert result.id == load_json(FIXTURES_DIR / answer)["id"]  # type: ignore[index]
    (received,) = stack.upstream.received
    (client_body,) = stack.client_bodies
    assert received.body == client_body
    assert received.json() == request
    header = "x-api-key" if client.auth == "x-api-key" else "Authorization"
    assert ANTHROPIC_KEY in received.headers[header]
    assert received.headers["anthropic-version"]
    COUNTS["SDK conversations through turngate (anthropic)"] += 1


@pytest.mark.parametrize(
    ("request_body", "rules"),
    [pytest.param(b, r, id=name) for name, b, _status, r in TABLE],
)
async def test_invalid_sequences_raise_bad_request_and_send_nothing(
    client: Any, request_body: dict[str, Any], rules: list[str]
):
    create = client.messages.create
    with pytest.raises(anthropic.BadRequestError) as raised:
        await call(client.mode, create, **sdk_kwargs(create, request_body))
    rule = raised.value.response.headers["Turngate-Rejection"]
    assert rule in rules
    assert raised.value.status_code == 400
    assert rule in str(raised.value)
    assert client.stack.upstream.received == []
    COUNTS["SDK refusals with zero upstream sends (anthropic)"] += 1


@pytest.mark.parametrize("request_body", [pytest.param(b, id=name) for name, b in VALID])
async def test_the_valid_neighbours_go_up_as_sent(client: Any, request_body: dict[str, Any]):
    """The shapes beside each refusal (a conversation opening with the assistant, an empty
    user message beside one with content, documents that all cite...) reach the provider as
    the application sent them."""
    client.stack.upstream.reply(claude_answer("ok"))
    create = client.messages.create
    await call(client.mode, create, **sdk_kwargs(create, request_body))
    (received,) = client.stack.upstream.received
    assert received.json()["messages"] == request_body["messages"]


async def test_the_beta_client_is_checked_too(client: Any):
    # client.beta.messages posts to /v1/messages (SDK 1.x added ?beta=true) with an
    # anthropic-beta header: the same route, parsed and checked, the header passed through.
    stack: Stack = client.stack
    create = client.beta.messages.create
    name, invalid, _status, rules = TABLE[0]
    with pytest.raises(anthropic.BadRequestError) as raised:
        await call(
            client.mode, create, betas=["context-1m-2025-08-07"], **sdk_kwargs(create, invalid)
        )
    assert raised.value.response.headers["Turngate-Rejection"] in rules, name
    assert stack.upstream.received == []
    answer = "anthropic/pai-nonstream-after-4-tool-results.json"
    stack.upstream.reply(Reply.fixture(answer))
    request = load_json(FIXTURES_DIR / answer.replace(".json", ".request.json"))
    assert isinstance(request, dict)
    result = await call(
        client.mode, create, betas=["context-1m-2025-08-07"], **sdk_kwargs(create, request)
    )
    assert result.id == load_json(FIXTURES_DIR / answer)["id"]  # type: ignore[index]
    (received,) = stack.upstream.received
    assert received.path_qs.split("?")[0] == "/v1/messages"
    assert received.headers["anthropic-beta"] == "context-1m-2025-08-07"
    assert received.headers["Idempotency-Key"]  # sent under a dispatch manifest


async def test_a_tool_search_answer_goes_up_as_sent(client: Any):
    # Claude Code's own tool search (many MCP tools, their definitions deferred) answers with
    # tool_reference blocks in a tool_result: the SDK types them, and Anthropic loads the
    # named tools. They go up as the client wrote them.
    stack: Stack = client.stack
    answer = "anthropic/pai-nonstream-after-4-tool-results.json"
    stack.upstream.reply(Reply.fixture(answer))
    found = [
        {"type": "tool_reference", "tool_name": "mcp__github__search_issues"},
        {"type": "tool_reference", "tool_name": "mcp__github__get_issue"},
    ]
    deferred = {"type": "object", "properties": {"q": {"type": "string"}}}
    request = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 256,
        "tools": [
            {"name": "ToolSearch", "input_schema": {"type": "object"}},
            {"name": "mcp__github__search_issues", "input_schema": deferred, "defer_loading": True},
            {"name": "mcp__github__get_issue", "input_schema": deferred, "defer_loading": True},
        ],
        "messages": [
            {"role": "user", "content": "Any open bugs about login?"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_01Search",
                        "name": "ToolSearch",
                        "input": {"query": "github issues"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01Search", "content": found}
                ],
            },
        ],
    }
    create = client.messages.create
    await call(client.mode, create, **sdk_kwargs(create, request))
    (received,) = stack.upstream.received
    (client_body,) = stack.client_bodies
    assert received.body == client_body
    assert received.json()["messages"][2]["content"][0]["content"] == found
