"""Refusals that say the fix, as each official SDK shows them: a message under a role another
API uses (OpenAI's ``tool`` sent to Anthropic, Gemini's ``model`` sent to OpenAI), and a
call or output whose fields have the wrong JSON type (arguments sent as an object). The
Gemini role case is tests/proxy/test_field_failures.py's ``test_inspect_ai_2377_…``."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from tests.proxy.conftest import StackFactory
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import anthropic_sdk, genai_raw, genai_sdk, openai_sdk
from tests.proxy.sdk_support import GENAI_AIOHTTP_WARNING

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}


def assert_refused(error: Exception, stack: Any, where: str, kind: str, fix: str) -> None:
    message = str(error)
    assert "unknown_kind" in message, message
    assert kind in message, message
    assert where in message, message
    assert fix in message, message
    assert stack.upstream.received == []


async def test_anthropic_tool_output_under_role_tool_is_told_to_use_tool_result_blocks(
    make_stack: StackFactory,
):
    stack = await make_stack()
    messages: Any = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"},
    ]
    async with anthropic_sdk(stack) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.messages.create(
                model="claude-sonnet-4-5", max_tokens=64, messages=messages
            )
    fix = "send tool output as tool_result blocks (the call's tool_use_id) in a user message"
    assert_refused(caught.value, stack, "messages[2]", "role:tool", fix)


async def test_chat_turns_under_gemini_role_model_are_told_to_use_assistant(
    make_stack: StackFactory,
):
    stack = await make_stack()
    messages: Any = [
        {"role": "user", "content": "Hello"},
        {"role": "model", "content": "Hi, how can I help?"},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="gpt-4o", messages=messages)
    assert_refused(
        caught.value, stack, "messages[1]", "role:model", "the model's turns are role assistant"
    )


async def test_a_history_carried_over_from_another_api_is_told_what_chat_takes_instead(
    make_stack: StackFactory,
):
    """A conversation begun with Claude (its thinking and image blocks kept) or Gemini (a
    functionCall part) and continued with an OpenAI model: OpenAI refuses the part ("Invalid
    value: 'thinking'. Supported values are: 'text', 'image_url', …", reported by agent
    frameworks on every model switch). Each part is named with what Chat takes instead."""
    stack = await make_stack()
    png = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
    carried: list[tuple[dict[str, Any], str, str]] = [
        (
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "Paris is warm."}]},
            "'messages[1].content[0].type'",
            "Chat takes no reasoning back in its history: leave it out",
        ),
        (
            {"role": "user", "content": [{"type": "image", "source": png}]},
            "'messages[1].content[0].type'",
            'send it as {"type": "image_url", "image_url": {"url": ...}}',
        ),
        (
            {"role": "assistant", "content": [{"type": "functionCall", "functionCall": {}}]},
            "'messages[1].content[0].type'",
            "send a call in the assistant message's tool_calls",
        ),
    ]
    async with openai_sdk(stack) as client:
        for message, param, fix in carried:
            kind = message["content"][0]["type"]
            messages: Any = [{"role": "user", "content": "Weather in Paris?"}, message]
            with pytest.raises(openai.BadRequestError) as caught:
                await client.chat.completions.create(model="gpt-4o", messages=messages)
            assert_refused(caught.value, stack, param, f"Invalid value: '{kind}'.", fix)


async def test_chat_output_under_the_deprecated_function_role_is_told_to_use_a_tool_message(
    make_stack: StackFactory,
):
    stack = await make_stack()
    messages: Any = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "function", "name": "get_weather", "content": "18C"},
    ]
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="gpt-4o", messages=messages)
    fix = "send tool output as a tool message with the call's tool_call_id"
    assert_refused(caught.value, stack, "messages[2]", "role:function", fix)


async def test_responses_tool_output_as_a_tool_message_is_told_to_use_function_call_output(
    make_stack: StackFactory,
):
    stack = await make_stack()
    items: Any = [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
    ]
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(model="gpt-5", input=items)
    fix = "send tool output as a function_call_output item with the call's call_id"
    assert_refused(caught.value, stack, "input[2]", "role:tool", fix)


async def test_chat_arguments_sent_as_an_object_are_told_to_send_a_json_string(
    make_stack: StackFactory,
):
    stack = await make_stack()
    call = {**CALL, "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    messages: Any = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
    ]
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="gpt-4o", messages=messages)
    fix = 'OpenAI: "expected a string, but got an object instead" (send json.dumps'
    assert_refused(caught.value, stack, "messages[1]", "function.arguments must be a string", fix)


@pytest.mark.parametrize(
    ("item", "where", "fix"),
    [
        pytest.param(
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": {}},
            "input[1]",
            "arguments must be a string, not a JSON object",
            id="arguments",
        ),
        pytest.param(
            {"type": "function_call_output", "call_id": "call_1", "output": {"t": 18}},
            "input[2]",
            "output must be a string or a list of input parts, not a JSON object",
            id="output",
        ),
    ],
)
async def test_responses_items_with_fields_of_the_wrong_type_say_which(
    make_stack: StackFactory, item: dict[str, Any], where: str, fix: str
):
    stack = await make_stack()
    call = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "call_1", "output": "18C"}
    items: Any = [
        {"role": "user", "content": "Weather in Paris?"},
        item if item["type"] == "function_call" else call,
        item if item["type"] == "function_call_output" else output,
    ]
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(model="gpt-5", input=items)
    assert_refused(caught.value, stack, where, "(malformed)", fix)


@GENAI_AIOHTTP_WARNING
async def test_gemini_responses_with_no_name_are_told_to_carry_their_calls_name(
    make_stack: StackFactory,
):
    """A converter that keeps only a call's id (langflow, an Ollama Gemini proxy) sends the
    functionResponse with no name; Gemini answers "function_response.name: Name cannot be
    empty". turngate refuses it in those words, without a second finding about its role."""
    stack = await make_stack()
    call = genai_types.Part.from_function_call(name="edit_personality", args={"tone": "warm"})
    answer = genai_types.Part(function_response=genai_types.FunctionResponse(response={"ok": 1}))
    contents = [
        genai_types.Content(role="user", parts=[genai_types.Part(text="Be warmer")]),
        genai_types.Content(role="model", parts=[call]),
        genai_types.Content(role="user", parts=[answer]),
    ]
    client = genai_sdk(stack)
    with pytest.raises(genai_errors.ClientError) as caught:
        await client.aio.models.generate_content(model="gemini-2.5-flash", contents=contents)
    await client.aio.aclose()
    fix = 'Gemini: "function_response.name: Name cannot be empty."'
    assert_refused(caught.value, stack, "contents[2]", "functionResponse (malformed)", fix)
    assert "scope_crossing" not in str(caught.value)


