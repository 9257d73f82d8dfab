"""What turngate's stream commit boundary costs, against a bare aiohttp pass-through, same run.

Run: .venv/bin/python -m bench stream     (or: -m bench.stream_overhead [--quick] [--api API]
     [--pace MS] [--at-once N])
     --api openai_chat (default), openai_responses, anthropic or gemini: the same two streams
     written as that API's upstream writes them
     --pace, --at-once: the paced streams' gap between chunks (default 10 ms) and how many
     stream at once (default 64)

Processes as in bench/proxy_latency.py, each pinned: a fake upstream that streams realistic
chunks (Chat Completions: about 250 bytes each, id, model, fingerprint, one delta), a bare
aiohttp pass-through that relays the upstream's chunks as they come, and `turngate serve`
(memory:// and SQLite state). Two streams: 500 chunks of text, and one tool call whose
arguments come in 500 chunks (turngate holds them and relays the call whole at its stop).

The streams, per API (frames copied from the recordings in ../shared/fixtures):

- openai_chat: ``data: {chat.completion.chunk}`` frames, then ``data: [DONE]``;
- openai_responses: ``event:`` + ``data:`` frames numbered by ``sequence_number``
  (created, in_progress, the item and its part, the deltas, the ``.done`` events,
  ``response.completed``); each delta's ``obfuscation`` pads it to 16 characters, as the
  recordings' do;
- anthropic: Messages events, ``message_start`` to ``message_stop``;
- gemini: ``data:`` frames with CRLF framing and no terminator, written with the spacing
  Google writes (``": "`` after a key, no space after a comma: ``json.dumps`` with those
  separators gives the recordings' bytes; orjson writes no spaces). Every text chunk repeats
  the prompt's usage; the last chunk carries ``finishReason`` and the final usage. The tool
  call streams in the Vertex ``streamFunctionCallArguments`` form: ``{name, willContinue}``,
  then ``partialArgs`` pieces (each note in a few ``stringValue`` pieces, ``willContinue``
  on all but a note's last, which leaves it out as proto3 JSON leaves out a false), then an
  empty ``functionCall`` that ends the call. Gemini requests name no model in their body:
  the upstream picks the stream from the user's text.

Printed, per stream and proxy:

- time to first byte and total time of one stream (median of the runs), with the upstream
  writing as fast as it can;
- the added cost per chunk: (total through the proxy - total direct) / chunks, and
  turngate's over the bare pass-through's (target <= 1.3x); and the same after the first
  byte, (total - TTFB through the proxy - (total - TTFB direct)) / chunks, which leaves out
  what a request costs once before its stream starts (parse, validation, the claim: the
  TTFB column);
- CPU per chunk in the proxy process (utime + stime from /proc over many streams), with the
  upstream pacing its chunks as a model's tokens come: 64 streams at once, each writing a
  chunk every 10 ms, so most chunks are read on their own (`strace -c`, which slows both
  proxies: 1.35 chunks per read in the bare pass-through, 1.54 in turngate; faster pacing
  merges more: at one chunk every 0.5 ms, 16 at once, 4.3 and 2.4, and the two no longer did
  the same work per chunk); the average (a stream's CPU over its chunks, the request's own
  work included) and the marginal cost of a chunk (streams of 500 and of 100 chunks
  alternated: the difference in CPU per stream over the 400 chunks more, so what a request
  costs once drops out). Each is taken round by round (a batch of 64 streams per proxy and
  body, the proxies in turn) and the ratios to the bare pass-through are the median of the
  rounds' ratios, with their quartiles beside: on a shared machine one round can stray by a
  fifth either way;
- peak memory: the proxy's RSS growth while 1,000 streams are held open at once, per
  1,000 streams.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import re
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from bench.proxy_latency import LOAD_CORE, PROXY_CORE, free_port, start, wait_ready

CHAT = "/v1/chat/completions"
_STAMP = re.compile(rb"@(\d+)@")
CHUNKS = 500
SHORT = 100
PACE_MS = 10.0
AT_ONCE = 64
HOLD_STREAMS = 1000
_ENVELOPE = {
    "id": "chatcmpl-BENCHx0aLkq3N2TtZ5fYpQe9uR8sW",
    "object": "chat.completion.chunk",
    "created": 1754693440,
    "model": "gpt-4o-2024-08-06",
    "service_tier": "default",
    "system_fingerprint": "fp_07871e2ad8",
}


# -- what the upstream streams ------------------------------------------------------------


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    body = {**_ENVELOPE, "choices": [choice], "usage": None, "obfuscation": "NA5VZTdCK"}
    return b"data: " + orjson.dumps(body) + b"\n\n"


def text_stream(chunks: int = CHUNKS) -> list[bytes]:
    frames = [_chunk({"role": "assistant", "content": "", "refusal": None})]
    frames += [_chunk({"content": f" word{i}"}) for i in range(chunks)]
    return [*frames, _chunk({}, "stop"), b"data: [DONE]\n\n"]


def tool_arguments(chunks: int = CHUNKS) -> list[str]:
    """A JSON object cut into ``chunks`` fragments, as a model streams it."""
    whole = orjson.dumps({"notes": [f"item number {i}" for i in range(chunks // 3)]}).decode()
    size = -(-len(whole) // chunks)
    return [whole[at : at + size] for at in range(0, len(whole), size)]


def tool_stream(chunks: int = CHUNKS) -> list[bytes]:
    call = {"index": 0, "id": "call_bench", "type": "function"}
    opening = {**call, "function": {"name": "write_notes", "arguments": ""}}
    frames = [_chunk({"role": "assistant", "content": None, "tool_calls": [opening]})]
    frames += [
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        for piece in tool_arguments(chunks)
    ]
    return [*frames, _chunk({}, "tool_calls"), b"data: [DONE]\n\n"]


def request(kind: str) -> bytes:
    body: dict[str, Any] = {
        "model": f"bench-{kind}",
        "stream": True,
        "messages": [{"role": "user", "content": "go"}],
    }
    if kind.startswith("tools"):
        schema = {"type": "object", "properties": {"notes": {"type": "array"}}}
        body["tools"] = [
            {"type": "function", "function": {"name": "write_notes", "parameters": schema}}
        ]
    return orjson.dumps(body)


def _event(kind: str, payload: dict[str, Any]) -> bytes:
    data = orjson.dumps({"type": kind, **payload})
    return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


_MESSAGE: dict[str, Any] = {
    "id": "msg_01BENCHx0aLkq3N2TtZ5fYpQe",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [],
    "stop_reason": None,
    "stop_sequence": None,
    "usage": {"input_tokens": 25, "output_tokens": 1},
}


def anthropic_text_chunk(text: str) -> bytes:
    delta = {"type": "text_delta", "text": text}
    return _event("content_block_delta", {"index": 0, "delta": delta})


def _anthropic(block: dict[str, Any], deltas: list[bytes], reason: str) -> list[bytes]:
    return [
        _event("message_start", {"message": _MESSAGE}),
        _event("content_block_start", {"index": 0, "content_block": block}),
        *deltas,
        _event("content_block_stop", {"index": 0}),
        _event(
            "message_delta",
            {
                "delta": {"stop_reason": reason, "stop_sequence": None},
                "usage": {"output_tokens": 9},
            },
        ),
        _event("message_stop", {}),
    ]


def anthropic_text_stream(chunks: int = CHUNKS) -> list[bytes]:
    texts = [anthropic_text_chunk(f" word{i}") for i in range(chunks)]
    return _anthropic({"type": "text", "text": ""}, texts, "end_turn")


def anthropic_tool_stream(chunks: int = CHUNKS) -> list[bytes]:
    block = {"type": "tool_use", "id": "toolu_01BENCHx0aLkq3N2TtZ5fY", "name": "write_notes"}
    pieces = [
        _event(
            "content_block_delta",
            {"index": 0, "delta": {"type": "input_json_delta", "partial_json": p}},
        )
        for p in tool_arguments(chunks)
    ]
    return _anthropic({**block, "input": {}}, pieces, "tool_use")


def anthropic_request(kind: str) -> bytes:
    body: dict[str, Any] = {
        "model": f"bench-{kind}",
        "max_tokens": 1024,
        "stream": True,
        "messages": [{"role": "user", "content": "go"}],
    }
    if kind.startswith("tools"):
        schema = {"type": "object", "properties": {"notes": {"type": "array"}}}
        body["tools"] = [{"name": "write_notes", "input_schema": schema}]
    return orjson.dumps(body)


_SCHEMA = {"type": "object", "properties": {"notes": {"type": "array"}}}
_RESPONSE_ID = "resp_0bench4c7f5006bd0068e8278eec2481958c7ecb961293452a"
_MESSAGE_ID = "msg_0bench4c7f5006bd0068e8279117688190a9ef73d3fe552c76"
_CALL_ITEM_ID = "fc_0bench4c7f5006bd0068e827962aa8819592a7e51f7fa0d0b3"
_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_RANDOM = random.Random(1754693440)


def _obfuscation(delta: str) -> str:
    """Random letters and digits padding a delta to 16 characters, as OpenAI's do (none past
    16: the recordings hold no longer delta)."""
    return "".join(_RANDOM.choices(_ALNUM, k=max(0, 16 - len(delta))))


def _response(
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    tools: list[dict[str, Any]],
) -> dict[str, Any]:
    """A Responses ``response`` object, its fields in the order OpenAI writes them."""
    return {
        "id": _RESPONSE_ID,
        "object": "response",
        "created_at": 1759422719,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "max_tool_calls": None,
        "model": "gpt-4.1-2025-04-14",
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "prompt_cache_key": None,
        "reasoning": {"effort": None, "summary": None},
        "safety_identifier": None,
        "service_tier": "default" if status == "completed" else "auto",
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": tools,
        "top_logprobs": 0,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "user": None,
        "metadata": {},
    }


def _numbered(kind: str, seq: int, payload: dict[str, Any]) -> bytes:
    return _event(kind, {"sequence_number": seq, **payload})


def _responses_start(tools: list[dict[str, Any]]) -> list[bytes]:
    response = _response("in_progress", [], None, tools)
    return [
        _numbered("response.created", 0, {"response": response}),
        _numbered("response.in_progress", 1, {"response": response}),
    ]


def _responses_end(
    seq: int, item: dict[str, Any], output_tokens: int, tools: list[dict[str, Any]]
) -> bytes:
    usage = {
        "input_tokens": 12,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 12 + output_tokens,
    }
    response = _response("completed", [item], usage, tools)
    return _numbered("response.completed", seq, {"response": response})


# The frames before a Responses text stream's first delta: created, in_progress, the message
# item and its text part.
_RESPONSES_OPENING = 4


def responses_text_chunk(text: str, at: int) -> bytes:
    """The text delta at position ``at`` of the stream's deltas."""
    delta = {
        "item_id": _MESSAGE_ID,
        "output_index": 0,
        "content_index": 0,
        "delta": text,
        "logprobs": [],
        "obfuscation": _obfuscation(text),
    }
    return _numbered("response.output_text.delta", _RESPONSES_OPENING + at, delta)


