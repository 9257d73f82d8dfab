"""Anthropic ``pause_turn`` under Turngate-Conversation-Id.

A turn that runs server tools (web search, code execution) may be paused: the answer ends
with ``stop_reason: pause_turn`` and the application sends it back, last, for Claude to go
on. What comes back continues that same turn, so the application's next history holds the
paused part and its continuation as one assistant run (two messages, as an agent loop that
appends every answer has them, or one merged). That run is one turn of the history: the
conversation keeps the continuation as the turn that supersedes the paused one.
"""

from __future__ import annotations

import copy
from typing import Any

import anthropic
import orjson
import pytest

from tests.proxy.fake_upstream import Reply, fixture_path
from tests.proxy.helpers import anthropic_sdk, claude_answer, get
from tests.proxy.stack import Stack

SEARCH = "anthropic/pai-web-search-citations.sse"
TOOLS = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]
QUESTION = {"role": "user", "content": "What is in the world news today?"}
CONVERSATION = "paused-1"


def searched_blocks() -> list[dict[str, Any]]:
    """The recorded search: its server_tool_use block (input assembled from its deltas) and
    the web_search_tool_result that follows it."""
    blocks: dict[int, dict[str, Any]] = {}
    arguments: dict[int, str] = {}
    for event in fixture_path(SEARCH).read_bytes().split(b"\n\n"):
        for line in event.splitlines():
            if not line.startswith(b"data:"):
                continue
            data = orjson.loads(line[5:])
            if data["type"] == "content_block_start":
                blocks[data["index"]] = data["content_block"]
            elif data["type"] == "content_block_delta" and "partial_json" in data["delta"]:
                index = data["index"]
                arguments[index] = arguments.get(index, "") + data["delta"]["partial_json"]
    use, result = copy.deepcopy(blocks[0]), blocks[1]
    assert (use["type"], result["type"]) == ("server_tool_use", "web_search_tool_result")
    use["input"] = orjson.loads(arguments[0])
    return [use, result]


def answer(content: list[dict[str, Any]], stop: str, message_id: str) -> Reply:
    return Reply.json(
        {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-20250514",
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 2050, "output_tokens": 60},
        }
    )


def paused(message_id: str, text: str) -> Reply:
    return answer([{"type": "text", "text": text}, *searched_blocks()], "pause_turn", message_id)


def client(stack: Stack) -> anthropic.AsyncAnthropic:
    return anthropic_sdk(stack, **{"Turngate-Conversation-Id": CONVERSATION})


async def create(sdk: anthropic.AsyncAnthropic, messages: list[Any]) -> Any:
    return await sdk.messages.create(
        model="claude-sonnet-4-20250514",
        max_tokens=1024,
        messages=messages,
        tools=TOOLS,  # type: ignore[arg-type]
    )


def dump(content: list[Any]) -> list[dict[str, Any]]:
    """An answer's blocks as the application sends them back."""
    return [block.model_dump(exclude_none=True) for block in content]


async def agent_loop(
    sdk: anthropic.AsyncAnthropic, messages: list[Any], *, merge: bool
) -> list[Any]:
    """The loop Anthropic's docs show: each answer appended; a paused one sent back as it
    is until the turn ends. With ``merge``, the parts are kept as one assistant message."""
    while True:
        response = await create(sdk, messages)
        content = dump(response.content)
        if merge and messages[-1]["role"] == "assistant":
            messages[-1] = {"role": "assistant", "content": messages[-1]["content"] + content}
        else:
            messages.append({"role": "assistant", "content": content})
        if response.stop_reason != "pause_turn":
            return messages


@pytest.mark.parametrize("merge", [False, True], ids=["appended", "merged"])
@pytest.mark.parametrize("pauses", [1, 2])
async def test_a_turn_paused_and_continued_is_one_turn_of_the_history(
    stack: Stack, merge: bool, pauses: int
):
    stack.upstream.replies(
        *(paused(f"msg_p{n}", f"Searching, part {n}.") for n in range(pauses)),
        claude_answer("The top story is the summit.", message_id="msg_end"),
        claude_answer("You are welcome.", message_id="msg_thanks"),
    )
    async with client(stack) as sdk:
        messages = await agent_loop(sdk, [QUESTION], merge=merge)
        assert len(stack.upstream.received) == pauses + 1
        thanks = await create(sdk, [*messages, {"role": "user", "content": "Thanks!"}])
    assert thanks.content[0].text == "You are welcome."  # type: ignore[union-attr]
    status, record = await get(stack, f"/turngate/v1/conversations/{CONVERSATION}")
    assert status == 200
    assert [t["revision"] for t in record["turns"]] == list(range(pauses + 2))


async def test_a_streamed_continuation_is_the_turn_the_next_history_holds(stack: Stack):
    # The turn goes on as the recorded web search stream (search, results, cited text),
    # read by the SDK's stream helper; the application appends the message it assembled.
    stack.upstream.replies(
        answer([{"type": "text", "text": "Let me look that up."}], "pause_turn", "msg_p0"),
        Reply.fixture(SEARCH),
        claude_answer("You are welcome.", message_id="msg_thanks"),
    )
    async with client(stack) as sdk:
        first = await create(sdk, [QUESTION])
        assert first.stop_reason == "pause_turn"
        messages = [QUESTION, {"role": "assistant", "content": dump(first.content)}]
        async with sdk.messages.stream(
            model="claude-sonnet-4-20250514",
            max_tokens=1024,
            messages=messages,
            tools=TOOLS,  # type: ignore[arg-type]
        ) as stream:
            went_on = await stream.get_final_message()
        assert [b.type for b in went_on.content][:2] == [
            "server_tool_use",
            "web_search_tool_result",
        ]
        messages.append({"role": "assistant", "content": dump(went_on.content)})
        thanks = await create(sdk, [*messages, {"role": "user", "content": "Thanks!"}])
    assert thanks.content[0].text == "You are welcome."  # type: ignore[union-attr]
    status, record = await get(stack, f"/turngate/v1/conversations/{CONVERSATION}")
    assert status == 200
    assert [t["continues"] for t in record["turns"]] == [False, True, False]


async def test_a_retried_continuation_is_answered_again_without_a_send(stack: Stack):
    stack.upstream.replies(
        paused("msg_p0", "Searching."),
        claude_answer("The top story is the summit.", message_id="msg_end"),
    )
    async with client(stack) as sdk:
        first = await create(sdk, [QUESTION])
        sent_back = [QUESTION, {"role": "assistant", "content": dump(first.content)}]
        went_on = await create(sdk, sent_back)
        again = await create(sdk, sent_back)
    assert again.id == went_on.id == "msg_end"
    assert len(stack.upstream.received) == 2


async def test_a_history_without_the_paused_part_is_refused(stack: Stack):
    stack.upstream.replies(
        paused("msg_p0", "Searching."),
        claude_answer("The top story is the summit.", message_id="msg_end"),
    )
    async with client(stack) as sdk:
        messages = await agent_loop(sdk, [QUESTION], merge=False)
        edited = [QUESTION, messages[2], {"role": "user", "content": "Thanks!"}]
        with pytest.raises(anthropic.BadRequestError) as raised:
            await create(sdk, edited)
    assert raised.value.response.headers["Turngate-Rejection"] == "history_mismatch"
    assert len(stack.upstream.received) == 2