@GENAI_AIOHTTP_WARNING
async def test_gemini_parts_kept_in_another_apis_shape_are_told_to_leave_type_out(
    make_stack: StackFactory,
):
    """A history converted from Chat or Anthropic keeps each part's discriminator
    (``{"type": "text", "text": …}``); Gemini's Part has no such field and fails the request
    ("Unknown name "type" at 'contents[0].parts[0]': Cannot find field."). The SDK's own
    types refuse the field; REST clients send it, so the contents go in raw."""
    stack = await make_stack()
    raw = [{"role": "user", "parts": [{"type": "text", "text": "Weather in Paris?"}]}]
    with pytest.raises(genai_errors.ClientError) as caught:
        await genai_raw(stack, {"contents": raw})
    fix = '(leave "type" out: {"text": ...}'
    assert_refused(caught.value, stack, "contents[0]", "part:text+type", fix)


async def test_a_history_carried_over_to_claude_is_told_what_anthropic_takes_instead(
    make_stack: StackFactory,
):
    """OpenAI-shaped blocks kept when a conversation moves to Claude (an image pasted as
    image_url, a screenshot a tool returned so, Responses' input_text): Anthropic answers
    "messages.12.content.1: Input tag 'image_url' found using 'type' does not match any of the
    expected tags: 'document', 'image', …" (OpenWebUI pipes, agent gateways). Each block is
    named with what Anthropic takes instead."""
    stack = await make_stack()
    pasted = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    call = {"type": "tool_use", "id": "toolu_1", "name": "screenshot", "input": {}}
    carried: list[tuple[list[Any], str, str, str]] = [
        (
            [{"role": "user", "content": [pasted, {"type": "text", "text": "What is this?"}]}],
            "messages[0]",
            "image_url",
            'send it as {"type": "image", "source": {"type": "base64", ...}',
        ),
        (
            [
                {"role": "user", "content": "Take a screenshot."},
                {"role": "assistant", "content": [call]},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [pasted]}
                    ],
                },
            ],
            "messages[2]",
            "image_url",
            'send it as {"type": "image", "source": {"type": "base64", ...}',
        ),
        (
            [{"role": "user", "content": [{"type": "input_text", "text": "Hello"}]}],
            "messages[0]",
            "input_text",
            "type it 'text'",
        ),
    ]
    async with anthropic_sdk(stack) as client:
        for messages, where, kind, fix in carried:
            with pytest.raises(anthropic.BadRequestError) as caught:
                await client.messages.create(
                    model="claude-sonnet-4-5", max_tokens=64, messages=messages
                )
            quoted = f"Input tag '{kind}' found using 'type' does not match any of the expected"
            assert_refused(caught.value, stack, where, quoted, fix)


