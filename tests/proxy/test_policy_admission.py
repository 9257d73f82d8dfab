"""Context admission through the proxy, with the official SDKs: a request whose final bytes plus
its output budget are one token over the model's window is refused before any send, in the
API's own context-length error form; one under is sent."""

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from tests.adapters.anthropic_builders import scanned_pdf
from tests.fixtures_dir import COUNTS, FIXTURES_PRESENT
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import claude_answer, post
from tests.proxy.policy_stack import policy_of, shadow_records, start_policy_stack
from tests.proxy.sdk_support import GENAI_AIOHTTP_WARNING
from tests.proxy.stack import ANTHROPIC_KEY, GEMINI_KEY, OPENAI_KEY, Stack
from turngate.policies.tokens import count_request, encoding_loaded

pytestmark = [
    pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT"),
    GENAI_AIOHTTP_WARNING,
]

QUESTION = "What is the weather in Paris, and should I take an umbrella tomorrow morning?"
# Gemini's built-in rows limit input only (1M tokens); a file's row gives a small one. The
# file's rows give GPT-4o, GPT-4 Turbo and Haiku 4.5 windows small enough that the output
# budget filling one is a budget the model writes (16,384, 4,096 and 64,000 tokens): a
# larger one is refused as such (openai_max_tokens, anthropic_max_tokens) before admission.
SMALL_WINDOWS: list[dict[str, Any]] = [
    {"match": "gpt-4o", "context_window": 16_000},
    {"match": "gpt-4-turbo", "context_window": 4_000, "encoding": "cl100k_base"},
    {
        "match": "claude-haiku-4-5*",
        "context_window": 60_000,
        "counting": "estimate",
        "factor": 1.35,
        "tool_overhead_tokens": 500,
    },
]

# Calls one API through its SDK with ``budget`` output tokens; returns after the answer.
Send = Callable[[Stack, int], Awaitable[Any]]


async def chat(stack: Stack, budget: int, *, model: str = "gpt-4o") -> Any:
    async with openai.AsyncOpenAI(
        api_key=OPENAI_KEY, base_url=stack.base("/openai/v1"), max_retries=0
    ) as client:
        return await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": QUESTION}],
            max_completion_tokens=budget,
        )


async def responses(stack: Stack, budget: int) -> Any:
    async with openai.AsyncOpenAI(
        api_key=OPENAI_KEY, base_url=stack.base("/openai/v1"), max_retries=0
    ) as client:
        return await client.responses.create(
            model="gpt-4o", input=QUESTION, max_output_tokens=budget
        )


async def messages(stack: Stack, budget: int) -> Any:
    # An explicit timeout: the SDK refuses a large non-streaming max_tokens without one.
    async with anthropic.AsyncAnthropic(
        api_key=ANTHROPIC_KEY, base_url=stack.base("/anthropic"), max_retries=0, timeout=30.0
    ) as client:
        return await client.messages.create(
            model="claude-haiku-4-5-20251001",
            max_tokens=budget,
            messages=[{"role": "user", "content": QUESTION}],
        )


async def generate(stack: Stack, budget: int) -> Any:
    client = genai.Client(
        api_key=GEMINI_KEY,
        http_options=types.HttpOptions(base_url=stack.base("/gemini"), api_version="v1beta"),
    )
    try:
        # Here the budget is the input limit itself (the row limits input only).
        return await client.aio.models.generate_content(
            model="gemini-admission-test-1", contents=QUESTION
        )
    finally:
        await client.aio.aclose()


GEMINI_TEXT = Reply.json(
    {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": "Take an umbrella."}]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "modelVersion": "gemini-admission-test-1",
    }
)


@dataclass(frozen=True)
class Case:
    send: Send
    model: str
    # Read when the test runs, so that a missing fixtures folder skips instead of failing.
    answer: Callable[[], Reply]
    # The output budget that fills the window exactly, from the prompt's count.
    fill: Callable[[int], int]
    error: type[Exception]
    phrase: str


