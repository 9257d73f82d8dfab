"""A Gemini conversation whose start the provider holds (``cachedContent``) under
Turngate-Conversation-Id.

Google's ADK (context caching) caches every content of the conversation so far, model turns
included, and sends only what follows; every few invocations it caches again, further on.
A request therefore shows the conversation's last turns only, fewer after each new cache:
those turns must be consecutive committed turns, the latest ones (or those before the
latest, for a retry), and the request answers the revision after them.
"""

from __future__ import annotations

from typing import Any

import pytest
from google import genai
from google.genai import errors, types

from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import genai_sdk, get
from tests.proxy.sdk_support import GENAI_AIOHTTP_WARNING
from tests.proxy.stack import Stack

pytestmark = [GENAI_AIOHTTP_WARNING]

CONVERSATION = "cached-1"


def said(text: str, response_id: str) -> Reply:
    return Reply.json(
        {
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"text": text}]},
                    "finishReason": "STOP",
                }
            ],
            "modelVersion": "gemini-2.5-flash",
            "responseId": response_id,
        }
    )


def sdk_for(stack: Stack) -> genai.Client:
    return genai_sdk(stack, **{"Turngate-Conversation-Id": CONVERSATION})


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


def model(text: str) -> dict[str, Any]:
    return {"role": "model", "parts": [{"text": text}]}


async def ask(sdk: genai.Client, contents: list[Any], cache: str) -> str:
    answer = await sdk.aio.models.generate_content(
        model="gemini-2.5-flash",
        contents=contents,
        config=types.GenerateContentConfig(cached_content=cache),
    )
    return answer.text or ""


async def revisions(stack: Stack) -> list[int]:
    status, kept = await get(stack, f"/turngate/v1/conversations/{CONVERSATION}")
    assert status == 200
    return [turn["revision"] for turn in kept["turns"]]


async def test_a_conversation_cached_further_on_goes_on(stack: Stack):
    stack.upstream.replies(said("A1", "r1"), said("A2", "r2"), said("A3", "r3"), said("A4", "r4"))
    sdk = sdk_for(stack)
    # The first cache holds the instructions only; then the turns so far, twice over.
    assert await ask(sdk, [user("Q1")], "cachedContents/c0") == "A1"
    assert await ask(sdk, [user("Q1"), model("A1"), user("Q2")], "cachedContents/c0") == "A2"
    assert await ask(sdk, [user("Q3")], "cachedContents/c1") == "A3"
    assert await ask(sdk, [user("Q3"), model("A3"), user("Q4")], "cachedContents/c1") == "A4"
    assert await revisions(stack) == [0, 1, 2, 3]
    assert len(stack.upstream.received) == 4


async def test_a_retry_beside_a_cache_is_answered_again_without_a_send(stack: Stack):
    stack.upstream.replies(said("A1", "r1"), said("A2", "r2"))
    sdk = sdk_for(stack)
    await ask(sdk, [user("Q1")], "cachedContents/c0")
    follow_up = [user("Q1"), model("A1"), user("Q2")]
    assert await ask(sdk, follow_up, "cachedContents/c0") == "A2"
    assert await ask(sdk, follow_up, "cachedContents/c0") == "A2"
    assert len(stack.upstream.received) == 2
    assert await revisions(stack) == [0, 1]


async def test_a_retry_that_shows_no_turn_after_a_new_cache_is_answered_again(stack: Stack):
    # After a new cache the request shows no model turn: only its bytes say it is a retry.
    stack.upstream.replies(said("A1", "r1"), said("A2", "r2"), said("A3", "r3"))
    sdk = sdk_for(stack)
    await ask(sdk, [user("Q1")], "cachedContents/c0")
    assert await ask(sdk, [user("Q2")], "cachedContents/c1") == "A2"
    assert await ask(sdk, [user("Q2")], "cachedContents/c1") == "A2"
    assert len(stack.upstream.received) == 2
    # The same words beside another cache are a new request.
    assert await ask(sdk, [user("Q2")], "cachedContents/c2") == "A3"
    assert await revisions(stack) == [0, 1, 2]


@pytest.mark.parametrize(
    "contents",
    [
        [user("Q2"), model("A1, edited"), user("Q3")],  # an edited turn
        [user("Q2"), model("A9"), user("Q3")],  # a turn never committed
        [user("Q1"), model("A2"), user("Q2"), model("A1"), user("Q3")],  # reordered
    ],
    ids=["edited", "never-committed", "reordered"],
)
async def test_turns_beside_a_cache_that_are_not_the_committed_ones_are_refused(
    stack: Stack, contents: list[Any]
):
    stack.upstream.replies(said("A1", "r1"), said("A2", "r2"))
    sdk = sdk_for(stack)
    await ask(sdk, [user("Q1")], "cachedContents/c0")
    await ask(sdk, [user("Q1"), model("A1"), user("Q2")], "cachedContents/c0")
    with pytest.raises(errors.ClientError) as raised:
        await ask(sdk, contents, "cachedContents/c1")
    assert raised.value.code == 400
    assert "history_mismatch" in str(raised.value)
    assert len(stack.upstream.received) == 2
