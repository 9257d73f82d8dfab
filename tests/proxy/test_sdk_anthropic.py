"""The official anthropic SDK (sync and async) after a base-URL swap to /anthropic."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest

from tests.fixtures_dir import COUNTS, FIXTURES_DIR, FIXTURES_PRESENT, load_json
from tests.proxy.conftest import StackFactory
from tests.proxy.fake_upstream import Reply
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


def _tool_use(call_id: str, tool_input: Any = None) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": call_id,
        "name": "get_weather",
        "input": {"city": "Paris"} if tool_input is None else tool_input,
    }


def _result(call_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": "sunny"}


def _user(*content: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(content)}


def _assistant(*content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(content)}


ASK = _user({"type": "text", "text": "weather in Paris?"})
TEXT = {"type": "text", "text": "let me check"}

# (case, messages, the rules that may name the refusal). Truncated arguments cannot be
# written: tool_use.input is a JSON object on this wire.
TABLE: list[tuple[str, list[dict[str, Any]], set[str]]] = [
    ("orphaned result", [ASK, _assistant(TEXT), _user(_result("toolu_7"))], {"orphan_result"}),
    (
        "two results for one call",
        [ASK, _assistant(_tool_use("toolu_1")), _user(_result("toolu_1"), _result("toolu_1"))],
        {"duplicate_result"},
    ),
    ("a call waiting for its result", [ASK, _assistant(_tool_use("toolu_1"))], {"missing_result"}),
    (
        "a call never answered before the conversation moves on",
        [ASK, _assistant(_tool_use("toolu_1")), _user({"type": "text", "text": "and?"})],
        {"missing_result"},
    ),
    (
        "duplicate call ids in one turn",
        [
            ASK,
            _assistant(_tool_use("toolu_1"), _tool_use("toolu_1")),
            _user(_result("toolu_1"), _result("toolu_1")),
        ],
        {"duplicate_call_id", "duplicate_result"},
    ),
    (
        "a result after other content in its turn",
        [ASK, _assistant(_tool_use("toolu_1")), _user(TEXT, _result("toolu_1"))],
        {"misplaced_result"},
    ),
    (
        "an unknown block kind",
        [_user({"type": "hologram", "hologram": {}})],
        {"unknown_kind"},
    ),
]


@pytest.mark.parametrize(
    ("messages", "rules"), [pytest.param(m, r, id=name) for name, m, r in TABLE]
)
async def test_invalid_sequences_raise_bad_request_and_send_nothing(
    client: Any, messages: list[dict[str, Any]], rules: set[str]
):
    tools = [{"name": "get_weather", "input_schema": {"type": "object"}}]
    with pytest.raises(anthropic.BadRequestError) as raised:
        await call(
            client.mode,
            client.messages.create,
            model="claude-sonnet-4-5",
            max_tokens=64,
            messages=messages,
            tools=tools,
        )
    rule = raised.value.response.headers["Turngate-Rejection"]
    assert rule in rules
    assert raised.value.status_code == 400
    assert rule in str(raised.value)
    assert client.stack.upstream.received == []
    COUNTS["SDK refusals with zero upstream sends (anthropic)"] += 1
