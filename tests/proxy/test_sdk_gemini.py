"""The official google-genai SDK (sync and async) after a base-URL swap to /gemini."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from google import genai
from google.genai import errors, types

from tests.adapters.test_gemini_rules import TABLE
from tests.fixtures_dir import COUNTS, FIXTURES_DIR, FIXTURES_PRESENT, load_json
from tests.proxy.conftest import StackFactory
from tests.proxy.fake_upstream import Reply
from tests.proxy.sdk_support import GENAI_AIOHTTP_WARNING, MODES, call, consume, requires_adapter
from tests.proxy.stack import GEMINI_KEY, Stack

pytestmark = [
    pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT"),
    requires_adapter("gemini"),
    GENAI_AIOHTTP_WARNING,
]

# (answer file, model in the recorded URL)
CONVERSATIONS = [
    ("gemini/pai-function-call-turn3.sse", "gemini-2.0-flash"),
    ("gemini/pai-function-call-thought-signature-turn2.sse", "gemini-3-pro-preview"),
    ("gemini/pai-nonstream-after-3-function-responses.json", "gemini-3-flash-preview"),
]


@pytest.fixture(params=MODES)
async def client(request: pytest.FixtureRequest, make_stack: StackFactory) -> AsyncIterator[Any]:
    stack = await make_stack(record_bodies=True)
    # Keep a reference: a collected genai.Client closes its HTTP client.
    sdk = genai.Client(
        api_key=GEMINI_KEY,
        http_options=types.HttpOptions(base_url=stack.base("/gemini"), api_version="v1beta"),
    )
    sdk.stack, sdk.mode = stack, request.param  # type: ignore[attr-defined]
    sdk.models_api = sdk.models if request.param == "sync" else sdk.aio.models  # type: ignore[attr-defined]
    yield sdk
    await call(request.param, sdk.close if request.param == "sync" else sdk.aio.aclose)


def config_of(request: dict[str, Any]) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(
        system_instruction=request.get("systemInstruction"),
        tools=request.get("tools"),
        tool_config=request.get("toolConfig"),
    )


@pytest.mark.parametrize(("answer", "model"), CONVERSATIONS)
async def test_tool_conversations_pass_through(client: Any, answer: str, model: str):
    stack: Stack = client.stack
    stack.upstream.reply(Reply.fixture(answer))
    request = load_json(
        FIXTURES_DIR / answer.replace(answer[answer.rindex(".") :], ".request.json")
    )
    assert isinstance(request, dict)
    models = client.models_api
    kwargs = {"model": model, "contents": request["contents"], "config": config_of(request)}
    if answer.endswith(".sse"):
        stream = await call(client.mode, models.generate_content_stream, **kwargs)
        chunks = await consume(client.mode, stream)
        assert len(chunks) == (FIXTURES_DIR / answer).read_bytes().count(b"data: ")
    else:
        result = await call(client.mode, models.generate_content, **kwargs)
        expected = load_json(FIXTURES_DIR / answer)
        assert result.response_id == expected["responseId"]  # type: ignore[index]
    (received,) = stack.upstream.received
    (client_body,) = stack.client_bodies
    assert received.body == client_body
    sent = received.json()
    assert sent["contents"] == request["contents"]
    assert sent["tools"] == request["tools"]
    assert received.headers["x-goog-api-key"] == GEMINI_KEY
    kind = "streamGenerateContent?alt=sse" if answer.endswith(".sse") else "generateContent"
    assert received.path_qs == f"/v1beta/models/{model}:{kind}"
    COUNTS["SDK conversations through turngate (gemini)"] += 1


async def send_raw(client: Any, body: dict[str, Any], model: str) -> Any:
    """``body``'s fields sent as they are: the SDK's own types refuse some shapes before
    sending (an unknown part kind), so they go in through extra_body, its way to send raw
    fields."""
    raw = types.HttpOptions(extra_body=body)
    return await call(
        client.mode,
        client.models_api.generate_content,
        model=model,
        contents="placeholder",
        config=types.GenerateContentConfig(http_options=raw),
    )


@pytest.mark.parametrize(
    ("request_body", "rules"),
    [pytest.param(b, r, id=name) for name, b, _status, r in TABLE],
)
async def test_invalid_sequences_raise_client_error_and_send_nothing(
    client: Any, request_body: dict[str, Any], rules: set[str]
):
    with pytest.raises(errors.ClientError) as raised:
        await send_raw(client, request_body, "gemini-2.5-flash")
    assert raised.value.code == 400
    rule = raised.value.response.headers["Turngate-Rejection"]
    assert rule in rules
    assert rule in str(raised.value)
    assert client.stack.upstream.received == []
    COUNTS["SDK refusals with zero upstream sends (gemini)"] += 1


async def test_a_gemini_3_call_sent_back_without_its_signature_is_refused(client: Any):
    # The history an application rebuilds from its own records, dropping the part's
    # thoughtSignature: Gemini 3 would answer 400; turngate says so before sending.
    request = load_json(
        FIXTURES_DIR / "gemini/pai-nonstream-after-3-function-responses.request.json"
    )
    assert isinstance(request, dict)
    contents = [
        {
            **content,
            "parts": [
                {k: v for k, v in part.items() if k != "thoughtSignature"}
                for part in content["parts"]
            ],
        }
        for content in request["contents"]
    ]
    with pytest.raises(errors.ClientError) as raised:
        await call(
            client.mode,
            client.models_api.generate_content,
            model="gemini-3-flash-preview",
            contents=contents,
            config=config_of(request),
        )
    assert raised.value.code == 400
    assert raised.value.response.headers["Turngate-Rejection"] == "gemini_thought_signature"
    assert "missing a thought_signature" in str(raised.value)
    assert client.stack.upstream.received == []


async def test_roles_the_api_now_takes_go_up_as_spelled(client: Any):
    # Since 2026 the API lists ASSISTANT, SYSTEM and DEVELOPER among its valid roles (its
    # refusal of role 'function': sashiko PR #500). A client that writes them is not refused.
    stack: Stack = client.stack
    answer = "gemini/pai-nonstream-after-3-function-responses.json"
    stack.upstream.reply(Reply.fixture(answer))
    contents = [
        {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
        {"role": "assistant", "parts": [{"functionCall": {"name": "weather", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "weather", "response": {}}}]},
        {"role": "developer", "parts": [{"text": "Answer in one line."}]},
        {"role": "assistant", "parts": [{"text": "Sunny, 18C."}]},
        {"role": "user", "parts": [{"text": "And tomorrow?"}]},
    ]
    tools = [{"functionDeclarations": [{"name": "weather"}, {"name": "generate_topic"}]}]
    await send_raw(client, {"contents": contents, "tools": tools}, "gemini-3-flash-preview")
    (received,) = stack.upstream.received
    assert received.json()["contents"] == contents
