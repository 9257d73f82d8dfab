"""Shadow mode through the proxy: every recorded request goes up byte for byte, its diff is
kept in the state store, and a seeded mismatch shows up in GET /turngate/v1/shadow and in
`turngate shadow report`."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.fixtures_dir import (
    COUNTS,
    FIXTURES_DIR,
    FIXTURES_PRESENT,
    fixture_params,
    fixture_paths,
)
from tests.proxy import seeded_chat
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import CHAT_ANSWER, get, operation, post
from tests.proxy.policy_stack import shadow_records, shadow_report, start_policy_stack
from tests.proxy.stack import Stack
from tests.proxy.test_dispatch import REFUSED_BEFORE_THE_PROVIDER, recorded_exchanges
from turngate.policies.config import PolicyFile
from turngate.policies.pins import AdapterRegistry

REPO = Path(__file__).resolve().parents[2]
SHADOW = {"defaults": {"mode": "shadow"}}
CHAT = "/openai/v1/chat/completions"
SWAPPED = "changed messages[*].tool_call_id"

StackMaker = Callable[..., Any]


@pytest.fixture
def make(aiohttp_server: Any) -> StackMaker:
    async def start(**options: Any) -> Stack:
        return await start_policy_stack(aiohttp_server, **options)

    return start


def fixture_bytes(relative: str) -> bytes:
    return (FIXTURES_DIR / relative).read_bytes()


@pytest.mark.parametrize(("request_file", "answer", "path", "status_code"), recorded_exchanges())
async def test_shadow_sends_every_recorded_request_unchanged_and_records_its_diff(
    make: StackMaker, request_file: str, answer: str, path: str, status_code: int
):
    stack = await make(policy=SHADOW)
    raw = fixture_bytes(request_file)
    stack.upstream.reply(Reply.fixture(answer, status=status_code))
    status, headers, body = await post(stack, path, raw, {"Authorization": "Bearer k"})

    # What the provider gets and what the client gets back: as if turngate were not there.
    (received,) = stack.upstream.received
    assert received.body == raw
    assert (status, body) == (status_code, fixture_bytes(answer))
    assert "Turngate-Rejection" not in headers
    if "Turngate-Operation-Id" not in headers:
        # Vertex paths are not parsed routes: relayed, nothing to shadow.
        assert await shadow_records(stack) == []
        return
    (record,) = await shadow_records(stack)
    assert record["operationId"] == headers["Turngate-Operation-Id"]
    assert record["bytes"] == {
        "equal": True,
        "sentLength": len(raw),
        "wouldSendLength": len(raw),
        "firstDifference": None,
    }
    assert record["semantic"] == {"total": 0, "changes": []}
    refused = REFUSED_BEFORE_THE_PROVIDER.get(request_file)
    # What enforcing would have refused is recorded; these recordings passed the provider.
    assert record["rules"] == ([refused] if refused else [])
    report = await shadow_report(stack)
    assert (report["records"], report["bytesUnchanged"]) == (1, 1)
    manifest = (await operation(stack, headers["Turngate-Operation-Id"]))["manifest"]
    assert manifest["policyDigest"] == PolicyFile.model_validate(SHADOW).defaults.digest
    COUNTS[f"shadow through the proxy: requests sent with 0 byte changes, {record['api']}"] += 1


@pytest.mark.parametrize("path", fixture_params("gemini/pai-vertex-*.request.json"))
async def test_vertex_request_bodies_shadowed_on_the_gemini_route_go_up_unchanged(
    make: StackMaker, path: Path
):
    # Vertex paths are relayed unparsed; their bodies are Gemini requests all the same, so
    # they are shadowed here on the Gemini API route: every recorded request body is covered.
    stack = await make(policy=SHADOW)
    raw = path.read_bytes()
    stack.upstream.reply(Reply.fixture("gemini/pai-vertex-text.sse"))
    route = "/gemini/v1beta/models/gemini-3-flash-preview:streamGenerateContent?alt=sse"
    status, headers, _body = await post(stack, route, raw)
    assert status == 200
    assert [r.body for r in stack.upstream.received] == [raw]
    (record,) = await shadow_records(stack)
    assert record["operationId"] == headers["Turngate-Operation-Id"]
    assert (record["api"], record["bytes"]["equal"], record["semantic"]["total"]) == (
        "gemini",
        True,
        0,
    )
    COUNTS["shadow through the proxy: requests sent with 0 byte changes, gemini"] += 1


def parallel_result_requests() -> list[Path]:
    out = []
    for path in fixture_paths("openai-chat/*.request.json"):
        roles = [m.get("role") for m in orjson.loads(path.read_bytes())["messages"]]
        if any(a == b == "tool" for a, b in itertools.pairwise(roles)):
            out.append(path)
    return out


@pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")
async def test_a_seeded_reordering_shows_in_the_report_and_the_cli(
    make: StackMaker, tmp_path: Path
):
    seeded = parallel_result_requests()
    assert seeded, "no recorded Chat request with parallel tool results"
    everything = fixture_paths("openai-chat/*.request.json")
    state = tmp_path / "state.db"
    # The renderer under test is version 2, pinned by the policy; the bytes sent stay the
    # client's own, only the record shows what version 2 would have sent.
    stack = await make(
        policy={"defaults": {"mode": "shadow", "adapter_versions": {"openai_chat": "2"}}},
        adapters=AdapterRegistry().register(seeded_chat.VERSION),
        state=f"sqlite://{state}",
    )
    stack.upstream.reply(Reply.fixture("openai-chat/pai-nonstream-2-tool-calls.json"))
    for path in everything:
        assert (await post(stack, CHAT, path.read_bytes()))[0] == 200
    assert [r.body for r in stack.upstream.received] == [p.read_bytes() for p in everything]

    report = await shadow_report(stack)
    assert report["records"] == len(everything)
    assert report["bytesChanged"] == report["semanticChanges"] == len(seeded)
    assert report["bytesUnchanged"] == len(everything) - len(seeded)
    assert report["wouldRefuse"] == 0
    (swapped,) = [row for row in report["byPath"] if row["path"] == SWAPPED]
    assert swapped["count"] == len(seeded)
    # Each reordering changes two results' ids.
    assert swapped["occurrences"] == 2 * len(seeded)
    assert len(swapped["examples"]) == min(3, len(seeded))
    example = swapped["examples"][0]
    assert example["api"] == "openai_chat"
    assert example["detail"].startswith("messages[")
    assert ".tool_call_id: " in example["detail"]
    records = await shadow_records(stack)
    assert {e["operationId"] for e in swapped["examples"]} <= {r["operationId"] for r in records}
    fewer = await shadow_report(stack, "?examples=1")
    assert [len(row["examples"]) for row in fewer["byPath"]] == [1] * len(fewer["byPath"])

    # The operator's view of the same store, from another process.
    command = [sys.executable, "-m", "turngate.cli", "shadow", "report", "--state"]
    text = subprocess.run(
        [*command, f"sqlite://{state}"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert f"shadow records: {len(everything)}\n" in text
    assert f"  bytes changed: {len(seeded)}\n" in text
    assert f"  {SWAPPED}: {len(seeded)} ({2 * len(seeded)} occurrences)\n" in text
    assert "    e.g. op_" in text
    as_json = subprocess.run(
        [*command, f"sqlite://{state}", "--json"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    assert orjson.loads(as_json) == report
    COUNTS["shadow through the proxy: seeded reorderings in the report"] += swapped["count"]


async def test_the_shadow_log_keeps_only_the_newest_records(make: StackMaker):
    stack = await make(policy={**SHADOW, "shadow_records": 2})
    stack.upstream.reply(CHAT_ANSWER)
    requests = [
        {"model": "gpt-4o", "messages": [{"role": "user", "content": f"question {n}"}]}
        for n in range(4)
    ]
    operations = []
    for request in requests:
        status, headers, _body = await post(stack, CHAT, request)
        assert status == 200
        operations.append(headers["Turngate-Operation-Id"])
    assert [r["operationId"] for r in await shadow_records(stack)] == operations[:1:-1]
    assert (await shadow_report(stack))["records"] == 2
    assert (await shadow_report(stack, "?limit=1"))["records"] == 1


async def test_the_report_endpoint_refuses_a_bad_query(make: StackMaker):
    stack = await make(policy=SHADOW)
    status, answer = await get(stack, "/turngate/v1/shadow?limit=-3")
    assert status == 400
    assert answer["error"]["code"] == "invalid_query"


async def test_a_chained_request_without_the_calls_outputs_shows_as_would_refuse(
    make: StackMaker,
):
    stack = await make(policy=SHADOW)
    path = "/openai/v1/responses"
    stack.upstream.reply(Reply.fixture("openai-responses/pai-nonstream-function-call.json"))
    ask = {"model": "gpt-4o", "input": "Capital of PotatoLand?"}
    status, _headers, body = await post(stack, path, ask)
    assert status == 200
    first = orjson.loads(body)
    stack.upstream.reply(Reply.fixture("openai-responses/pai-nonstream-after-function-output.json"))
    chained = {"model": "gpt-4o", "previous_response_id": first["id"], "input": "And then?"}
    status, headers, _body = await post(stack, path, chained)
    # Shadow changes nothing: sent as it came; the record says enforcing would refuse it.
    assert status == 200
    assert len(stack.upstream.received) == 2
    (record, _) = await shadow_records(stack)
    assert record["operationId"] == headers["Turngate-Operation-Id"]
    assert "missing_result" in record["rules"]
    assert (await shadow_report(stack))["wouldRefuse"] == 1


async def test_a_call_sent_back_without_its_reasoning_shows_as_would_refuse(make: StackMaker):
    stack = await make(policy=SHADOW)
    path = "/openai/v1/responses"
    answer = orjson.loads(fixture_bytes("openai-responses/pai-nonstream-function-call.json"))
    answer["output"].insert(0, {"type": "reasoning", "id": "rs_shadow_1", "summary": []})
    stack.upstream.reply(Reply.json(answer))
    ask = {"model": "gpt-5", "input": "Capital of PotatoLand?"}
    status, _headers, body = await post(stack, path, ask)
    assert status == 200
    call = orjson.loads(body)["output"][1]
    result = {"type": "function_call_output", "call_id": call["call_id"], "output": "Mashville"}
    stack.upstream.reply(Reply.fixture("openai-responses/pai-nonstream-after-function-output.json"))
    again = {"model": "gpt-5", "input": [{"role": "user", "content": "Capital?"}, call, result]}
    status, headers, _body = await post(stack, path, again)
    # Sent as it came; the record says enforcing would have refused it.
    assert status == 200
    assert len(stack.upstream.received) == 2
    record = next(
        r
        for r in await shadow_records(stack)
        if r["operationId"] == headers["Turngate-Operation-Id"]
    )
    assert "responses_reasoning_missing" in record["rules"]
