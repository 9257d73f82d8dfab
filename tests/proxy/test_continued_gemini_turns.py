"""Gemini turns continued by token (``finishReason: CONTINUATION``) under a conversation id.

google-genai continues such an answer on its own (automatic continuation, on by default):
it sends the same request again with the answer's ``continuationToken`` and joins the
hops' parts into one candidate, which the application keeps as one model turn. turngate
must let each hop through, commit it as the continuation of the hops before, and take the
joined turn as the history of the next request; a token no committed answer carried is
refused with nothing sent.
"""

from __future__ import annotations

import base64
from typing import Any

import aiohttp
import orjson
import pytest
from google import genai
from google.genai import errors, types

from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import genai_sdk, get
from tests.proxy.sdk_support import GENAI_AIOHTTP_WARNING
from tests.proxy.stack import GEMINI_KEY, Stack

pytestmark = [GENAI_AIOHTTP_WARNING]


@pytest.fixture
def stack(every_store_stack: Stack) -> Stack:
    """Continued turns start from the answers the store kept: every store, Redis too."""
    return every_store_stack


CONVERSATION = "continued-1"
MODEL = "gemini-3-flash"
QUESTION = {"role": "user", "parts": [{"text": "Write the whole report."}]}


def candidate(text: str, token: bytes | None) -> dict[str, Any]:
    found: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}
    if token is None:
        found["finishReason"] = "STOP"
    else:
        found["finishReason"] = "CONTINUATION"
        found["continuationToken"] = base64.b64encode(token).decode()
    return found


def hop(text: str, token: bytes | None = None) -> Reply:
    """One hop's answer: cut with ``token`` to go on from, or the last (STOP)."""
    body = {"candidates": [candidate(text, token)], "modelVersion": MODEL, "responseId": text}
    return Reply.json(body)


def streamed_hop(pieces: list[str], token: bytes | None = None) -> Reply:
    """The same hop streamed: a chunk per piece, the last one with the finish reason."""
    chunks = [
        {"candidates": [{"content": {"role": "model", "parts": [{"text": p}]}, "index": 0}]}
        for p in pieces[:-1]
    ]
    chunks.append({"candidates": [candidate(pieces[-1], token)], "modelVersion": MODEL})
    body = b"".join(b"data: " + orjson.dumps(c) + b"\r\n\r\n" for c in chunks)
    return Reply(body=body, content_type="text/event-stream")


def sdk_for(stack: Stack) -> genai.Client:
    return genai_sdk(stack, **{"Turngate-Conversation-Id": CONVERSATION})


async def kept(stack: Stack) -> dict[str, Any]:
    status, conversation = await get(stack, f"/turngate/v1/conversations/{CONVERSATION}")
    assert status == 200
    assert isinstance(conversation, dict)
    return conversation


async def test_the_joined_turn_is_the_history_the_next_request_goes_on_from(stack: Stack):
    stack.upstream.replies(
        hop("Part one. ", b"t1"), hop("Part two. ", b"t2"), hop("Part three."), hop("Noted.")
    )
    sdk = sdk_for(stack)
    answer = await sdk.aio.models.generate_content(model=MODEL, contents=[QUESTION])
    assert answer.text == "Part one. Part two. Part three."
    sent = [orjson.loads(r.body) for r in stack.upstream.received]
    assert [s.get("continuationToken") for s in sent] == [None, "dDE=", "dDI="]
    assert all(s["contents"] == sent[0]["contents"] for s in sent)
    assert answer.candidates is not None
    joined = answer.candidates[0].content
    follow = await sdk.aio.models.generate_content(
        model=MODEL, contents=[QUESTION, joined, {"role": "user", "parts": [{"text": "Thanks"}]}]
    )
    assert follow.text == "Noted."
    conversation = await kept(stack)
    assert [(t["revision"], t["continues"]) for t in conversation["turns"]] == [
        (0, False),
        (1, True),
        (2, True),
        (3, False),
    ]


async def test_a_streamed_turn_continued_by_token_is_one_turn(stack: Stack):
    stack.upstream.replies(
        streamed_hop(["Part ", "one. "], b"t1"), streamed_hop(["Part ", "two."]), hop("Noted.")
    )
    sdk = sdk_for(stack)
    parts: list[types.Part] = []
    stream = await sdk.aio.models.generate_content_stream(model=MODEL, contents=[QUESTION])
    async for chunk in stream:
        assert chunk.candidates is not None
        content = chunk.candidates[0].content
        parts.extend(content.parts or [] if content is not None else [])
    joined = types.Content(role="model", parts=parts)
    assert "".join(p.text or "" for p in parts) == "Part one. Part two."
    follow = await sdk.aio.models.generate_content(
        model=MODEL, contents=[QUESTION, joined, {"role": "user", "parts": [{"text": "Thanks"}]}]
    )
    assert follow.text == "Noted."
    turns = (await kept(stack))["turns"]
    assert [t["continues"] for t in turns] == [False, True, False]


