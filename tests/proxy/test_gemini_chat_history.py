"""google-genai's chat keeps every streamed turn that went through turngate.

``chat.send_message_stream`` records a turn in the history it sends next only if every chunk
of it has a candidate with content; otherwise the turn, the user's message with it, is left
out. turngate must not split the provider's chunks into frames of its own without content
(a finish reason alone, a usage alone): over the recorded streams (function calls, code
execution, thought signatures, grounding, calls streaming their arguments), the chat's
history holds the turn after the stream, and the next request sends it.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from google.genai import types

from tests.fixtures_dir import FIXTURES_DIR, fixture_paths
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import genai_sdk, get
from tests.proxy.sdk_support import GENAI_AIOHTTP_WARNING
from tests.proxy.stack import Stack

pytestmark = [GENAI_AIOHTTP_WARNING]

# Vertex's streamed arguments (``streamFunctionCallArguments``): recorded without a request.
WEATHER = {
    "functionDeclarations": [
        {
            "name": "getWeather",
            "parameters": {"type": "OBJECT", "properties": {"location": {"type": "STRING"}}},
        }
    ]
}
STREAMS = [
    *(
        pytest.param(p.name, id=p.stem)
        for p in fixture_paths("gemini/*.sse")
        if (p.parent / f"{p.stem}.request.json").is_file()
    ),
    pytest.param("vercel-parallel-2-streamed-args.sse", id="streamed-args"),
]


def tools_of(stream: str) -> list[Any]:
    asked = FIXTURES_DIR / "gemini" / stream.replace(".sse", ".request.json")
    if not asked.is_file():
        return [WEATHER]
    tools = orjson.loads(asked.read_bytes()).get("tools")
    return list(tools) if isinstance(tools, list) else []


@pytest.mark.parametrize("conversation", [False, True], ids=["plain", "conversation"])
@pytest.mark.parametrize("stream", STREAMS)
async def test_a_streamed_turn_stays_in_the_chat_history(
    stack: Stack, stream: str, conversation: bool
):
    done = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Noted."}]}}]}
    done["candidates"][0]["finishReason"] = "STOP"
    stack.upstream.replies(Reply.fixture(f"gemini/{stream}"), Reply.json(done))
    headers = {"Turngate-Conversation-Id": f"chat-{stream}"} if conversation else {}
    sdk = genai_sdk(stack, **headers)
    config = types.GenerateContentConfig(tools=tools_of(stream))
    chat = sdk.aio.chats.create(model="gemini-2.5-flash", config=config)
    parts: list[types.Part] = []
    async for chunk in await chat.send_message_stream("Go on."):
        content = chunk.candidates[0].content if chunk.candidates else None
        parts.extend(content.parts or [] if content is not None else [])
    # The chat keeps each chunk's content: the user's message, then the model's chunks.
    kept = list(chat.get_history(curated=True))
    assert [c.role for c in kept] == ["user"] + ["model"] * (len(kept) - 1)
    assert len(kept) > 1
    assert [part for c in kept[1:] for part in c.parts or []] == parts
    # What follows the turn: the results of its calls, if it made any.
    calls = [part.function_call for part in parts if part.function_call is not None]
    if len(kept) > 2 and calls:
        # The chat keeps a turn of several chunks as several model contents (python-genai
        # issue 1791); calls split so are Gemini's to refuse (docs/rules.md), not this
        # test's to send.
        return
    results = [
        types.Part.from_function_response(name=call.name or "", response={"result": "ok"})
        for call in calls
    ]
    await chat.send_message(results or "Thanks.")
    sent = orjson.loads(stack.upstream.received[1].body)["contents"]
    assert [c["role"] for c in sent] == [c.role for c in kept] + ["user"]
    if conversation:
        status, found = await get(stack, f"/turngate/v1/conversations/chat-{stream}")
        assert (status, [t["revision"] for t in found["turns"]]) == (200, [0, 1])
