"""Batches: every chat request of a batch is checked before the batch is sent.

A provider runs a batch hours later and reports a request it refuses only in the batch's
results. Through turngate, the official SDKs' batch calls (anthropic's
``messages.batches.create``, its beta twin, google-genai's ``batches.create`` with inlined
requests) are refused at once, with the SDK's normal 400 naming each refused request and
its rule, and the provider receives nothing; a valid batch reaches it as the client's bytes.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import orjson
import pydantic
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from tests.adapters.anthropic_builders import assistant, tool_result, tool_use, user
from tests.adapters.anthropic_builders import body as claude_body
from tests.adapters.gemini_builders import call, model, response, text
from tests.adapters.gemini_builders import user as gemini_user
from tests.adapters.test_anthropic_rules import TABLE as ANTHROPIC_TABLE
from tests.adapters.test_gemini_rules import TABLE as GEMINI_TABLE
from tests.proxy.conftest import StackFactory
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import anthropic_sdk, genai_sdk, post
from tests.proxy.policy_stack import start_policy_stack
from tests.proxy.sdk_support import GENAI_AIOHTTP_WARNING
from tests.proxy.stack import Stack
from turngate.proxy import batches
from turngate.proxy.body import MAX_JSON_CONTAINERS

MESSAGE_BATCH = {
    "id": "msgbatch_01",
    "type": "message_batch",
    "processing_status": "in_progress",
    "request_counts": {"processing": 2, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0},
    "ended_at": None,
    "created_at": "2026-12-01T10:00:00Z",
    "expires_at": "2026-12-02T10:00:00Z",
    "archived_at": None,
    "cancel_initiated_at": None,
    "results_url": None,
}
GEMINI_BATCH = {
    "name": "batches/b-1",
    "metadata": {
        "@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch",
        "model": "models/gemini-2.5-flash",
        "displayName": "nightly",
        "state": "BATCH_STATE_PENDING",
    },
}

VALID_CLAUDE = claude_body(
    user("weather in Paris?"),
    assistant(tool_use("toolu_1")),
    user(tool_result("toolu_1")),
)
ORPHAN_CLAUDE = claude_body(user("hi"), assistant("hello"), user(tool_result("toolu_7")))
WAITING_CLAUDE = claude_body(user("hi"), assistant(tool_use("toolu_1"), tool_use("toolu_2")))


@pytest.fixture
async def stack(make_stack: StackFactory) -> Stack:
    """A batch keeps nothing in the state store: one store is enough."""
    return await make_stack()


def entry(custom_id: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"custom_id": custom_id, "params": params}


async def test_a_valid_anthropic_batch_is_sent_as_the_clients_bytes(make_stack: StackFactory):
    stack = await make_stack(record_bodies=True)
    stack.upstream.reply(Reply.json(MESSAGE_BATCH))
    async with anthropic_sdk(stack) as sdk:
        batch = await sdk.messages.batches.create(
            requests=[entry("a", VALID_CLAUDE), entry("b", claude_body(user("hello")))]
        )
        assert batch.id == "msgbatch_01"
        (sent,) = stack.upstream.received
        assert sent.path_qs == "/v1/messages/batches"
        assert sent.body == stack.client_bodies[0]


async def test_an_anthropic_batch_with_invalid_requests_is_refused_naming_each(stack: Stack):
    async with anthropic_sdk(stack) as sdk:
        requests = [
            entry("fine", VALID_CLAUDE),
            entry("orphan", ORPHAN_CLAUDE),
            entry("early", WAITING_CLAUDE),
        ]
        with pytest.raises(anthropic.BadRequestError) as raised:
            await sdk.messages.batches.create(requests=requests)
        assert stack.upstream.received == []
        error = raised.value
        assert error.response.headers["Turngate-Rejection"] == "orphan_result"
        assert "[orphan_result]" in error.message
        assert "[missing_result]" in error.message
        message = error.body["error"]["message"]  # type: ignore[index]
        assert message.startswith("turngate [orphan_result]: 2 of the batch's 3 requests")
        assert "requests[1] ('orphan')" in error.message
        assert "requests[2] ('early')" in error.message
        assert "'fine'" not in error.message
        refused = error.body["error"]["details"]["refused_requests"]  # type: ignore[index]
        assert [(r["location"], r["custom_id"], r["error_code"]) for r in refused] == [
            ("requests[1]", "orphan", "orphan_result"),
            ("requests[2]", "early", "missing_result"),
        ]


@pytest.mark.parametrize(
    ("case", "params", "rules"),
    [(case, params, rules) for case, params, _status, rules in ANTHROPIC_TABLE if rules],
    ids=[case for case, _params, _status, rules in ANTHROPIC_TABLE if rules],
)
async def test_every_invalid_anthropic_sequence_refuses_its_batch(
    stack: Stack, case: str, params: dict[str, Any], rules: list[str]
):
    async with anthropic_sdk(stack) as sdk:
        with pytest.raises(anthropic.BadRequestError) as raised:
            await sdk.messages.batches.create(
                requests=[entry("valid", VALID_CLAUDE), entry("bad", params)]
            )
        assert stack.upstream.received == []
        (refused,) = raised.value.body["error"]["details"]["refused_requests"]  # type: ignore[index]
        assert refused["custom_id"] == "bad"
        assert refused["error_code"] in rules, case


async def test_the_beta_batch_route_is_checked_too(stack: Stack):
    async with anthropic_sdk(stack) as sdk:
        with pytest.raises(anthropic.BadRequestError, match=r"orphan_result"):
            await sdk.beta.messages.batches.create(requests=[entry("orphan", ORPHAN_CLAUDE)])
        assert stack.upstream.received == []
        stack.upstream.reply(Reply.json(MESSAGE_BATCH))
        await sdk.beta.messages.batches.create(requests=[entry("fine", VALID_CLAUDE)])
        (sent,) = stack.upstream.received
        assert sent.path_qs == "/v1/messages/batches"


async def test_a_batch_is_judged_with_the_betas_it_was_created_with(stack: Stack):
    """A budget past max_tokens is refused unless the batch's ``anthropic-beta`` header
    turns on interleaved thinking, which lets the budget span the whole turn."""
    thinking = {"type": "enabled", "budget_tokens": 32000}
    requests = [entry("plan", claude_body(user("plan it"), thinking=thinking))]
    async with anthropic_sdk(stack) as sdk:
        with pytest.raises(anthropic.BadRequestError, match=r"anthropic_thinking_budget"):
            await sdk.beta.messages.batches.create(requests=requests)
        assert stack.upstream.received == []
        stack.upstream.reply(Reply.json(MESSAGE_BATCH))
        await sdk.beta.messages.batches.create(
            requests=requests,
            betas=["interleaved-thinking-2025-05-14"],
        )
    (sent,) = stack.upstream.received
    assert "interleaved-thinking-2025-05-14" in sent.headers["anthropic-beta"]


async def test_a_percent_encoded_batch_path_is_checked_as_the_provider_reads_it(stack: Stack):
    status, _headers, _body = await post(
        stack,
        "/anthropic/v1/messages/%62atches",
        {"requests": [entry("orphan", ORPHAN_CLAUDE)]},
    )
    assert status == 400
    assert stack.upstream.received == []


async def test_a_refused_batch_lists_every_refusal_and_names_the_first_five(stack: Stack):
    async with anthropic_sdk(stack) as sdk:
        requests = [entry(f"r{i}", ORPHAN_CLAUDE) for i in range(8)]
        with pytest.raises(anthropic.BadRequestError) as raised:
            await sdk.messages.batches.create(requests=requests)
        message = raised.value.body["error"]["message"]  # type: ignore[index]
        assert "requests[4] ('r4')" in message
        assert "requests[5]" not in message
        assert "and 3 more" in message
        refused = raised.value.body["error"]["details"]["refused_requests"]  # type: ignore[index]
        assert [r["custom_id"] for r in refused] == [f"r{i}" for i in range(8)]


async def test_a_shadowed_route_sends_an_invalid_batch_and_says_so(
    aiohttp_server: Any, caplog: pytest.LogCaptureFixture
):
    stack = await start_policy_stack(aiohttp_server, policy={"defaults": {"mode": "shadow"}})
    stack.upstream.reply(Reply.json(MESSAGE_BATCH))
    async with anthropic_sdk(stack) as sdk:
        with caplog.at_level("WARNING", logger="turngate.proxy"):
            await sdk.messages.batches.create(requests=[entry("orphan", ORPHAN_CLAUDE)])
        assert len(stack.upstream.received) == 1
        assert "would refuse 1 of the batch's 1 requests (orphan_result)" in caplog.text


async def test_a_batch_body_that_is_not_json_is_refused_in_the_apis_envelope(stack: Stack):
    status, headers, body = await post(stack, "/anthropic/v1/messages/batches", b"{not json")
    assert status == 400
    assert orjson.loads(body)["type"] == "error"
    assert headers["Turngate-Rejection"] == "invalid_json"
    assert stack.upstream.received == []


# -- Gemini ---------------------------------------------------------------------------------

ASK = gemini_user(text("weather in Paris?"))
VALID_GEMINI = [ASK, model(call("weather", {"city": "Paris"}, id="a"))]
VALID_GEMINI.append(gemini_user(response("weather", id="a")))


def inlined(contents: list[dict[str, Any]], key: str) -> dict[str, Any]:
    return {"contents": contents, "metadata": {"key": key}}


@pytest.fixture
async def recording(make_stack: StackFactory) -> Stack:
    return await make_stack(record_bodies=True)


@pytest.fixture
async def client(recording: Stack) -> AsyncIterator[genai.Client]:
    client = genai_sdk(recording)
    yield client
    await client.aio.aclose()


@GENAI_AIOHTTP_WARNING
async def test_a_valid_gemini_batch_is_sent_as_the_clients_bytes(
    recording: Stack, client: genai.Client
):
    stack = recording
    stack.upstream.reply(Reply.json(GEMINI_BATCH))
    job = await client.aio.batches.create(
        model="gemini-2.5-flash",
        src=[inlined(VALID_GEMINI, "one"), inlined([ASK], "two")],
        config=types.CreateBatchJobConfig(display_name="nightly"),
    )
    assert job.name == "batches/b-1"
    (sent,) = stack.upstream.received
    assert sent.path_qs.startswith("/v1beta/models/gemini-2.5-flash:batchGenerateContent")
    assert sent.body == stack.client_bodies[0]
    requests = orjson.loads(sent.body)["batch"]["inputConfig"]["requests"]["requests"]
    assert len(requests) == 2


def sdk_sends(request_body: dict[str, Any]) -> bool:
    """Whether google-genai accepts these contents (it refuses some, such as an unknown part
    kind or no contents at all, before sending: those cases are posted as raw JSON below)."""
    if not request_body["contents"]:
        return False
    try:
        for content in request_body["contents"]:
            types.Content.model_validate(content)
    except pydantic.ValidationError:
        return False
    return True


GEMINI_CASES = [(case, body, rules) for case, body, _status, rules in GEMINI_TABLE if rules]


def gemini_src(request_body: dict[str, Any]) -> list[dict[str, Any]]:
    bad = inlined(request_body["contents"], "bad")
    if "systemInstruction" in request_body:
        bad["config"] = {"system_instruction": request_body["systemInstruction"]}
    return [inlined(VALID_GEMINI, "valid"), bad]


@GENAI_AIOHTTP_WARNING
@pytest.mark.parametrize(
    ("case", "request_body", "rules"),
    [case for case in GEMINI_CASES if sdk_sends(case[1])],
    ids=[case[0] for case in GEMINI_CASES if sdk_sends(case[1])],
)
async def test_every_invalid_gemini_sequence_refuses_its_batch(
    recording: Stack, client: genai.Client, case: str, request_body: dict[str, Any], rules: set[str]
):
    stack = recording
    with pytest.raises(genai_errors.ClientError) as raised:
        await client.aio.batches.create(model="gemini-2.5-flash", src=gemini_src(request_body))
    assert raised.value.code == 400
    assert stack.upstream.received == []
    details = raised.value.details["error"]["details"]
    (violations,) = [d["fieldViolations"] for d in details if "fieldViolations" in d]
    assert [v["field"] for v in violations] == ["batch.inputConfig.requests.requests[1]"]
    assert violations[0]["reason"] in rules, case
    assert "('bad')" in violations[0]["description"]


@pytest.mark.parametrize(
    ("case", "request_body", "rules"),
    GEMINI_CASES,
    ids=[case[0] for case in GEMINI_CASES],
)
async def test_every_invalid_gemini_sequence_refuses_its_batch_sent_as_raw_json(
    stack: Stack, case: str, request_body: dict[str, Any], rules: set[str]
):
    entries = [
        {"request": {"model": "models/gemini-2.5-flash", "contents": VALID_GEMINI}},
        {"request": request_body, "metadata": {"key": "bad"}},
    ]
    status, headers, body = await post(
        stack,
        "/gemini/v1beta/models/gemini-2.5-flash:batchGenerateContent",
        {"batch": {"inputConfig": {"requests": {"requests": entries}}}},
    )
    assert status == 400
    assert stack.upstream.received == []
    assert headers["Turngate-Rejection"] in rules, case
    assert orjson.loads(body)["error"]["status"] == "INVALID_ARGUMENT"


# -- large batches --------------------------------------------------------------------------


async def test_a_batch_over_the_body_limit_is_relayed_unchecked_and_logged(
    make_stack: StackFactory, caplog: pytest.LogCaptureFixture
):
    """Anthropic takes batches of up to 256 MB: one larger than turngate reads whole goes
    up as it comes (as it did before batches were checked), and says so."""
    stack = await make_stack(max_body_bytes=4096, record_bodies=False)
    stack.upstream.reply(Reply.json(MESSAGE_BATCH))
    requests = [entry(f"r{i}", ORPHAN_CLAUDE) for i in range(20)]
    raw = orjson.dumps({"requests": requests})
    assert len(raw) > 4096
    with caplog.at_level("WARNING", logger="turngate.proxy"):
        status, _headers, _body = await post(stack, "/anthropic/v1/messages/batches", raw)
    assert status == 200
    (sent,) = stack.upstream.received
    assert sent.body == raw
    assert "a batch is relayed without checking its requests" in caplog.text


async def test_a_batch_of_more_containers_than_one_request_may_hold_is_relayed_unchecked(
    stack: Stack, caplog: pytest.LogCaptureFixture
):
    stack.upstream.reply(Reply.json(MESSAGE_BATCH))
    small = {"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [user("hi")]}
    requests = [entry(f"r{i}", small) for i in range(MAX_JSON_CONTAINERS // 4)]
    requests.append(entry("orphan", ORPHAN_CLAUDE))
    raw = orjson.dumps({"requests": requests})
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            stack.url + "/anthropic/v1/messages/batches",
            data=io.BytesIO(raw),
            headers={"Content-Type": "application/json"},
        ) as resp,
    ):
        assert resp.status == 200
    (sent,) = stack.upstream.received
    assert sent.body == raw
    assert "more JSON objects and arrays than one request may hold" in caplog.text


async def test_other_requests_go_on_while_a_large_batch_is_checked(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
):
    """The check yields to the event loop every few requests: a ticker task advances
    between the first request judged and the last."""
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    seen: list[int] = []
    judge = batches.judged

    def watched(services: Any, batch_entry: Any) -> Any:
        seen.append(ticks)
        return judge(services, batch_entry)

    monkeypatch.setattr(batches, "judged", watched)
    stack.upstream.reply(Reply.json(MESSAGE_BATCH))
    requests = [entry(f"r{i}", VALID_CLAUDE) for i in range(10 * batches.YIELD_EVERY)]
    task = asyncio.create_task(ticker())
    try:
        status, _headers, _body = await post(
            stack, "/anthropic/v1/messages/batches", {"requests": requests}
        )
    finally:
        task.cancel()
    assert status == 200
    assert len(seen) == len(requests)
    assert seen[-1] - seen[0] >= 9


async def test_a_bug_checking_a_batch_is_the_apis_500_and_nothing_is_sent(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
):
    def broken(services: Any, batch_entry: Any) -> Any:
        raise KeyError("a bug")

    monkeypatch.setattr(batches, "judged", broken)
    async with anthropic_sdk(stack) as sdk:
        with pytest.raises(anthropic.InternalServerError, match="nothing was sent"):
            await sdk.messages.batches.create(requests=[entry("fine", VALID_CLAUDE)])
    assert stack.upstream.received == []