def responses_text_stream(chunks: int = CHUNKS) -> list[bytes]:
    texts = [f" word{i}" for i in range(chunks)]
    item = {"id": _MESSAGE_ID, "type": "message", "status": "in_progress", "content": []}
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
    at = {"item_id": _MESSAGE_ID, "output_index": 0, "content_index": 0}
    opening = [
        *_responses_start([]),
        _numbered(
            "response.output_item.added",
            2,
            {"output_index": 0, "item": {**item, "role": "assistant"}},
        ),
        _numbered("response.content_part.added", 3, {**at, "part": part}),
    ]
    assert len(opening) == _RESPONSES_OPENING
    return [
        *opening,
        *(responses_text_chunk(text, i) for i, text in enumerate(texts)),
        *responses_text_closing("".join(texts), chunks),
    ]


def responses_text_closing(whole: str, chunks: int) -> list[bytes]:
    """The frames after ``chunks`` text deltas that came to ``whole``."""
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": whole}
    item = {
        "id": _MESSAGE_ID,
        "type": "message",
        "status": "completed",
        "content": [part],
        "role": "assistant",
    }
    at = {"item_id": _MESSAGE_ID, "output_index": 0, "content_index": 0}
    seq = _RESPONSES_OPENING + chunks
    return [
        _numbered("response.output_text.done", seq, {**at, "text": whole, "logprobs": []}),
        _numbered("response.content_part.done", seq + 1, {**at, "part": part}),
        _numbered("response.output_item.done", seq + 2, {"output_index": 0, "item": item}),
        _responses_end(seq + 3, item, chunks, []),
    ]


