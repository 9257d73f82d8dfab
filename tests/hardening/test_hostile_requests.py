"""Hostile requests through a real turngate socket: every row ends in the API's own error
envelope (or aiohttp's 400, or a closed connection) within the configured limits, nothing
reaches the upstream, and /healthz answers afterwards."""

from __future__ import annotations

import gc
import io
import time
from typing import Any

import aiohttp
import orjson
import pytest

from tests.hardening.conftest import BODY_TIMEOUT, HEADER_TIMEOUT, HardFactory, HardStack
from tests.hardening.wire import (
    ROUTES,
    healthy,
    raw_exchange,
    rejection_code,
    rss_bytes,
    valid_body,
)
from tests.proxy.helpers import CHAT_ANSWER
from turngate.proxy.app import SERVICES as SERVICES_KEY
from turngate.proxy.body import MAX_JSON_CONTAINERS, MAX_JSON_DEPTH
from turngate.proxy.limits import LINGERING_TIME, MAX_FIELD_SIZE, MAX_HEADERS, MAX_LINE_SIZE

SMALL_LIMIT = 64 * 1024
# Slack for a loaded machine on top of a deadline.
SLACK = 2.0


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


def with_extra(api: str, raw_extra: bytes) -> bytes:
    """A valid body of ``api`` with ``raw_extra`` spliced in as its first member."""
    valid = orjson.dumps(valid_body(api))
    return b"{" + raw_extra + b"," + valid[1:]


BODY_ROWS = [
    pytest.param(
        lambda api: with_extra(api, b'"pad":"' + b"x" * (SMALL_LIMIT + 1) + b'"'),
        {},
        413,
        "request_too_large",
        id="oversized",
    ),
    pytest.param(
        lambda api: with_extra(api, b'"deep":' + orjson.dumps(nested(MAX_JSON_DEPTH + 1))),
        {},
        400,
        "json_too_deep",
        id="deep-nesting",
    ),
    pytest.param(
        lambda api: b"[" * 20_000 + b"]" * 20_000,
        {},
        400,
        "json_too_deep",
        id="deeper-than-orjson",
    ),
    pytest.param(
        lambda api: with_extra(api, b'"note":"caf\xc3"'), {}, 400, "invalid_utf8", id="invalid-utf8"
    ),
    pytest.param(
        lambda api: with_extra(api, b'"note":"\xed\xa0\x80"'),
        {},
        400,
        "invalid_utf8",
        id="utf8-surrogate",
    ),
    pytest.param(
        lambda api: with_extra(api, b'"model":"first","model":"second"'),
        {},
        400,
        "duplicate_json_key",
        id="duplicate-key",
    ),
    pytest.param(lambda api: b"model=gpt-4o&messages=hi", {}, 400, "invalid_json", id="non-json"),
    pytest.param(lambda api: b"", {}, 400, "invalid_json", id="empty"),
    pytest.param(lambda api: b"[1,2,3]", {}, 400, "invalid_json", id="array"),
    pytest.param(lambda api: b'"just a string"', {}, 400, "invalid_json", id="scalar"),
    pytest.param(
        lambda api: orjson.dumps(valid_body(api)),
        {"Content-Type": "text/plain"},
        415,
        "unsupported_media_type",
        id="wrong-content-type",
    ),
]


@pytest.mark.parametrize("api", sorted(ROUTES))
@pytest.mark.parametrize(("make_body", "headers", "status", "rule"), BODY_ROWS)
async def test_hostile_bodies_get_the_apis_own_error_and_nothing_is_sent(
    make_hard_stack: HardFactory,
    api: str,
    make_body: Any,
    headers: dict[str, str],
    status: int,
    rule: str,
) -> None:
    stack = await make_hard_stack(max_body_bytes=SMALL_LIMIT)
    sent_headers = {"Content-Type": "application/json", **headers}
    async with (
        aiohttp.ClientSession() as session,
        session.post(stack.url + ROUTES[api], data=make_body(api), headers=sent_headers) as resp,
    ):
        answer = await resp.read()
        assert resp.status == status, answer
        assert resp.headers["Turngate-Rejection"] == rule
    assert rejection_code(api, answer) == rule
    assert stack.upstream.received == []
    assert await healthy(stack)


async def test_repeated_keys_in_strings_and_sibling_objects_are_not_duplicates(
    make_hard_stack: HardFactory,
) -> None:
    stack = await make_hard_stack()
    stack.upstream.reply(CHAT_ANSWER)
    request = valid_body("openai_chat")
    request["messages"] = [
        {"role": "user", "content": 'say {"role": "x", "role": "y"} and "a" : "a" :'},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "again\\"},
    ]
    async with (
        aiohttp.ClientSession() as session,
        session.post(stack.url + ROUTES["openai_chat"], json=request) as resp,
    ):
        assert resp.status == 200, await resp.read()
    assert len(stack.upstream.received) == 1


def head(target: bytes, extra: bytes = b"") -> bytes:
    return b"GET " + target + b" HTTP/1.1\r\nHost: turngate\r\n" + extra + b"\r\n"


