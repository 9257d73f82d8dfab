"""Anthropic Message Threads: the server holds the conversation, each request sends what is new.

The anthropic SDK's tool runner threads its requests by default: the first one creates the
thread (``thread: {"type": "create"}``, the whole history, the tools), every later one
continues it (``thread: {"type": "continue", "previous_message_id": …}``) with only the
tool results, and without ``system`` and ``tools``, which the thread keeps. A paused turn
(``pause_turn``) is resumed by a continue that carries nothing. turngate must let such a
loop run, with and without a conversation id: results answering calls only the server
holds are no orphans, calls to tools only the thread declares are checked against the
schemas the thread was created with (as JSON objects when the reply a continue names was not
this process's), and a conversation counts its revisions from the reply each continue names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import orjson
import pytest

from tests.proxy.conftest import StackFactory, stack_on
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import anthropic_sdk, claude_stream, get
from tests.proxy.stack import Stack


@pytest.fixture
def stack(every_store_stack: Stack) -> Stack:
    """Continued turns start from the answers the store kept: every store, Redis too."""
    return every_store_stack


CONVERSATION = "thread-1"
MODEL = "claude-sonnet-4-5"
QUESTION = {"role": "user", "content": "What are the capitals of France and Spain?"}


def message(message_id: str, content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 30, "output_tokens": 8},
    }


def calls(message_id: str, call_id: str, country: str) -> dict[str, Any]:
    use = {"type": "tool_use", "id": call_id, "name": "get_capital", "input": {"country": country}}
    return message(message_id, [use], "tool_use")


def said(message_id: str, text: str) -> dict[str, Any]:
    return message(message_id, [{"type": "text", "text": text}], "end_turn")


def loop(streamed: bool) -> list[Reply]:
    answers = [
        calls("msg_1", "toolu_1", "France"),
        calls("msg_2", "toolu_2", "Spain"),
        said("msg_3", "Paris and Madrid."),
    ]
    return [claude_stream(a) if streamed else Reply.json(a) for a in answers]


def capital_tool(ran: list[str]) -> Any:
    @anthropic.beta_async_tool
    async def get_capital(country: str) -> str:
        """The capital of a country."""
        ran.append(country)
        return {"France": "Paris", "Spain": "Madrid"}[country]

    return get_capital


async def run_tools(sdk: anthropic.AsyncAnthropic, ran: list[str], *, stream: bool) -> str:
    runner: Any = sdk.beta.messages.tool_runner(
        model=MODEL,
        max_tokens=200,
        tools=[capital_tool(ran)],
        messages=[QUESTION],
        **({"stream": True} if stream else {}),
    )
    if stream:
        last = None
        async for turn in runner:
            last = await turn.get_final_message()
        assert last is not None
        final = last
    else:
        final = await runner.until_done()
    return "".join(block.text for block in final.content if block.type == "text")


async def create_thread(sdk: anthropic.AsyncAnthropic, *, country: str | None = None) -> None:
    """The question in a new thread, the tool declared (``country``: the JSON type of its
    one required argument; any object when None)."""
    schema: dict[str, Any] = {"type": "object"}
    if country is not None:
        schema.update(properties={"country": {"type": country}}, required=["country"])
    await sdk.beta.messages.create(
        model=MODEL,
        max_tokens=100,
        messages=[QUESTION],
        tools=[{"name": "get_capital", "input_schema": schema}],
        thread={"type": "create"},
    )


async def continue_thread(sdk: anthropic.AsyncAnthropic, previous: str, content: Any) -> Any:
    """A continue of the thread after the reply ``previous``, one user message of
    ``content``."""
    return await sdk.beta.messages.create(
        model=MODEL,
        max_tokens=100,
        messages=[{"role": "user", "content": content}],
        thread={"type": "continue", "previous_message_id": previous},
    )


def sent(stack: Stack) -> list[dict[str, Any]]:
    return [orjson.loads(r.body) for r in stack.upstream.received]


async def turns(stack: Stack) -> list[dict[str, Any]]:
    status, kept = await get(stack, f"/turngate/v1/conversations/{CONVERSATION}")
    assert status == 200
    assert isinstance(kept, dict)
    return list(kept["turns"])


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("conversation", [False, True], ids=["plain", "conversation"])
async def test_the_sdk_tool_runner_threads_its_loop_through(
    stack: Stack, streamed: bool, conversation: bool
):
    stack.upstream.replies(*loop(streamed))
    ran: list[str] = []
    headers = {"Turngate-Conversation-Id": CONVERSATION} if conversation else {}
    async with anthropic_sdk(stack, **headers) as sdk:
        assert await run_tools(sdk, ran, stream=streamed) == "Paris and Madrid."
    assert ran == ["France", "Spain"]
    bodies = sent(stack)
    assert [b["thread"] for b in bodies] == [
        {"type": "create"},
        {"type": "continue", "previous_message_id": "msg_1"},
        {"type": "continue", "previous_message_id": "msg_2"},
    ]
    # A continue carries the results alone: the calls and the tools are the thread's.
    assert [len(b["messages"]) for b in bodies] == [1, 1, 1]
    assert ["tools" in b for b in bodies] == [True, False, False]
    if conversation:
        kept = await turns(stack)
        assert [(t["revision"], t["continues"]) for t in kept] == [
            (0, False),
            (1, False),
            (2, False),
        ]


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(
    ("name", "arguments", "why"),
    [
        ("get_capital", {"country": 7}, "breaks its schema"),
        ("get_weather", {"city": "Madrid"}, "a tool not declared"),
    ],
    ids=["against-its-schema", "undeclared"],
)
async def test_a_continues_calls_are_checked_against_the_threads_tools(
    stack: Stack, streamed: bool, name: str, arguments: dict[str, Any], why: str
):
    # The continue carries no tools: the thread's are those its create declared.
    wrong = calls("msg_2", "toolu_2", "Spain")
    wrong["content"][0].update(name=name, input=arguments)
    first = calls("msg_1", "toolu_1", "France")
    stack.upstream.replies(
        *(claude_stream(a) if streamed else Reply.json(a) for a in (first, wrong))
    )
    ran: list[str] = []
    async with anthropic_sdk(stack) as sdk:
        with pytest.raises(anthropic.APIError) as refused:
            await run_tools(sdk, ran, stream=streamed)
    # The call never reached the tool runner: its tool did not run.
    assert ran == ["France"]
    assert why in str(refused.value)
    assert sent(stack)[1]["thread"] == {"type": "continue", "previous_message_id": "msg_1"}


@pytest.mark.parametrize("conversation", [False, True], ids=["plain", "conversation"])
async def test_a_continue_must_answer_the_calls_of_the_reply_it_names(
    stack: Stack, conversation: bool
):
    stack.upstream.replies(Reply.json(calls("msg_1", "toolu_1", "France")))
    headers = {"Turngate-Conversation-Id": CONVERSATION} if conversation else {}
    async with anthropic_sdk(stack, **headers) as sdk:
        await create_thread(sdk)
        # The server holds the call; a continue without its result is refused upstream.
        with pytest.raises(anthropic.BadRequestError) as refused:
            await continue_thread(sdk, "msg_1", "Never mind, just Spain?")
    assert refused.value.response.headers["Turngate-Rejection"] == "missing_result"
    assert "toolu_1" in str(refused.value)
    assert len(stack.upstream.received) == 1


async def test_a_held_call_that_is_no_json_object_is_still_refused(stack: Stack):
    # Only the thread declares the tool: its calls are checked as JSON objects.
    broken = calls("msg_2", "toolu_2", "Spain")
    stream = claude_stream(broken).body.replace(b'{\\"country\\":\\"Spain\\"}', b'{\\"country\\":')
    stack.upstream.replies(
        claude_stream(calls("msg_1", "toolu_1", "France")),
        Reply(body=stream, content_type="text/event-stream"),
    )
    ran: list[str] = []
    async with anthropic_sdk(stack) as sdk:
        with pytest.raises(anthropic.APIError):
            await run_tools(sdk, ran, stream=True)
    assert ran == ["France"]


async def test_a_continue_from_a_reply_never_committed_is_refused(stack: Stack):
    stack.upstream.replies(Reply.json(calls("msg_1", "toolu_1", "France")))
    async with anthropic_sdk(stack, **{"Turngate-Conversation-Id": CONVERSATION}) as sdk:
        await create_thread(sdk)
        result = {"type": "tool_result", "tool_use_id": "toolu_9", "content": "Rome"}
        with pytest.raises(anthropic.BadRequestError) as refused:
            await continue_thread(sdk, "msg_9", [result])
    assert refused.value.response.headers["Turngate-Rejection"] == "history_mismatch"
    assert len(stack.upstream.received) == 1


async def test_a_thread_the_server_lost_is_replayed_whole_as_the_same_revision(stack: Stack):
    lost = {"type": "error", "error": {"type": "not_found_error", "message": "thread not found"}}
    lost["error"]["details"] = {"error_code": "thread_not_found"}
    stack.upstream.replies(
        Reply.json(calls("msg_1", "toolu_1", "France")),
        Reply.json(lost, status=404),
        Reply.json(calls("msg_2", "toolu_2", "Spain")),
        Reply.json(said("msg_3", "Paris and Madrid.")),
    )
    ran: list[str] = []
    async with anthropic_sdk(stack, **{"Turngate-Conversation-Id": CONVERSATION}) as sdk:
        assert await run_tools(sdk, ran, stream=False) == "Paris and Madrid."
    bodies = sent(stack)
    # The SDK sends the whole history again under a new thread: the turn it answers is the
    # one the lost continue asked for.
    assert bodies[2]["thread"] == {"type": "create"}
    assert len(bodies[2]["messages"]) == 3
    assert [t["revision"] for t in await turns(stack)] == [0, 1, 2]


async def test_a_paused_turn_resumed_in_its_thread_is_one_turn(stack: Stack):
    search = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search"}
    search["input"] = {"query": "capital of France"}
    paused = message("msg_1", [{"type": "text", "text": "Let me search. "}, search], "pause_turn")
    # The resumed turn opens with the paused search's result: Anthropic refuses a history
    # whose server call never got one (rule anthropic_server_tool_result).
    found = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}
    resumed = message("msg_2", [found, {"type": "text", "text": "It is Paris."}], "end_turn")
    # Both streamed: the resumed turn starts with the paused one as turngate relayed it.
    stack.upstream.replies(
        claude_stream(paused), claude_stream(resumed), Reply.json(said("msg_3", "Ok"))
    )
    async with anthropic_sdk(stack, **{"Turngate-Conversation-Id": CONVERSATION}) as sdk:
        thread = sdk.beta.messages.thread(model=MODEL, max_tokens=100)
        async with thread.stream(QUESTION) as started:
            first = await started.get_final_message()
        assert first.stop_reason == "pause_turn"
        async with thread.stream() as going_on:
            second = await going_on.get_final_message()
        assert second.stop_reason == "end_turn"
        history = list(thread.messages)
        # The application stops threading: the whole history, the paused turn and its
        # resumption as the assistant run they are.
        history.append({"role": "user", "content": "Thanks"})
        await sdk.beta.messages.create(model=MODEL, max_tokens=100, messages=history)
    bodies = sent(stack)
    assert bodies[1]["messages"] == []
    assert [(t["revision"], t["continues"]) for t in await turns(stack)] == [
        (0, False),
        (1, True),
        (2, False),
    ]


@pytest.mark.parametrize("store", ["sqlite", "redis"])
async def test_another_replica_checks_a_continue_against_the_threads_schemas(
    make_stack: StackFactory, tmp_path: Path, store: str
):
    # Two replicas sharing conversations: one created the thread, the other serves the
    # continue, whose tools it never saw; the store kept the toolset the thread was made with.
    one = await stack_on(store, make_stack, tmp_path)
    other = await stack_on(store, make_stack, tmp_path)
    one.upstream.replies(Reply.json(calls("msg_1", "toolu_1", "France")))
    wrong = calls("msg_2", "toolu_2", "Spain")
    wrong["content"][0]["input"] = {"country": 7}
    other.upstream.replies(Reply.json(wrong))
    headers = {"Turngate-Conversation-Id": CONVERSATION}
    async with anthropic_sdk(one, **headers) as sdk:
        await create_thread(sdk, country="string")
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Paris"}
    async with anthropic_sdk(other, **headers) as sdk:
        with pytest.raises(anthropic.APIStatusError) as refused:
            await continue_thread(sdk, "msg_1", [result])
    assert refused.value.status_code == 502
    assert "breaks its schema" in str(refused.value)
