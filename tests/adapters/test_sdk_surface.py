"""Every kind the installed official SDKs can put in a request is known to its adapter and
comes back from parse -> render unchanged; every kind their answers declare is known to the
answer's check.

The kinds are read from the SDKs' own types (tests/adapters/sdk_types.py), so a new SDK
release that adds a block, an item, a part or a field fails here, naming it, before an
agent meets a paused conversation (an unknown kind, 409) or a field dropped on the way to
the provider (a cache breakpoint, say). Each kind is tried with its required keys only and
with every key the SDK declares. Gemini's requests are the bytes google-genai itself sends
(to a recording upstream), since its types are snake_case models the SDK converts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from anthropic.types import Message
from anthropic.types.beta import BetaMessage
from anthropic.types.beta.beta_message_param import BetaMessageParam
from anthropic.types.message_param import MessageParam
from google import genai
from google.genai import types as genai_types
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import Response
from openai.types.responses.response_input_param import ResponseInputParam

from tests.adapters.sdk_types import hints, instance, item_kinds, kinds, literal
from tests.proxy.fake_upstream import FakeUpstream, Reply
from tests.proxy.sdk_support import GENAI_AIOHTTP_WARNING
from turngate.adapters import get_adapter
from turngate.graph.model import AnyBlock, MessageSequence, UnknownBlock
from turngate.graph.turn import AssistantTurn

FORMS = {"required keys": False, "every key": True}
# Parts whose required keys alone say nothing usable (an image with no image, a file with no
# file): each gets what the API needs of it besides, by its type.
USABLE = {
    "file": {"file": {"file_id": "file-sdk1", "filename": "a.pdf"}},
    "image_url": {"image_url": {"url": "https://example.com/a.png"}},
    "input_image": {"image_url": "https://example.com/a.png"},
    "input_file": {"file_id": "file-sdk1"},
}
# Chat's deprecated `role: function` is refused by design (docs/sdk-base-urls.md).
REFUSED_CHAT_ROLES = {"function"}


def unknown_kinds(seq: MessageSequence | AssistantTurn) -> list[str]:
    if isinstance(seq, AssistantTurn):
        blocks: list[AnyBlock] = list(seq.blocks)
    else:
        blocks = [block for message in seq.messages for block in message.blocks]
    found = []
    for block in blocks:
        parts = [block, *getattr(block, "content", ())]
        found += [p.native_type for p in parts if isinstance(p, UnknownBlock)]
    return found


def assert_known_and_kept(api: str, body: dict[str, Any]) -> None:
    adapter = get_adapter(api)
    seq = adapter.parse_request(body)
    assert unknown_kinds(seq) == [], f"{api} does not know a kind the SDK sends: {body}"
    assert adapter.render_request(seq) == body, f"{api} changed what the SDK sends: {body}"


def usable(part: dict[str, Any]) -> dict[str, Any]:
    return {**part, **USABLE.get(part.get("type", ""), {})}


def name_of(annotation: Any) -> str:
    return getattr(annotation, "__name__", repr(annotation))


def anthropic_cases() -> Iterator[Any]:
    for union in (MessageParam, BetaMessageParam):
        for message in kinds(union):
            role = literal(message, "role")
            for block in item_kinds(hints(message)["content"]):
                if isinstance(block, type) and not hasattr(block, "model_fields"):
                    yield pytest.param(role, block, id=f"{role}-{name_of(block)}")


@pytest.mark.parametrize("full", FORMS.values(), ids=FORMS.keys())
@pytest.mark.parametrize(("role", "block"), list(anthropic_cases()))
def test_anthropic_blocks(role: str, block: Any, full: bool):
    messages = [] if role == "user" else [{"role": "user", "content": "hi"}]
    messages.append({"role": role, "content": [instance(block, full=full)]})
    body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": messages}
    assert_known_and_kept("anthropic", body)


def responses_cases() -> Iterator[Any]:
    for item in dict.fromkeys(kinds(item_kinds(ResponseInputParam)[0])):
        yield pytest.param(item, None, None, id=name_of(item))
        fields = hints(item)
        for field in ("content", "output"):
            for part in item_kinds(fields[field]) if field in fields else ():
                yield pytest.param(item, field, part, id=f"{name_of(item)}-{name_of(part)}")


@pytest.mark.parametrize("full", FORMS.values(), ids=FORMS.keys())
@pytest.mark.parametrize(("item", "field", "part"), list(responses_cases()))
def test_responses_items(item: Any, field: str | None, part: Any, full: bool):
    value = instance(item, full=full)
    if field is not None:
        value[field] = [usable(instance(part, full=full))]
    body = {"model": "gpt-5", "input": [{"role": "user", "content": "hi"}, value]}
    assert_known_and_kept("openai_responses", body)


CALL = {"id": "call_sdk_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}


def chat_cases() -> Iterator[Any]:
    for message in kinds(ChatCompletionMessageParam):
        role = literal(message, "role")
        if role in REFUSED_CHAT_ROLES:
            continue
        yield pytest.param(message, None, id=role)
        for part in item_kinds(hints(message)["content"]):
            yield pytest.param(message, part, id=f"{role}-{name_of(part)}")


@pytest.mark.parametrize("full", FORMS.values(), ids=FORMS.keys())
@pytest.mark.parametrize(("message", "part"), list(chat_cases()))
def test_chat_messages(message: Any, part: Any, full: bool):
    value = instance(message, full=full)
    value.pop("function_call", None)  # deprecated, refused (REFUSED_CHAT_ROLES)
    if part is not None:
        value["content"] = [usable(instance(part, full=full))]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    if value["role"] in ("assistant", "tool"):
        # A call for the result to answer, or the assistant's own.
        messages.append({"role": "assistant", "content": None, "tool_calls": [CALL]})
    if value["role"] == "assistant":
        value["tool_calls"] = [CALL]
        messages.append({"role": "tool", "tool_call_id": "call_sdk_1", "content": "ok"})
        messages.pop(1)
    messages.insert(2 if value["role"] == "tool" else 1, value)
    assert_known_and_kept("openai_chat", {"model": "gpt-4o", "messages": messages})


def test_chat_function_role_is_the_one_refused():
    roles = {literal(message, "role") for message in kinds(ChatCompletionMessageParam)}
    assert roles >= REFUSED_CHAT_ROLES  # still an SDK role: still worth saying it is refused
    body = {"model": "gpt-4o", "messages": [{"role": "function", "name": "f", "content": "x"}]}
    assert unknown_kinds(get_adapter("openai_chat").parse_request(body)) == ["role:function"]


# A Part holds one piece of data; its other fields describe that data. Each data field
# gets what the API needs of it (the SDK's types make every key optional); every other
# field, a new one included, is sent on a part whose data it can describe.
GEMINI_DATA = {
    "text": "x",
    "inline_data": {"mime_type": "image/png", "data": "ZGF0YQ=="},
    "file_data": {"file_uri": "https://example.com/a.mp4", "mime_type": "video/mp4"},
    "function_call": {"name": "lookup", "args": {}},
    "function_response": {"name": "lookup", "response": {}},
    "executable_code": {},
    "code_execution_result": {},
    "tool_call": {},
    "tool_response": {},
}
ON_TEXT = {"speech_metadata", "thought", "thought_signature", "part_metadata"}
MODEL_TURN_FIELDS = {"function_call", "executable_code", "tool_call", "thought"}
# Vertex AI only (partial_args); the Developer API client refuses it before sending.
VERTEX_ONLY = {("function_call", True)}
ANSWER = {"candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]}}]}


def gemini_part(field: str, full: bool) -> dict[str, Any]:
    """The Part to send for ``field``, in the SDK's own (snake_case) terms."""
    annotation = genai_types.Part.model_fields[field].annotation
    value = instance(annotation, full=full and (field, full) not in VERTEX_ONLY, key=field)
    if field in GEMINI_DATA:
        usable = GEMINI_DATA[field]
        if isinstance(value, dict):
            value = {**usable, **value}
            for nested in value.get("parts", []):
                nested.pop("file_data", None)  # a response's part holds one of the two
        return {field: value}
    data = "text" if field in ON_TEXT else "file_data"
    return {data: GEMINI_DATA[data], field: value}