WIRE_ROWS = [
    pytest.param(head(b"/healthz?" + b"a" * MAX_LINE_SIZE), id="request-line-too-long"),
    pytest.param(
        head(b"/healthz", b"X-Big: " + b"a" * (MAX_FIELD_SIZE + 1) + b"\r\n"), id="header-too-long"
    ),
    pytest.param(
        head(b"/healthz", b"".join(b"X-H%d: 1\r\n" % i for i in range(MAX_HEADERS + 1))),
        id="too-many-headers",
    ),
    pytest.param(b"GARBAGE\r\n\r\n", id="not-http"),
    pytest.param(b"GET /healthz HTTP/9.9\r\nHost: t\r\n\r\n", id="bad-version"),
    pytest.param(
        b"POST /openai/v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        id="length-and-chunked",
    ),
    pytest.param(
        b"POST /openai/v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n",
        id="negative-length",
    ),
]


@pytest.mark.parametrize("raw", WIRE_ROWS)
async def test_malformed_http_is_400_and_closed(make_hard_stack: HardFactory, raw: bytes) -> None:
    stack = await make_hard_stack()
    result = await raw_exchange(stack.port, [raw], wait=5.0)
    assert result.status == 400, result.data[:200]
    assert result.closed_after < SLACK
    assert stack.upstream.received == []
    assert await healthy(stack)


METHOD_ROWS = [
    ("PUT", "/healthz", 405),
    ("DELETE", "/turngate/v1/shadow", 405),
    ("POST", "/turngate/v1/operations/op_x", 405),
    ("TRACE", "/openai/v1/chat/completions", 405),
    ("CONNECT", "/anthropic/v1/messages", 405),
    ("PROPFIND", "/gemini/v1beta/models", 405),
]


@pytest.mark.parametrize(("method", "path", "status"), METHOD_ROWS)
async def test_wrong_methods_are_405_and_never_relayed(
    make_hard_stack: HardFactory, method: str, path: str, status: int
) -> None:
    stack = await make_hard_stack()
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, stack.url + path) as resp,
    ):
        assert resp.status == status
        if status == 405:
            assert resp.headers["Allow"]
            assert orjson.loads(await resp.read())["error"]["code"] == "method_not_allowed"
    assert stack.upstream.received == []
    assert await healthy(stack)


CHAT_BODY = orjson.dumps(valid_body("openai_chat"))
CHAT_HEAD = (
    b"POST /openai/v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n" % len(CHAT_BODY)
)
SLOW_ROWS = [
    # The request line and headers one byte at a time, never finished.
    pytest.param(
        [bytes([b]) for b in CHAT_HEAD[:-2]], HEADER_TIMEOUT, None, id="slowloris-headers"
    ),
    # A connection that opens and sends nothing.
    pytest.param([], HEADER_TIMEOUT, None, id="silent-connection"),
    # Headers at once, then the body one byte at a time.
    pytest.param(
        [CHAT_HEAD, *(bytes([b]) for b in CHAT_BODY)],
        BODY_TIMEOUT + LINGERING_TIME,
        408,
        id="slow-body",
    ),
    # Headers promise a body that never comes.
    pytest.param([CHAT_HEAD], BODY_TIMEOUT + LINGERING_TIME, 408, id="missing-body"),
]


@pytest.mark.parametrize(("pieces", "deadline", "status"), SLOW_ROWS)
async def test_slow_clients_are_cut_off_within_the_configured_deadline(
    make_hard_stack: HardFactory, pieces: list[bytes], deadline: float, status: int | None
) -> None:
    stack = await make_hard_stack()
    result = await raw_exchange(stack.port, pieces, pause=0.1, wait=deadline + 3 * SLACK)
    assert result.status == status, result.data[:300]
    assert result.closed_after < deadline + SLACK
    if status == 408:
        body = result.data.split(b"\r\n\r\n", 1)[1]
        assert orjson.loads(body)["error"]["code"] == "request_timeout"
    assert stack.upstream.received == []
    assert await healthy(stack)


UPLOAD = b"--b\r\nContent-Disposition: form-data; name=purpose\r\n\r\nbatch\r\n--b--\r\n"
UPLOAD_HEAD = (
    b"POST /openai/v1/files HTTP/1.1\r\nHost: t\r\n"
    b"Content-Type: multipart/form-data; boundary=b\r\nContent-Length: %d\r\n\r\n" % len(UPLOAD)
)


async def test_a_relayed_body_that_stalls_gets_408_and_the_upstream_no_request(
    make_hard_stack: HardFactory,
) -> None:
    stack = await make_hard_stack()
    pieces = [UPLOAD_HEAD, UPLOAD[:10]]
    deadline = BODY_TIMEOUT + LINGERING_TIME
    result = await raw_exchange(stack.port, pieces, pause=0.1, wait=deadline + 3 * SLACK)
    assert result.status == 408, result.data[:300]
    assert result.closed_after < deadline + SLACK
    body = result.data.split(b"\r\n\r\n", 1)[1]
    assert orjson.loads(body)["error"]["code"] == "request_timeout"
    assert stack.upstream.received == []
    assert await healthy(stack)