CASES = {
    "openai_chat": Case(
        chat,
        "gpt-4o",
        lambda: Reply.fixture("openai-chat/pai-nonstream-after-2-tool-results.json"),
        lambda prompt: 16_000 - prompt,
        openai.BadRequestError,
        "This model's maximum context length is 16000 tokens.",
    ),
    "openai_responses": Case(
        responses,
        "gpt-4o",
        lambda: Reply.fixture("openai-responses/pai-nonstream-after-function-output.json"),
        lambda prompt: 16_000 - prompt,
        openai.BadRequestError,
        "Your input exceeds the context window of this model.",
    ),
    "anthropic": Case(
        messages,
        "claude-haiku-4-5-20251001",
        lambda: Reply.fixture("anthropic/pai-nonstream-after-4-tool-results.json"),
        lambda prompt: 60_000 - prompt,
        anthropic.BadRequestError,
        "input length and `max_tokens` exceed context limit: ",
    ),
    "gemini": Case(
        generate,
        "gemini-admission-test-1",
        lambda: GEMINI_TEXT,
        lambda prompt: prompt,
        genai_errors.ClientError,
        "The input token count (",
    ),
}


def prompt_tokens(stack: Stack, model: str) -> int:
    """The count of the body the upstream got: the final bytes, as turngate counts them."""
    policy = policy_of(gemini_limit(1_000))
    entry = policy.model_entry(model)
    assert entry is not None
    return count_request(stack.upstream.received[-1].json(), entry, policy.media).total


def gemini_limit(limit: int, **row: Any) -> dict[str, Any]:
    gemini = {"match": "gemini-admission-test*", "max_input_tokens": limit, **row}
    return {"models": [gemini, *SMALL_WINDOWS]}


@pytest.mark.parametrize("api", list(CASES))
async def test_one_token_over_the_window_is_refused_before_any_send_one_under_is_sent(
    aiohttp_server: Any, api: str
):
    case = CASES[api]

    async def started(policy: dict[str, Any]) -> Stack:
        stack = await start_policy_stack(aiohttp_server, policy=policy)
        stack.upstream.reply(case.answer())
        return stack

    stack = await started(gemini_limit(1_000))
    await case.send(stack, 16)
    prompt = prompt_tokens(stack, case.model)
    assert 10 < prompt < 200
    fits = case.fill(prompt)
    if api == "gemini":
        # Gemini limits input only: the file's row is set at the prompt, then one under it.
        stack = await started(gemini_limit(fits))
        await case.send(stack, 0)
        assert prompt_tokens(stack, case.model) == prompt
        stack = await started(gemini_limit(fits - 1))
        with pytest.raises(case.error) as raised:
            await case.send(stack, 0)
        assert stack.upstream.received == []
    else:
        # Exactly at the window: sent, and counted the same as the first.
        await case.send(stack, fits)
        assert len(stack.upstream.received) == 2
        assert prompt_tokens(stack, case.model) == prompt
        with pytest.raises(case.error) as raised:
            await case.send(stack, fits + 1)
        assert len(stack.upstream.received) == 2
    error = raised.value
    assert getattr(error, "status_code", getattr(error, "code", None)) == 400
    assert case.phrase in str(error)
    assert "context_length_exceeded" in str(error)
    if isinstance(error, openai.BadRequestError):
        assert error.code == "context_length_exceeded"
        assert error.param == ("messages" if api == "openai_chat" else "input")
    COUNTS[f"admission through the proxy: boundary refused with 0 sends, {api}"] += 1


