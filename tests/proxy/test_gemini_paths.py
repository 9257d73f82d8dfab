"""Every path google-genai sends a chat request on is checked, not only ``v1beta/models``.

An SDK set to another API version (``v1alpha``, ``v1``), a tuned model, or Vertex AI (its
``v1beta1`` paths, with or without a project) builds a different URL for the same
``generateContent`` body. Relayed unparsed, an invalid sequence would reach the provider.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from google import genai
from google.genai import errors, types

from tests.fixtures_dir import FIXTURES_DIR, FIXTURES_PRESENT, load_json
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import post
from tests.proxy.sdk_support import GENAI_AIOHTTP_WARNING, call, consume
from tests.proxy.stack import GEMINI_KEY, Stack

pytestmark = [
    pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT"),
    GENAI_AIOHTTP_WARNING,
]

ANSWER = "gemini/pai-function-call-turn1.sse"

# (client settings, model as the application names it, the path the upstream must receive)
CLIENTS = [
    pytest.param(
        {"api_version": "v1alpha"},
        "gemini-2.0-flash",
        "/v1alpha/models/gemini-2.0-flash",
        id="v1alpha",
    ),
    pytest.param({"api_version": "v1"}, "gemini-2.0-flash", "/v1/models/gemini-2.0-flash", id="v1"),
    pytest.param(
        {"api_version": "v1beta"},
        "tunedModels/support-bot-7",
        "/v1beta/tunedModels/support-bot-7",
        id="tuned-model",
    ),
    pytest.param(
        {"vertexai": True},
        "gemini-2.0-flash",
        "/v1beta1/publishers/google/models/gemini-2.0-flash",
        id="vertex-express",
    ),
    pytest.param(
        {"vertexai": True, "project": "acme-agents", "location": "us-central1"},
        "gemini-2.0-flash",
        "/v1beta1/projects/acme-agents/locations/us-central1/publishers/google/models/"
        "gemini-2.0-flash",
        id="vertex-project",
    ),
]


class _Token:
    """What google-genai asks of Vertex credentials: a valid bearer token."""

    token = "vertex-test-token"
    valid = True
    expired = False
    quota_project_id = None

    def refresh(self, _request: Any) -> None:
        return None


def sdk_for(stack: Stack, settings: dict[str, Any]) -> genai.Client:
    options = types.HttpOptions(
        base_url=stack.base("/gemini"), api_version=settings.get("api_version")
    )
    if settings.get("vertexai") and "project" in settings:
        return genai.Client(
            vertexai=True,
            project=settings["project"],
            location=settings["location"],
            credentials=_Token(),  # type: ignore[arg-type]
            http_options=options,
        )
    return genai.Client(vertexai=settings.get("vertexai"), api_key=GEMINI_KEY, http_options=options)


@pytest.mark.parametrize(("settings", "model", "path"), CLIENTS)
async def test_an_invalid_sequence_is_refused_on_every_sdk_path(
    stack: Stack, settings: dict[str, Any], model: str, path: str
):
    sdk = sdk_for(stack, settings)
    orphan = {
        "contents": [
            {"role": "user", "parts": [{"text": "What is the weather?"}]},
            {
                "role": "user",
                "parts": [{"functionResponse": {"name": "get_weather", "response": {"t": 9}}}],
            },
        ]
    }
    raw = types.HttpOptions(extra_body=orphan)
    with pytest.raises(errors.ClientError) as raised:
        await sdk.aio.models.generate_content(
            model=model,
            contents="placeholder",
            config=types.GenerateContentConfig(http_options=raw),
        )
    assert raised.value.code == 400
    assert raised.value.response.headers["Turngate-Rejection"] == "orphan_result"
    assert stack.upstream.received == []
    await sdk.aio.aclose()


@pytest.mark.parametrize(("settings", "model", "path"), CLIENTS)
async def test_a_valid_tool_conversation_streams_on_every_sdk_path(
    stack: Stack, settings: dict[str, Any], model: str, path: str
):
    sdk = sdk_for(stack, settings)
    stack.upstream.reply(Reply.fixture(ANSWER))
    request = load_json(FIXTURES_DIR / ANSWER.replace(".sse", ".request.json"))
    assert isinstance(request, dict)
    config = types.GenerateContentConfig(tools=request["tools"])
    stream = await call(
        "async",
        sdk.aio.models.generate_content_stream,
        model=model,
        contents=request["contents"],
        config=config,
    )
    chunks = await consume("async", stream)
    calls = [c for chunk in chunks for c in chunk.function_calls or []]
    assert calls, "the recorded answer's function call reached the application"
    (received,) = stack.upstream.received
    assert received.path_qs == f"{path}:streamGenerateContent?alt=sse"
    assert received.json()["contents"] == request["contents"]
    # Parsed into the graph and sent under a manifest: the stamped key an unparsed relay
    # never carries.
    assert received.headers["Idempotency-Key"]
    await sdk.aio.aclose()


async def test_a_stream_asked_without_alt_sse_is_refused_before_it_is_sent(stack: Stack):
    # Without ?alt=sse Gemini streams one JSON array as it grows; turngate relays streams as
    # server-sent events only (google-genai always asks for them). Relayed, the client got
    # a broken body after the provider had been paid for the answer.
    body = {"contents": [{"role": "user", "parts": [{"text": "Hello"}]}]}
    status, headers, answer = await post(
        stack, "/gemini/v1beta/models/gemini-2.5-flash:streamGenerateContent", body
    )
    assert (status, headers["Turngate-Rejection"]) == (400, "invalid_request")
    assert "alt=sse" in orjson.loads(answer)["error"]["message"]
    assert stack.upstream.received == []


@pytest.mark.parametrize(("settings", "model", "path"), CLIENTS)
async def test_a_forced_call_without_functions_is_refused_on_the_gemini_api_only(
    stack: Stack, settings: dict[str, Any], model: str, path: str
):
    """inspect_ai #2462 (and pydantic-ai PR #5791): a search-only request with a
    function-calling config, to Gemini 2.x on the Gemini API ("Function calling config is
    set without function_declarations."), is refused. Vertex AI takes it, so its paths relay
    it; so does a tuned model, whose id does not say its family."""
    sdk = sdk_for(stack, settings)
    forced = types.ToolConfig(
        function_calling_config=types.FunctionCallingConfig(
            mode=types.FunctionCallingConfigMode.ANY
        )
    )
    search = types.Tool(google_search=types.GoogleSearch())
    config = types.GenerateContentConfig(tools=[search], tool_config=forced)
    text = {"role": "model", "parts": [{"text": "Searched."}]}
    stack.upstream.reply(Reply.json({"candidates": [{"content": text, "finishReason": "STOP"}]}))
    ask = "What happened in Lyon today?"
    if settings.get("vertexai") or not model.startswith("gemini-2"):
        await sdk.aio.models.generate_content(model=model, contents=ask, config=config)
        (received,) = stack.upstream.received
        assert received.path_qs == f"{path}:generateContent"
    else:
        with pytest.raises(errors.ClientError) as raised:
            await sdk.aio.models.generate_content(model=model, contents=ask, config=config)
        assert raised.value.response.headers["Turngate-Rejection"] == "gemini_function_config"
        assert "set without function_declarations" in str(raised.value.message)
        assert stack.upstream.received == []
    await sdk.aio.aclose()


@pytest.mark.parametrize(("settings", "model", "path"), CLIENTS)
async def test_an_output_limit_past_the_models_is_refused_on_vertex_only(
    stack: Stack, settings: dict[str, Any], model: str, path: str
):
    """A maxOutputTokens kept from Gemini 2.5 (65,536) sent to Gemini 2.0 Flash (8,192):
    Vertex AI refuses it ("Unable to submit request because it has a maxOutputTokens value
    of 65536 but the supported range is from 1 (inclusive) to 8193 (exclusive)."), so
    turngate refuses it on Vertex's paths; the Gemini API writes up to the model's limit
    instead, so its paths relay it, as they do a tuned model's."""
    sdk = sdk_for(stack, settings)
    config = types.GenerateContentConfig(max_output_tokens=65536)
    text = {"role": "model", "parts": [{"text": "Done."}]}
    stack.upstream.reply(Reply.json({"candidates": [{"content": text, "finishReason": "STOP"}]}))
    if settings.get("vertexai"):
        with pytest.raises(errors.ClientError) as raised:
            await sdk.aio.models.generate_content(model=model, contents="Summarise.", config=config)
        assert raised.value.response.headers["Turngate-Rejection"] == "gemini_max_output"
        assert "from 1 (inclusive) to 8193 (exclusive)" in str(raised.value.message)
        assert stack.upstream.received == []
    else:
        await sdk.aio.models.generate_content(model=model, contents="Summarise.", config=config)
        (received,) = stack.upstream.received
        assert received.json()["generationConfig"]["maxOutputTokens"] == 65536
    await sdk.aio.aclose()


@pytest.mark.parametrize(("settings", "model", "path"), CLIENTS)
async def test_additional_properties_is_refused_on_the_gemini_api_only(
    stack: Stack, settings: dict[str, Any], model: str, path: str
):
    """A function whose parameters close their object (``additionalProperties: false``, what
    a strict-minded converter writes): the Gemini API has no such field in its schema ("Unknown
    name "additionalProperties" at 'tools[0].function_declarations[0].parameters': Cannot find
    field.", openswarm #24; the SDK refuses a true one itself), so turngate refuses it on the
    Gemini API's paths, in either spelling; Vertex AI's schema has the field, so its paths
    relay it."""
    sdk = sdk_for(stack, settings)
    closed = types.Schema(
        type=types.Type.OBJECT,
        properties={"city": types.Schema(type=types.Type.STRING)},
        additional_properties=False,
    )
    weather = types.FunctionDeclaration(name="get_weather", parameters=closed)
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[weather])])
    text = {"role": "model", "parts": [{"text": "Sunny."}]}
    stack.upstream.reply(Reply.json({"candidates": [{"content": text, "finishReason": "STOP"}]}))
    ask = "Weather in Lyon?"
    if settings.get("vertexai"):
        await sdk.aio.models.generate_content(model=model, contents=ask, config=config)
        (received,) = stack.upstream.received
        sent = received.json()["tools"][0]["functionDeclarations"][0]["parameters"]
        assert sent["additional_properties"] is False
    else:
        with pytest.raises(errors.ClientError) as raised:
            await sdk.aio.models.generate_content(model=model, contents=ask, config=config)
        assert raised.value.response.headers["Turngate-Rejection"] == "gemini_schema_field"
        message = str(raised.value.message)
        # The SDK writes the field as the protocol names it.
        assert 'Unknown name "additional_properties" at \'tools[0].function_declarations[0]' in (
            message
        )
        assert "get_weather" in message
        assert stack.upstream.received == []
    await sdk.aio.aclose()