def responses_tool_stream(chunks: int = CHUNKS) -> list[bytes]:
    pieces = tool_arguments(chunks)
    arguments = "".join(pieces)
    tools = [
        {
            "type": "function",
            "description": None,
            "name": "write_notes",
            "parameters": _SCHEMA,
            "strict": False,
        }
    ]
    item = {
        "id": _CALL_ITEM_ID,
        "type": "function_call",
        "status": "in_progress",
        "arguments": "",
        "call_id": "call_bench",
        "name": "write_notes",
    }
    deltas = [
        _numbered(
            "response.function_call_arguments.delta",
            3 + i,
            {
                "item_id": _CALL_ITEM_ID,
                "output_index": 0,
                "delta": piece,
                "obfuscation": _obfuscation(piece),
            },
        )
        for i, piece in enumerate(pieces)
    ]
    done_item = {**item, "status": "completed", "arguments": arguments}
    seq = 3 + len(pieces)
    done = {"item_id": _CALL_ITEM_ID, "output_index": 0, "arguments": arguments}
    return [
        *_responses_start(tools),
        _numbered("response.output_item.added", 2, {"output_index": 0, "item": item}),
        *deltas,
        _numbered("response.function_call_arguments.done", seq, done),
        _numbered("response.output_item.done", seq + 1, {"output_index": 0, "item": done_item}),
        _responses_end(seq + 2, done_item, len(pieces), tools),
    ]