async def test_disabled_admission_and_unlisted_models_are_left_to_the_provider(
    aiohttp_server: Any,
):
    request = {
        "model": "gpt-4o",
        "max_completion_tokens": 16_000,
        "messages": [{"role": "user", "content": QUESTION}],
    }
    windows = {"models": SMALL_WINDOWS}
    off = {**windows, "routes": [{"match": {"model": "gpt-4o"}, "admission": {"enabled": False}}]}
    unlisted = {**request, "model": "unlisted-model", "max_completion_tokens": 10_000_000}
    for policy, body in ((windows, unlisted), (off, request)):
        stack = await start_policy_stack(aiohttp_server, policy=policy)
        stack.upstream.reply(CASES["openai_chat"].answer())
        status, _headers, _answer = await post(stack, "/openai/v1/chat/completions", body)
        assert status == 200
        assert [r.json() for r in stack.upstream.received] == [body]
    stack = await start_policy_stack(aiohttp_server, policy=windows)
    status, headers, _answer = await post(stack, "/openai/v1/chat/completions", request)
    assert (status, headers["Turngate-Rejection"]) == (400, "context_length_exceeded")
    assert stack.upstream.received == []


async def test_a_shadowed_request_over_the_window_is_sent_and_recorded(aiohttp_server: Any):
    shadowed = {"defaults": {"mode": "shadow"}, "models": SMALL_WINDOWS}
    stack = await start_policy_stack(aiohttp_server, policy=shadowed)
    stack.upstream.reply(CASES["openai_chat"].answer())
    request = {
        "model": "gpt-4o",
        "max_completion_tokens": 16_000,
        "messages": [{"role": "user", "content": QUESTION}],
    }
    status, _headers, _answer = await post(stack, "/openai/v1/chat/completions", request)
    assert status == 200
    (record,) = await shadow_records(stack)
    assert record["rules"] == ["context_length_exceeded"]


async def test_a_nullable_json_schema_type_in_a_tool_is_counted_not_a_crash(
    aiohttp_server: Any,
):
    stack = await start_policy_stack(aiohttp_server, policy={})
    stack.upstream.reply(CASES["openai_chat"].answer())
    parameters = {"type": "object", "properties": {"city": {"type": ["string", "null"]}}}
    request = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": QUESTION}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": parameters}}],
    }
    status, _headers, _answer = await post(stack, "/openai/v1/chat/completions", request)
    assert status == 200


def asking(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "defaults": {"admission": {"count_tokens_endpoint": True}},
        "models": SMALL_WINDOWS,
        **(extra or {}),
    }


@pytest.mark.parametrize(
    ("provider_says", "expected"),
    [("fits", 200), ("too long", 400), ("fails", 400)],
)
async def test_the_providers_count_decides_where_the_estimate_would_refuse(
    aiohttp_server: Any, provider_says: str, expected: int
):
    case = CASES["anthropic"]
    stack = await start_policy_stack(aiohttp_server, policy=asking())
    stack.upstream.reply(case.answer())
    await case.send(stack, 16)
    # An estimate needs no call: the count endpoint was not asked.
    assert [r.path_qs for r in stack.upstream.received] == ["/v1/messages"]
    estimate = prompt_tokens(stack, case.model)
    over_by_one = case.fill(estimate) + 1
    exact = {"fits": estimate - 1, "too long": estimate + 1, "fails": None}[provider_says]
    counted = Reply.json({"input_tokens": exact}) if exact is not None else Reply(status=500)
    stack.upstream.reply(counted, path="/v1/messages/count_tokens")
    stack.upstream.received.clear()
    if expected == 200:
        await case.send(stack, over_by_one)
    else:
        with pytest.raises(case.error) as raised:
            await case.send(stack, over_by_one)
        how = "estimated" if exact is None else "counted"
        assert f"(turngate: {how} before sending, nothing was sent;" in str(raised.value)
    paths = [r.path_qs for r in stack.upstream.received]
    assert paths == ["/v1/messages/count_tokens"] + (["/v1/messages"] if expected == 200 else [])
    asked = stack.upstream.received[0]
    # With the caller's own credentials (the SDK sends them as a Bearer token).
    assert any(ANTHROPIC_KEY in value for value in asked.headers.values())
    assert asked.json() == {
        "model": case.model,
        "messages": [{"role": "user", "content": QUESTION}],
    }


