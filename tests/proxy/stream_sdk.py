"""The official SDKs' streaming APIs over a real socket: what a client ends up with.

Each reader points the SDK at ``base`` (turngate, or the fake provider directly), sends the
recorded request and returns the final message (text, tool calls with parsed arguments,
usage) or the exception the SDK raised. The readers are sync: tests run them in a thread
while turngate serves in the test's loop.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import orjson
from google import genai
from google.genai import types as genai_types
from openai.lib.streaming.chat import ChatCompletionStreamState

from tests.adapters.test_stream_encoders import Reading
from tests.proxy.sdk_support import sdk_kwargs

# Where each SDK's base URL points, relative to turngate or to the provider itself.
PROXY_BASES = {
    "openai_chat": "/openai/v1",
    "openai_responses": "/openai/v1",
    "anthropic": "/anthropic",
    "gemini": "/gemini",
}
DIRECT_BASES = {"openai_chat": "/v1", "openai_responses": "/v1", "anthropic": "", "gemini": ""}


def read(
    api: str, base: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Reading:
    reading = Reading()
    with warnings.catch_warnings():
        # openai's own models warn while serialising some hosted-tool items; the same with or
        # without turngate.
        warnings.filterwarnings("ignore", "Pydantic serializer warnings", UserWarning)
        # The recorded requests name models the SDK now calls deprecated.
        warnings.filterwarnings("ignore", "The model .* is deprecated", DeprecationWarning)
        try:
            READERS[api](base, body, headers or {}, reading)
        except Exception as exc:  # every SDK exception type is the point here
            reading.error = exc
    return reading


def _without_stream(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "stream"}


def _read_chat(base: str, body: dict[str, Any], headers: dict[str, str], out: Reading) -> None:
    client = openai.OpenAI(api_key="k", base_url=base, max_retries=0, default_headers=headers)
    create = client.chat.completions.create
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    with client:
        for chunk in create(**sdk_kwargs(create, {**body, "stream": True})):
            if chunk.usage is not None:
                out.usage = chunk.usage.model_dump()
            if chunk.choices:
                state.handle_chunk(chunk)
    message = state.get_final_completion().choices[0].message
    out.text = message.content or ""
    for call in message.tool_calls or []:
        function = call.function
        out.calls.append((call.id, function.name, orjson.loads(function.arguments)))


def _read_responses(base: str, body: dict[str, Any], headers: dict[str, str], out: Reading) -> None:
    client = openai.OpenAI(api_key="k", base_url=base, max_retries=0, default_headers=headers)
    stream = client.responses.stream
    with client, stream(**sdk_kwargs(stream, _without_stream(body))) as events:
        response = events.get_final_response()
    out.text = response.output_text
    for item in response.output:
        if item.type == "function_call":
            out.calls.append((item.call_id, item.name, orjson.loads(item.arguments)))
    out.usage = response.usage.model_dump() if response.usage else None


def _read_anthropic(base: str, body: dict[str, Any], headers: dict[str, str], out: Reading) -> None:
    client = anthropic.Anthropic(api_key="k", base_url=base, max_retries=0, default_headers=headers)
    stream = client.messages.stream
    with client, stream(**sdk_kwargs(stream, _without_stream(body))) as events:
        message = events.get_final_message()
    for block in message.content:
        if block.type == "text":
            out.text += block.text
        elif block.type == "tool_use":
            out.calls.append((block.id, block.name, block.input))
    out.usage = message.usage.model_dump()


def _read_gemini(base: str, body: dict[str, Any], headers: dict[str, str], out: Reading) -> None:
    options = genai_types.HttpOptions(base_url=base, api_version="v1beta", headers=headers)
    client = genai.Client(api_key="k", http_options=options)
    config = genai_types.GenerateContentConfig(
        system_instruction=body.get("systemInstruction"),
        tools=body.get("tools"),
        tool_config=body.get("toolConfig"),
    )
    try:
        chunks = client.models.generate_content_stream(
            model="gemini-test", contents=body["contents"], config=config
        )
        for chunk in chunks:
            if chunk.usage_metadata is not None:
                out.usage = chunk.usage_metadata.model_dump()
            content = chunk.candidates[0].content if chunk.candidates else None
            for part in (content.parts if content else None) or []:
                if part.text and not part.thought:
                    out.text += part.text
                call = part.function_call
                if call is not None and call.name and not call.partial_args:
                    out.calls.append((call.id or "", call.name, call.args or {}))
    finally:
        client.close()


READERS: dict[str, Callable[[str, dict[str, Any], dict[str, str], Reading], None]] = {
    "openai_chat": _read_chat,
    "openai_responses": _read_responses,
    "anthropic": _read_anthropic,
    "gemini": _read_gemini,
}