def responses_request(kind: str) -> bytes:
    body: dict[str, Any] = {"model": f"bench-{kind}", "input": "go", "stream": True}
    if kind.startswith("tools"):
        body["tools"] = [{"type": "function", "name": "write_notes", "parameters": _SCHEMA}]
    return orjson.dumps(body)


GEMINI = "/v1beta/models/bench:streamGenerateContent"
_GEMINI_PROMPT = 15
_GEMINI_USAGE = {
    "promptTokenCount": _GEMINI_PROMPT,
    "totalTokenCount": _GEMINI_PROMPT,
    "promptTokensDetails": [{"modality": "TEXT", "tokenCount": _GEMINI_PROMPT}],
}


def _gemini(parts: list[dict[str, Any]], finished: int | None = None) -> bytes:
    """One chunk; ``finished``: the last, with the count of the turn's output tokens."""
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}}
    usage = _GEMINI_USAGE
    if finished is not None:
        candidate["finishReason"] = "STOP"
        usage = {
            "promptTokenCount": _GEMINI_PROMPT,
            "candidatesTokenCount": finished,
            "totalTokenCount": _GEMINI_PROMPT + finished,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": _GEMINI_PROMPT}],
            "candidatesTokensDetails": [{"modality": "TEXT", "tokenCount": finished}],
        }
    body = {
        "candidates": [candidate],
        "usageMetadata": usage,
        "modelVersion": "gemini-2.0-flash",
        "responseId": "w1peaBENCHOvnvgPgYfPiQY",
    }
    data = json.dumps(body, ensure_ascii=False, separators=(",", ": "))
    return b"data: " + data.encode() + b"\r\n\r\n"


def gemini_text_chunk(text: str, _at: int = 0) -> bytes:
    return _gemini([{"text": text}])


def gemini_text_stream(chunks: int = CHUNKS) -> list[bytes]:
    texts = [gemini_text_chunk(f" word{i}") for i in range(chunks)]
    return [*texts, *gemini_text_closing("", chunks)]


def gemini_text_closing(_whole: str, chunks: int) -> list[bytes]:
    """The last chunk: no more text, the finish reason and the turn's usage."""
    return [_gemini([{"text": ""}], finished=chunks)]