async def test_gemini_asks_count_tokens_on_its_own_route(aiohttp_server: Any):
    case = CASES["gemini"]
    estimated = gemini_limit(1_000, counting="estimate", factor=1.2)
    stack = await start_policy_stack(aiohttp_server, policy=estimated)
    stack.upstream.reply(case.answer())
    await case.send(stack, 0)
    entry = policy_of(estimated).model_entry(case.model)
    assert entry is not None
    prompt = count_request(stack.upstream.received[0].json(), entry, policy_of({}).media).total
    limit = gemini_limit(prompt - 1, counting="estimate", factor=1.2)
    stack = await start_policy_stack(aiohttp_server, policy=asking(limit))
    stack.upstream.reply(case.answer())
    stack.upstream.reply(
        Reply.json({"totalTokens": prompt - 1}),
        path="/v1beta/models/gemini-admission-test-1:countTokens",
    )
    await case.send(stack, 0)
    (asked, sent) = stack.upstream.received
    assert asked.path_qs == "/v1beta/models/gemini-admission-test-1:countTokens"
    assert asked.json() == {
        "generateContentRequest": {
            "model": "models/gemini-admission-test-1",
            "contents": sent.json()["contents"],
        }
    }
    assert sent.path_qs == "/v1beta/models/gemini-admission-test-1:generateContent"


async def test_an_older_model_counts_with_its_encoding_loaded_on_first_use(aiohttp_server: Any):
    """gpt-4-turbo counts with cl100k, which turngate no longer loads at start (46 MiB that
    most deployments never use): its first request loads it, and the window holds exactly."""
    stack = await start_policy_stack(aiohttp_server, policy=gemini_limit(1_000))
    stack.upstream.reply(CASES["openai_chat"].answer())

    async def ask(budget: int) -> Any:
        return await chat(stack, budget, model="gpt-4-turbo")

    await ask(16)
    assert encoding_loaded("cl100k_base")
    prompt = prompt_tokens(stack, "gpt-4-turbo")
    await ask(4_000 - prompt)
    with pytest.raises(openai.BadRequestError) as raised:
        await ask(4_000 - prompt + 1)
    assert raised.value.code == "context_length_exceeded"
    assert len(stack.upstream.received) == 2


def test_serve_loads_only_the_o200k_vocabulary_at_start() -> None:
    """In a fresh process, as `turngate serve` starts: o200k loaded, cl100k not."""
    script = """
import asyncio
from aiohttp.test_utils import TestServer
from turngate.policies.tokens import encoding_loaded
from turngate.proxy.app import create_app
from turngate.settings import Settings

async def main():
    server = TestServer(create_app(Settings(state="memory://"), credential_secret="s"))
    await server.start_server()
    try:
        print(encoding_loaded("o200k_base"), encoding_loaded("cl100k_base"))
    finally:
        await server.close()

asyncio.run(main())
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]


async def test_a_scanned_pdf_is_sent_not_refused_by_its_size(stack: Stack):
    # 8 MB of scanned pages, 4 pages: about 12k tokens to Anthropic; charged by its size it
    # was 262k, over claude-haiku-4-5's window, and refused before the provider saw it.
    stack.upstream.reply(claude_answer("The invoice totals 1,240 EUR."))
    data = base64.b64encode(scanned_pdf(4, 8 * 1024 * 1024)).decode()
    document = {"type": "base64", "media_type": "application/pdf", "data": data}
    async with anthropic.AsyncAnthropic(
        api_key=ANTHROPIC_KEY, base_url=stack.base("/anthropic"), max_retries=0
    ) as sdk:
        answer = await sdk.messages.create(
            model="claude-haiku-4-5",
            max_tokens=1024,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "document", "source": document},
                        {"type": "text", "text": "What does the invoice total?"},
                    ],
                }
            ],
        )
    assert answer.content[0].text == "The invoice totals 1,240 EUR."  # type: ignore[union-attr]
    assert len(stack.upstream.received) == 1