async def test_a_claude_history_sent_to_responses_is_told_which_item_carries_each_block(
    make_stack: StackFactory,
):
    stack = await make_stack()
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
    items: Any = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [call]},
    ]
    async with openai_sdk(stack) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(model="gpt-5", input=items)
    quoted = "Invalid value: 'tool_use'. Supported values are: 'output_text' and 'refusal'."
    assert_refused(caught.value, stack, "input[1]", quoted, "send a call as a function_call item")


@GENAI_AIOHTTP_WARNING
async def test_gemini_fields_in_the_wrong_place_are_told_where_they_go(make_stack: StackFactory):
    """Settings a REST client put where Gemini has no such field (safety settings inside
    generationConfig, a flat thinkingLevel as the Interactions API takes it, a temperature at
    the top level): Gemini fails the request ("Unknown name "safetySettings" at
    'generation_config': Cannot find field."). Each is refused before sending, with where it
    goes; the same settings where Gemini reads them go up."""
    stack = await make_stack()
    misplaced: list[tuple[dict[str, Any], str]] = [
        (
            {"generationConfig": {"safetySettings": []}},
            'Unknown name "safetySettings" at \'generation_config\': Cannot find field." '
            "(move it to the request's top level)",
        ),
        (
            {"generationConfig": {"thinkingLevel": "low"}},
            "(move it into generationConfig.thinkingConfig)",
        ),
        (
            {"temperature": 0.2},
            'Unknown name "temperature": Cannot find field." (move it into generationConfig)',
        ),
    ]

    async def ask(extra: dict[str, Any]) -> None:
        await genai_raw(stack, extra, model="gemini-3-flash-preview", ask="Weather in Paris?")

    for extra, words in misplaced:
        with pytest.raises(genai_errors.ClientError) as caught:
            await ask(extra)
        message = str(caught.value.message)
        assert "gemini_misplaced_field" in message
        assert words in message
    assert stack.upstream.received == []
    text = {"role": "model", "parts": [{"text": "Sunny."}]}
    stack.upstream.reply(Reply.json({"candidates": [{"content": text, "finishReason": "STOP"}]}))
    placed = {
        "safetySettings": [],
        "generationConfig": {"thinkingConfig": {"thinkingLevel": "low"}, "temperature": 0.2},
    }
    await ask(placed)
    (received,) = stack.upstream.received
    assert received.json()["generationConfig"]["thinkingConfig"] == {"thinkingLevel": "low"}