def _split(text: str, pieces: int) -> list[str]:
    """``text`` cut into ``pieces`` runs of (nearly) equal length."""
    bounds = [len(text) * i // pieces for i in range(pieces + 1)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def gemini_tool_stream(chunks: int = CHUNKS) -> list[bytes]:
    """The call's notes in as many ``partialArgs`` pieces as ``tool_arguments`` has
    fragments, a few per note, each note's last ending its string."""
    count = len(tool_arguments(chunks))
    notes = orjson.loads("".join(tool_arguments(chunks)))["notes"]
    each, more = divmod(count, len(notes))
    frames = [_gemini([{"functionCall": {"name": "write_notes", "willContinue": True}}])]
    for k, note in enumerate(notes):
        cut = _split(note, each + (k < more))
        for at, piece in enumerate(cut):
            arg: dict[str, Any] = {"jsonPath": f"$.notes[{k}]", "stringValue": piece}
            if at < len(cut) - 1:
                arg["willContinue"] = True
            frames.append(_gemini([{"functionCall": {"partialArgs": [arg], "willContinue": True}}]))
    assert len(frames) == count + 1
    return [*frames, _gemini([{"functionCall": {}}]), _gemini([{"text": ""}], finished=count)]


def gemini_request(kind: str) -> bytes:
    body: dict[str, Any] = {"contents": [{"role": "user", "parts": [{"text": f"bench-{kind}"}]}]}
    if kind.startswith("tools"):
        declaration = {"name": "write_notes", "parameters": _SCHEMA}
        body["tools"] = [{"functionDeclarations": [declaration]}]
    return orjson.dumps(body)


def _model_of(body: dict[str, Any]) -> str:
    return str(body["model"])


def _gemini_kind(body: dict[str, Any]) -> str:
    return str(body["contents"][0]["parts"][0]["text"])


@dataclass(frozen=True)
class Api:
    """One API's streams: its upstream path (and query), turngate's route prefix for it, its
    text and tool-argument streams, one text chunk (its text, its position among the text
    chunks), how many frames open a text stream and the frames that close one (given its
    whole text and its count of chunks): ``text(n)`` is those opening frames, ``n`` text
    chunks, then the closing ones. Then its request, and what in a request's body names
    the stream the upstream answers it with."""

    name: str
    path: str
    prefix: str
    text: Callable[[int], list[bytes]]
    tools: Callable[[int], list[bytes]]
    text_chunk: Callable[[str, int], bytes]
    opening: int
    closing: Callable[[str, int], list[bytes]]
    request: Callable[[str], bytes]
    kind_of: Callable[[dict[str, Any]], str] = _model_of
    query: str = ""


APIS = {
    "openai_chat": Api(
        "openai_chat",
        CHAT,
        "/openai",
        text_stream,
        tool_stream,
        lambda text, _at: _chunk({"content": text}),
        1,
        lambda _whole, _chunks: text_stream(0)[1:],
        request,
    ),
    "openai_responses": Api(
        "openai_responses",
        "/v1/responses",
        "/openai",
        responses_text_stream,
        responses_tool_stream,
        responses_text_chunk,
        _RESPONSES_OPENING,
        responses_text_closing,
        responses_request,
    ),
    "anthropic": Api(
        "anthropic",
        "/v1/messages",
        "/anthropic",
        anthropic_text_stream,
        anthropic_tool_stream,
        lambda text, _at: anthropic_text_chunk(text),
        2,
        lambda _whole, _chunks: anthropic_text_stream(0)[2:],
        anthropic_request,
    ),
    "gemini": Api(
        "gemini",
        GEMINI,
        "/gemini",
        gemini_text_stream,
        gemini_tool_stream,
        gemini_text_chunk,
        0,
        gemini_text_closing,
        gemini_request,
        kind_of=_gemini_kind,
        query="?alt=sse",
    ),
}


# -- the servers ---------------------------------------------------------------------------


def run_upstream(port: int, api: Api = APIS["openai_chat"], pace: float = PACE_MS / 1000) -> None:
    streams = {
        "bench-text": api.text(CHUNKS),
        "bench-tools": api.tools(CHUNKS),
        "bench-text-short": api.text(SHORT),
        "bench-tools-short": api.tools(SHORT),
    }
    release = asyncio.Event()

    async def answer(request: web.Request) -> web.StreamResponse:
        model = api.kind_of(orjson.loads(await request.read()))
        paced, held = model.endswith(("-paced", "-stamped")), model.endswith("-held")
        kind = model.removesuffix("-paced").removesuffix("-held").removesuffix("-stamped")
        frames = streams[kind]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if model.endswith("-stamped"):
            await stamped(response, api, pace)
            return response
        for at, frame in enumerate(frames):
            if held and at == len(frames) // 2:
                await release.wait()
            await response.write(frame)
            if paced:
                await asyncio.sleep(pace)
        await response.write_eof()
        return response

    async def set_release(request: web.Request) -> web.Response:
        release.set() if request.query.get("on") == "1" else release.clear()
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post(api.path, answer)
    app.router.add_get("/release", set_release)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


async def stamped(response: web.StreamResponse, api: Api, pace: float) -> None:
    """Paced text chunks, each carrying the moment it was written (CLOCK_MONOTONIC, the same
    clock in every process of the machine), then the frames that close the stream (those
    that repeat the text, as Responses' ``.done`` events do, repeat the stamped text)."""
    for frame in api.text(0)[: api.opening]:
        await response.write(frame)
    texts = []
    for i in range(CHUNKS):
        texts.append(f" w{i}@{time.perf_counter_ns()}@")
        await response.write(api.text_chunk(texts[-1], i))
        await asyncio.sleep(pace)
    for frame in api.closing("".join(texts), CHUNKS):
        await response.write(frame)
    await response.write_eof()


def run_bare(port: int, upstream: str, api: Api = APIS["openai_chat"]) -> None:
    session_key = web.AppKey("session", aiohttp.ClientSession)

    async def session_ctx(app: web.Application) -> Any:
        app[session_key] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        yield
        await app[session_key].close()

    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        query = f"?{request.query_string}" if request.query_string else ""
        async with request.app[session_key].post(
            upstream + api.path + query, data=body, headers=headers
        ) as up:
            response = web.StreamResponse(status=up.status)
            response.content_type = up.content_type
            await response.prepare(request)
            async for chunk in up.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    app = web.Application()
    app.cleanup_ctx.append(session_ctx)
    app.router.add_post(api.prefix + api.path, forward)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# -- measuring -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Pacing:
    """How the CPU rounds' streams come: seconds between a stream's chunks, streams at once."""

    pace: float
    at_once: int


@dataclass
class Timing:
    ttfb_ms: float
    total_ms: float


async def one_stream(session: aiohttp.ClientSession, url: str, body: bytes) -> Timing:
    headers = {"Content-Type": "application/json", "Authorization": "Bearer bench"}
    started = time.perf_counter()
    first = None
    async with session.post(url, data=body, headers=headers) as resp:
        if resp.status != 200:
            raise RuntimeError(f"{url}: HTTP {resp.status}: {(await resp.read())[:300]!r}")
        async for _chunk in resp.content.iter_any():
            if first is None:
                first = time.perf_counter()
    done = time.perf_counter()
    assert first is not None
    return Timing((first - started) * 1000, (done - started) * 1000)


async def timings(targets: list[Target], body: bytes, runs: int) -> dict[str, Timing]:
    """One stream per target per round, the rounds alternating targets: load from other
    jobs on the machine falls on every target alike."""
    measured: dict[str, list[Timing]] = {t.name: [] for t in targets}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=8)) as session:
        for round_ in range(runs + 3):
            for target in targets:
                timing = await one_stream(session, target.url, body)
                if round_ >= 3:  # warm-up rounds
                    measured[target.name].append(timing)
    return {
        name: Timing(
            statistics.median(t.ttfb_ms for t in found),
            statistics.median(t.total_ms for t in found),
        )
        for name, found in measured.items()
    }


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def chunk_latency(targets: list[Target], streams: int, api: Api) -> dict[str, float]:
    """Median microseconds from the upstream writing a paced text chunk to the client reading
    it, per target (targets alternate stream by stream). Each stamp is taken at its first
    reading: only a stamp later than the last one taken counts, so closing frames that
    repeat the text (Responses' ``.done`` events) add none."""
    body = api.request("text").replace(b'"bench-text"', b'"bench-text-stamped"')
    headers = {"Content-Type": "application/json", "Authorization": "Bearer bench"}
    latencies: dict[str, list[float]] = {t.name: [] for t in targets}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=8)) as session:
        for round_ in range(streams + 1):
            for target in targets:
                seen: list[float] = []
                last = 0
                async with session.post(target.url, data=body, headers=headers) as resp:
                    async for chunk in resp.content.iter_any():
                        now = time.perf_counter_ns()
                        for stamp in map(int, _STAMP.findall(chunk)):
                            if stamp > last:
                                seen.append((now - stamp) / 1000)
                                last = stamp
                if round_:  # the first round warms up
                    latencies[target.name] += seen
    return {name: statistics.median(found) for name, found in latencies.items()}