@GENAI_AIOHTTP_WARNING
@pytest.mark.parametrize("full", FORMS.values(), ids=FORMS.keys())
@pytest.mark.parametrize("field", list(genai_types.Part.model_fields))
async def test_gemini_parts(aiohttp_server: Any, field: str, full: bool):
    upstream = FakeUpstream()
    upstream.reply(Reply.json(ANSWER))
    server = await aiohttp_server(upstream.app())
    client = genai.Client(
        api_key="k", http_options=genai_types.HttpOptions(base_url=str(server.make_url("")))
    )
    part = genai_types.Part.model_validate(gemini_part(field, full))
    role = "model" if field in MODEL_TURN_FIELDS else "user"
    contents = [
        genai_types.Content(role="user", parts=[genai_types.Part(text="hi")]),
        genai_types.Content(role=role, parts=[part]),
    ]
    await client.aio.models.generate_content(model="gemini-2.5-flash", contents=contents)
    await client.aio.aclose()
    (received,) = upstream.received
    sent = received.json()
    assert len(sent["contents"][1]["parts"][0]) >= 1, f"the SDK sent no part for {field}"
    assert_known_and_kept("gemini", sent)


def answer_cases() -> Iterator[Any]:
    for message in (Message, BetaMessage):
        for block in item_kinds(message.model_fields["content"].annotation):
            yield pytest.param("anthropic", block, id=f"anthropic-{name_of(block)}")
    for item in item_kinds(Response.model_fields["output"].annotation):
        yield pytest.param("openai_responses", item, id=f"responses-{name_of(item)}")


ANSWERS = {
    "anthropic": {
        "id": "msg_sdk1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    },
    "openai_responses": {
        "id": "resp_sdk1",
        "object": "response",
        "created_at": 1,
        "model": "gpt-5",
        "status": "completed",
    },
}


@pytest.mark.parametrize("full", FORMS.values(), ids=FORMS.keys())
@pytest.mark.parametrize(("api", "kind"), list(answer_cases()))
def test_answer_kinds(api: str, kind: Any, full: bool):
    value = instance(kind, full=full)
    if "call_id" in kind.model_fields:
        value["call_id"] = "call_sdk_1"  # declared optional; what ties an output to its call
    field = "content" if api == "anthropic" else "output"
    turn = get_adapter(api).parse_response({**ANSWERS[api], field: [value]})
    assert unknown_kinds(turn) == [], f"{api} answers with a kind turngate does not know: {value}"