async def test_a_relayed_body_that_keeps_coming_is_relayed_whole_past_the_idle_timeout(
    make_hard_stack: HardFactory,
) -> None:
    """The relay's deadline is between two reads (a large upload may be slow): a body that
    takes twice the timeout in all, but never pauses that long, reaches the upstream."""
    stack = await make_hard_stack()
    stack.upstream.reply(CHAT_ANSWER)
    step = len(UPLOAD) // 8 + 1
    pieces = [UPLOAD_HEAD] + [UPLOAD[i : i + step] for i in range(0, len(UPLOAD), step)]
    pause = 2 * BODY_TIMEOUT / len(pieces)
    assert pause < BODY_TIMEOUT / 2
    result = await raw_exchange(stack.port, pieces, pause=pause, wait=2.0)
    assert result.status == 200, result.data[:300]
    assert [(r.method, r.path_qs, r.body) for r in stack.upstream.received] == [
        ("POST", "/v1/files", UPLOAD)
    ]


async def post_timed(stack: HardStack, raw: bytes) -> tuple[int, str | None, float, int]:
    gc.collect()
    before = rss_bytes()
    started = time.monotonic()
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            stack.url + ROUTES["openai_chat"],
            data=io.BytesIO(raw),
            headers={"Content-Type": "application/json"},
            timeout=aiohttp.ClientTimeout(total=120),
        ) as resp,
    ):
        await resp.read()
        status, rule = resp.status, resp.headers.get("Turngate-Rejection")
    elapsed = time.monotonic() - started
    gc.collect()
    return status, rule, elapsed, rss_bytes() - before


def conversation_bytes(messages: int) -> bytes:
    turns = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    return orjson.dumps({"model": "gpt-4o", "messages": turns * (messages // 2)})


async def test_a_million_messages_within_the_byte_limit_are_refused_fast(
    make_hard_stack: HardFactory,
) -> None:
    stack = await make_hard_stack()
    stack.upstream.reply(CHAT_ANSWER)
    raw = conversation_bytes(1_000_000)
    assert len(raw) < stack.app[SERVICES_KEY].settings.max_body_bytes
    status, rule, elapsed, grown = await post_timed(stack, raw)
    print(
        f"\n1M messages, {len(raw) / 1e6:.1f} MB: {status} {rule}, {elapsed:.2f} s, "
        f"RSS {grown / 1e6:+.0f} MB after the request"
    )
    assert (status, rule) == (413, "request_too_large")
    assert elapsed < 10
    assert grown < 300e6
    assert stack.upstream.received == []
    assert await healthy(stack)


async def test_the_largest_accepted_conversation_costs_bounded_time(
    make_hard_stack: HardFactory,
) -> None:
    stack = await make_hard_stack()
    stack.upstream.reply(CHAT_ANSWER)
    # One container per message plus the body itself: just under the limit.
    raw = conversation_bytes(MAX_JSON_CONTAINERS - 2)
    status, rule, elapsed, grown = await post_timed(stack, raw)
    print(
        f"\n{MAX_JSON_CONTAINERS - 2} messages, {len(raw) / 1e6:.1f} MB: {status} {rule}, "
        f"{elapsed:.2f} s, RSS {grown / 1e6:+.0f} MB after the request"
    )
    assert rule != "request_too_large"
    # ~13 us per message on an idle machine; the bound leaves room for a busy one.
    assert elapsed < 30
    assert grown < 200e6
    assert await healthy(stack)


async def test_a_burst_of_hostile_requests_leaves_memory_bounded(
    make_hard_stack: HardFactory,
) -> None:
    stack = await make_hard_stack(max_body_bytes=SMALL_LIMIT)
    bodies = [
        b'{"a":"' + b"x" * (SMALL_LIMIT + 1) + b'"}',
        b"[" * 10_000,
        b'{"a":"\xff"}',
        b'{"a":1,"a":2}',
        orjson.dumps({"deep": nested(MAX_JSON_DEPTH + 1)}),
    ]

    async def burst(session: aiohttp.ClientSession) -> None:
        for _ in range(60):
            for raw in bodies:
                async with session.post(
                    stack.url + ROUTES["anthropic"],
                    data=raw,
                    headers={"Content-Type": "application/json"},
                ) as resp:
                    assert resp.status in (400, 413)
                    await resp.read()

    async with aiohttp.ClientSession() as session:
        await burst(session)  # warm-up: allocator arenas, caches
        gc.collect()
        before = rss_bytes()
        await burst(session)
        await burst(session)
    gc.collect()
    grown = rss_bytes() - before
    print(f"\n600 hostile requests after warm-up: RSS {grown / 1e6:+.1f} MB")
    assert grown < 32e6
    assert stack.upstream.received == []
    assert await healthy(stack)