async def cpu_per_stream(
    targets: list[Target], bodies: list[bytes], batches: int, at_once: int
) -> dict[str, list[list[float]]]:
    """Seconds of each proxy's CPU per stream, for each body, batch by batch: batches of
    ``at_once`` paced streams, the proxies and the bodies alternating batch by batch (so a
    batch's figures are comparable with the other proxies' of the same round)."""
    used: dict[str, list[list[float]]] = {t.name: [] for t in targets}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        for batch in range(batches + 1):
            if batch:  # the first batch warms up
                for target in targets:
                    used[target.name].append([0.0] * len(bodies))
            for at, body in enumerate(bodies):
                for target in targets:
                    assert target.pid is not None
                    before = cpu_seconds(target.pid)
                    await asyncio.gather(
                        *(one_stream(session, target.url, body) for _ in range(at_once))
                    )
                    if batch:
                        used[target.name][-1][at] = (cpu_seconds(target.pid) - before) / at_once
    return used


def spread(values: list[float]) -> str:
    """The median of per-round values, with their quartiles: how far one round strays."""
    if len(values) < 4:
        return f"{statistics.median(values):.2f}x"
    low, mid, high = statistics.quantiles(values, n=4)
    return f"{mid:.2f}x [{low:.2f}-{high:.2f}]"


