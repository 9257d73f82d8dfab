"""The OpenAI Agents SDK (``openai-agents``) through turngate: an agent with a function tool.

The Agents SDK drives the Responses API itself: it sends the whole history each turn, or
chains each request to the last response (``auto_previous_response_id``) with only the
tool's output, streamed (``Runner.run_streamed``) or not. Each way must run through turngate
as it does against the provider, under a conversation id too, the recorded answers
(../shared/fixtures) replayed by the fake upstream: the tool runs once, the final answer
comes back, every request reaches the provider.
"""

from __future__ import annotations

from typing import Any

import agents
import openai
import orjson
import pytest

from tests.fixtures_dir import FIXTURES_DIR, FIXTURES_PRESENT
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import OPENAI_KEY, get
from tests.proxy.stack import Stack

pytestmark = pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")

WHOLE = (
    "openai-responses/pai-nonstream-function-call.json",
    "openai-responses/pai-nonstream-after-function-output.json",
)
STREAMED = (
    "openai-responses/pai-function-call-turn1.sse",
    "openai-responses/pai-function-call-turn2.sse",
)
CONVERSATION = "agents-1"


@pytest.fixture(autouse=True)
def no_tracing() -> None:
    # The SDK would export its traces to api.openai.com: nothing leaves the test.
    agents.set_tracing_disabled(True)


def client_for(stack: Stack, *, conversation: bool = False) -> openai.AsyncOpenAI:
    headers = {"Turngate-Conversation-Id": CONVERSATION} if conversation else None
    return openai.AsyncOpenAI(
        api_key=OPENAI_KEY,
        base_url=stack.base("/openai/v1"),
        max_retries=0,
        default_headers=headers,
    )


def capital_agent(
    client: openai.AsyncOpenAI, ran: list[str], *, chat: bool = False
) -> agents.Agent[Any]:
    """An agent whose one tool records each country it is called for; on the Responses API,
    or on Chat Completions (the Agents SDK's model for other providers' APIs)."""

    @agents.function_tool
    def get_capital(country: str) -> str:
        """The capital of a country."""
        ran.append(country)
        return {"France": "Paris", "PotatoLand": "Potato City", "UK": "London"}[country]

    model: agents.Model = (
        agents.OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client)
        if chat
        else agents.OpenAIResponsesModel(model="gpt-4o", openai_client=client)
    )
    return agents.Agent(name="geo", instructions="Answer.", tools=[get_capital], model=model)


async def run(agent: agents.Agent[Any], *, streamed: bool, chained: bool) -> str:
    question = "What is the capital of the country?"
    if not streamed:
        result = await agents.Runner.run(agent, question, auto_previous_response_id=chained)
        return str(result.final_output)
    streaming = agents.Runner.run_streamed(agent, question, auto_previous_response_id=chained)
    async for _event in streaming.stream_events():
        pass
    return str(streaming.final_output)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("chained", [False, True], ids=["history", "chained"])
@pytest.mark.parametrize("conversation", [False, True], ids=["plain", "conversation"])
async def test_an_agent_with_a_tool_runs_through(
    stack: Stack, streamed: bool, chained: bool, conversation: bool
):
    first, then = STREAMED if streamed else WHOLE
    stack.upstream.replies(Reply.fixture(first), Reply.fixture(then))
    client = client_for(stack, conversation=conversation)
    ran: list[str] = []
    async with client:
        answer = await run(capital_agent(client, ran), streamed=streamed, chained=chained)
    assert answer.startswith("The capital of")
    assert len(ran) == 1
    first_sent, second_sent = (orjson.loads(r.body) for r in stack.upstream.received)
    # The second request carries the tool's output: with the history, or chained to the
    # response that called it.
    assert ("previous_response_id" in second_sent) is chained
    assert second_sent["input"][-1]["type"] == "function_call_output"
    assert first_sent["tools"][0]["name"] == "get_capital"
    if conversation:
        status, kept = await get(stack, f"/turngate/v1/conversations/{CONVERSATION}")
        assert status == 200
        assert [t["revision"] for t in kept["turns"]] == [0, 1]


async def test_a_call_against_the_tools_schema_never_reaches_the_agents_tool(stack: Stack):
    answer = orjson.loads((FIXTURES_DIR / WHOLE[0]).read_bytes())
    answer["output"][0]["arguments"] = '{"country": 7}'
    stack.upstream.replies(Reply.json(answer))
    client = client_for(stack)
    ran: list[str] = []
    async with client:
        with pytest.raises(openai.APIStatusError) as refused:
            await run(capital_agent(client, ran), streamed=False, chained=False)
    assert refused.value.status_code == 502
    assert refused.value.response.headers["Turngate-Rejection"] == "invalid_tool_call"
    assert "country" in str(refused.value)
    assert ran == []


@pytest.mark.parametrize("conversation", [False, True], ids=["plain", "conversation"])
async def test_an_agent_on_chat_completions_runs_through(stack: Stack, conversation: bool):
    stack.upstream.replies(
        Reply.fixture("openai-chat/pai-tool-call-then-text-turn1.sse"),
        Reply.fixture("openai-chat/pai-tool-call-then-text-turn2.sse"),
    )
    client = client_for(stack, conversation=conversation)
    ran: list[str] = []
    async with client:
        agent = capital_agent(client, ran, chat=True)
        answer = await run(agent, streamed=True, chained=False)
    assert answer == "The capital of the UK is London."
    assert ran == ["UK"]
    assert len(stack.upstream.received) == 2