async def test_a_retried_hop_is_replayed_and_nothing_is_sent(stack: Stack):
    stack.upstream.replies(hop("Part one. ", b"t1"), hop("Part two."))
    sdk = sdk_for(stack)
    manual = types.GenerateContentConfig(automatic_continuation=False)
    first = await sdk.aio.models.generate_content(model=MODEL, contents=[QUESTION], config=manual)
    assert first.candidates is not None
    token = first.candidates[0].continuation_token
    assert token == b"t1"
    go_on = types.GenerateContentConfig(automatic_continuation=False, continuation_token=token)
    second = await sdk.aio.models.generate_content(model=MODEL, contents=[QUESTION], config=go_on)
    again = await sdk.aio.models.generate_content(model=MODEL, contents=[QUESTION], config=go_on)
    assert second.text == again.text == "Part two."
    assert len(stack.upstream.received) == 2
    assert len((await kept(stack))["turns"]) == 2


async def test_a_token_no_committed_answer_carried_is_refused(stack: Stack):
    stack.upstream.replies(hop("Part one. ", b"t1"), hop("Part two."))
    sdk = sdk_for(stack)
    await sdk.aio.models.generate_content(model=MODEL, contents=[QUESTION])
    forged = types.GenerateContentConfig(automatic_continuation=False, continuation_token=b"tX")
    with pytest.raises(errors.ClientError) as refused:
        await sdk.aio.models.generate_content(model=MODEL, contents=[QUESTION], config=forged)
    assert refused.value.code == 400
    assert "continuationToken" in str(refused.value)
    assert len(stack.upstream.received) == 2


async def test_a_history_with_only_the_first_hop_is_refused(stack: Stack):
    stack.upstream.replies(hop("Part one. ", b"t1"), hop("Part two."))
    sdk = sdk_for(stack)
    await sdk.aio.models.generate_content(model=MODEL, contents=[QUESTION])
    cut = {"role": "model", "parts": [{"text": "Part one. "}]}
    with pytest.raises(errors.ClientError) as refused:
        await sdk.aio.models.generate_content(
            model=MODEL, contents=[QUESTION, cut, {"role": "user", "parts": [{"text": "Go"}]}]
        )
    assert refused.value.response.headers["Turngate-Rejection"] == "history_mismatch"
    assert len(stack.upstream.received) == 2


def broken_after_checkpoint() -> Reply:
    """A stream that breaks after a chunk carrying a checkpoint token (``c1``)."""
    chunk = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Part"}]}}]}
    chunk["candidates"][0]["continuationToken"] = base64.b64encode(b"c1").decode()
    body = b"data: " + orjson.dumps(chunk) + b"\r\n\r\n"
    return Reply(body=body, content_type="text/event-stream", drop_after=len(body))


async def test_the_token_of_a_stream_that_broke_is_refused(stack: Stack):
    # A checkpoint token seen before the stream broke: that answer was never committed.
    stack.upstream.replies(broken_after_checkpoint())
    url = f"{stack.base('/gemini')}/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
    headers = {"x-goog-api-key": GEMINI_KEY, "Turngate-Conversation-Id": CONVERSATION}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json={"contents": [QUESTION]}, headers=headers) as broken:
            with pytest.raises(aiohttp.ClientPayloadError):
                await broken.read()
        resumed = {"contents": [QUESTION], "continuationToken": "YzE="}
        async with http.post(url, json=resumed, headers=headers) as refused:
            assert refused.status == 400
            assert refused.headers["Turngate-Rejection"] == "history_mismatch"
    assert len(stack.upstream.received) == 1


async def test_a_token_sent_with_other_contents_is_refused(stack: Stack):
    stack.upstream.replies(hop("Part one. ", b"t1"), hop("Part two."))
    sdk = sdk_for(stack)
    manual = types.GenerateContentConfig(automatic_continuation=False)
    await sdk.aio.models.generate_content(model=MODEL, contents=[QUESTION], config=manual)
    other = {"role": "user", "parts": [{"text": "Write another report."}]}
    go_on = types.GenerateContentConfig(automatic_continuation=False, continuation_token=b"t1")
    with pytest.raises(errors.ClientError) as refused:
        await sdk.aio.models.generate_content(model=MODEL, contents=[other], config=go_on)
    assert refused.value.code == 400
    assert "other contents" in str(refused.value)
    assert len(stack.upstream.received) == 1


async def test_the_sdk_resuming_a_broken_stream_raises_and_keeps_no_turn(stack: Stack):
    # google-genai resumes a broken stream from its last checkpoint token on its own: the
    # answer it would go on from was never committed, so the application gets an error,
    # not the previews joined to the rest.
    stack.upstream.replies(broken_after_checkpoint())
    sdk = sdk_for(stack)

    async def read_all() -> list[str]:
        stream = await sdk.aio.models.generate_content_stream(model=MODEL, contents=[QUESTION])
        return [piece.text or "" async for piece in stream]

    with pytest.raises(errors.ClientError) as raised:
        await read_all()
    assert raised.value.code == 400
    assert "never committed" in str(raised.value)
    assert len(stack.upstream.received) == 1
    assert (await kept(stack))["turns"] == []