async def held_memory(url: str, upstream: str, pid: int, streams: int, api: Api) -> float:
    """The proxy's RSS growth, in MB, while ``streams`` streams are open at once."""
    body = api.request("text").replace(b'"bench-text"', b'"bench-text-held"')
    headers = {"Content-Type": "application/json", "Authorization": "Bearer bench"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await (await session.get(upstream + "/release?on=0")).release()
        baseline = rss_bytes(pid)
        opened = asyncio.Event()
        started = 0

        async def hold() -> None:
            nonlocal started
            async with session.post(url, data=body, headers=headers) as resp:
                await resp.content.readany()
                started += 1
                if started == streams:
                    opened.set()
                await resp.read()

        tasks = [asyncio.create_task(hold()) for _ in range(streams)]
        await asyncio.wait_for(opened.wait(), 120)
        peak = rss_bytes(pid)
        await (await session.get(upstream + "/release?on=1")).release()
        await asyncio.gather(*tasks)
    return (peak - baseline) / 1e6


# -- the run -------------------------------------------------------------------------------


@dataclass
class Target:
    name: str
    url: str
    pid: int | None


async def run(quick: bool, api: Api, pacing: Pacing) -> None:
    os.sched_setaffinity(0, {LOAD_CORE})
    ports = {name: free_port() for name in ("upstream", "bare", "turngate", "turngate-sqlite")}
    upstream = f"http://127.0.0.1:{ports['upstream']}"
    me = [sys.executable, "-m", "bench.stream_overhead"]
    state = Path(tempfile.mkdtemp(prefix="turngate-bench-")) / "state.db"
    serve = [sys.executable, "-m", "turngate.cli", "serve", "--log-level", "warning"]
    serve += ["--upstream-openai", upstream, "--upstream-anthropic", upstream]
    serve += ["--upstream-gemini", upstream]
    processes = [
        start([*me, "upstream", str(ports["upstream"]), api.name, str(pacing.pace)], LOAD_CORE),
        start([*me, "bare", str(ports["bare"]), upstream, api.name], PROXY_CORE),
        start([*serve, "--port", str(ports["turngate"]), "--state", "memory://"], PROXY_CORE),
        start(
            [*serve, "--port", str(ports["turngate-sqlite"]), "--state", f"sqlite://{state}"],
            PROXY_CORE,
        ),
    ]
    try:
        await wait_ready(upstream + "/release?on=1")
        await wait_ready(f"http://127.0.0.1:{ports['bare']}/")
        await wait_ready(f"http://127.0.0.1:{ports['turngate']}/healthz")
        await wait_ready(f"http://127.0.0.1:{ports['turngate-sqlite']}/healthz")
        route = api.prefix + api.path + api.query
        targets = [
            Target("direct", upstream + api.path + api.query, None),
            Target(
                "bare pass-through", f"http://127.0.0.1:{ports['bare']}{route}", processes[1].pid
            ),
            Target(
                "turngate (memory)",
                f"http://127.0.0.1:{ports['turngate']}{route}",
                processes[2].pid,
            ),
            Target(
                "turngate (sqlite)",
                f"http://127.0.0.1:{ports['turngate-sqlite']}{route}",
                processes[3].pid,
            ),
        ]
        runs, rounds, held = (20, 3, 200) if quick else (60, 6, HOLD_STREAMS)
        print(
            f"{api.name} streams; cores: proxies on {PROXY_CORE}, upstream + load on "
            f"{LOAD_CORE}; {CHUNKS} chunks; paced: {pacing.at_once} streams at once, a chunk "
            f"every {pacing.pace * 1000:g} ms each"
        )
        for kind in ("text", "tools"):
            await report_kind(kind, targets, runs, rounds, api=api, pacing=pacing)
        print(f"\npeak memory, {held} streams held open at once (RSS growth of the proxy)")
        for target in targets[1:]:
            assert target.pid is not None
            grown = await held_memory(target.url, upstream, target.pid, held, api)
            per = grown * 1000 / held
            print(f"{target.name:<20}{grown:8.1f} MB  = {per:7.1f} MB per 1,000 streams")
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(30)


async def report_kind(
    kind: str, targets: list[Target], runs: int, rounds: int, *, api: Api, pacing: Pacing
) -> None:
    body = api.request(kind)
    results = await timings(targets, body, runs)
    paced = body.replace(f'"bench-{kind}"'.encode(), f'"bench-{kind}-paced"'.encode())
    short = paced.replace(f'"bench-{kind}-paced"'.encode(), f'"bench-{kind}-short-paced"'.encode())
    proxies = [t for t in targets if t.pid is not None]
    per_batch = await cpu_per_stream(proxies, [paced, short], rounds, pacing.at_once)
    # Per round: a stream's CPU over its chunks, and the CPU of the 400 chunks more.
    cpu_rounds = {n: [whole * 1e6 / CHUNKS for whole, _ in b] for n, b in per_batch.items()}
    marginal_rounds = {
        n: [(whole - few) * 1e6 / (CHUNKS - SHORT) for whole, few in b]
        for n, b in per_batch.items()
    }
    cpu = {name: statistics.median(found) for name, found in cpu_rounds.items()}
    marginal = {name: statistics.median(found) for name, found in marginal_rounds.items()}
    latency = await chunk_latency(targets, max(2, rounds // 2), api) if kind == "text" else {}
    print(f"\n{kind}: {CHUNKS} chunks")
    header = f"{'':<20}{'TTFB ms':>9}{'total ms':>10}{'added us/chunk':>16}{'after TTFB':>11}"
    header += f"{'CPU us/chunk':>14}{'marginal':>10}"
    print(header + (f"{'chunk latency us':>18}" if latency else ""))
    direct = results["direct"]
    added = {name: (r.total_ms - direct.total_ms) * 1000 / CHUNKS for name, r in results.items()}
    streaming = {
        name: ((r.total_ms - r.ttfb_ms) - (direct.total_ms - direct.ttfb_ms)) * 1000 / CHUNKS
        for name, r in results.items()
    }
    for name, r in results.items():
        line = f"{name:<20}{r.ttfb_ms:9.2f}{r.total_ms:10.2f}{added[name]:16.1f}"
        line += f"{streaming[name]:11.1f}"
        line += f"{cpu[name]:14.1f}{marginal[name]:10.1f}" if name in cpu else f"{'':>24}"
        line += f"{latency[name]:18.0f}" if latency else ""
        print(line)
    bare = "bare pass-through"
    for name in ("turngate (memory)", "turngate (sqlite)"):
        # A bare pass-through no slower than direct (noise) leaves no ratio to take.
        unpaced = f"{added[name] / added[bare]:.2f}x" if added[bare] > 0 else "n/a (bare <= direct)"
        after = (
            f"{streaming[name] / streaming[bare]:.2f}x"
            if streaming[bare] > 0
            else "n/a (bare <= direct)"
        )
        ratios = [
            f"unpaced total {unpaced}",
            f"unpaced after the first byte {after}",
            "CPU per paced chunk " + spread(ratios_of(cpu_rounds, name, bare)),
            "marginal CPU per paced chunk " + spread(ratios_of(marginal_rounds, name, bare)),
        ]
        if latency:
            mine, theirs = latency[name] - latency["direct"], latency[bare] - latency["direct"]
            ratios.append(f"latency per paced chunk {mine / theirs:.2f}x")
        print(f"{name} per chunk vs the bare pass-through (target <= 1.3x): " + ", ".join(ratios))


def ratios_of(rounds: dict[str, list[float]], name: str, bare: str) -> list[float]:
    """``name``'s figure over the bare pass-through's, round by round."""
    return [mine / theirs for mine, theirs in zip(rounds[name], rounds[bare], strict=True)]


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "upstream":
        pace = float(args[3]) if len(args) > 3 else PACE_MS / 1000
        run_upstream(int(args[1]), APIS[args[2]] if len(args) > 2 else APIS["openai_chat"], pace)
    elif args and args[0] == "bare":
        run_bare(int(args[1]), args[2], APIS[args[3]] if len(args) > 3 else APIS["openai_chat"])
    else:
        parser = argparse.ArgumentParser(prog="bench.stream_overhead")
        parser.add_argument("--quick", action="store_true", help="fewer rounds")
        parser.add_argument("--api", choices=sorted(APIS), default="openai_chat")
        parser.add_argument(
            "--pace", type=float, default=PACE_MS, help="ms between a paced stream's chunks"
        )
        parser.add_argument(
            "--at-once", type=int, default=AT_ONCE, help="paced streams at once, per batch"
        )
        options = parser.parse_args(args)
        if options.pace <= 0 or options.at_once < 1:
            raise SystemExit("--pace must be above 0 ms and --at-once at least 1")
        pacing = Pacing(options.pace / 1000, options.at_once)
        asyncio.run(run(quick=options.quick, api=APIS[options.api], pacing=pacing))


if __name__ == "__main__":
    main()
