"""Soak: N concurrent streaming clients through `turngate serve` for a while, faults injected.

Run: .venv/bin/python -m bench.soak                      (200 clients, 600 s: the full soak)
     .venv/bin/python -m bench.soak --clients 50 --seconds 60

Loopback only. This process runs the fake upstream and the clients; turngate runs as its own
process (`python -m turngate.cli serve`, SQLite state in a temporary folder, upstream idle
timeout 2 s) so its RSS and open file descriptors are its own. Every client loops: 10% of
its requests are invalid sequences (a tool result with no call; marked by a header the
upstream counts), the rest the recorded streaming Chat request that calls a tool with ~50
argument fragments (openai-chat/pai-long-tool-args), three attempts per conversation
revision. The upstream answers each request with one of: the recorded stream whole (70%),
cut by a reset after a random number of frames (8%), ended cleanly without its last frames
(8%), stalled after some frames past turngate's idle timeout (4%), a 500 (5%), a 429 (5%).
Every fifth client instead runs a Responses tool loop chained by ``previous_response_id``
(no conversation id): the recorded answer calling a tool, then a request chained to it,
which in 10% of loops leaves the call's output out (an invalid sequence, marked the same
way: turngate must refuse it from its memory of the reply); the Responses answers get the
500 and 429 faults too.

Printed: requests served and their outcomes by kind, turngate's RSS and open FDs at start
(after a 5 s warm-up) and at the end (clients stopped, 2 s idle) against the stated bounds,
and the three invariants:
  1. sends of invalid sequences: requests marked invalid that reached the upstream (must be 0);
  2. partial tool dispatches: a tool call a client saw whose arguments are not exactly the
     recorded ones (must be 0);
  3. canonical turns per revision: COMMITTED operations per (conversation, revision) in the
     SQLite store after turngate stopped (must be <= 1).
Exit status 1 when an invariant or a bound fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"
RECORDING = "openai-chat/pai-long-tool-args"
RESPONSES_CALL = "openai-responses/pai-nonstream-function-call.json"
RESPONSES_AFTER = "openai-responses/pai-nonstream-after-function-output.json"
INVALID_HEADER = "X-Soak-Invalid"
UPSTREAM_IDLE = 2.0
# Bounds stated up front: what the end may exceed the start by.
RSS_GROWTH_BOUND = 64 * 1024 * 1024
FD_GROWTH_BOUND = 16
FAULTS = (
    ("whole", 70),
    ("reset", 8),
    ("truncate", 8),
    ("stall", 4),
    ("error500", 5),
    ("rate429", 5),
)


def frames_of(body: bytes) -> list[bytes]:
    parts = body.split(b"\n\n")
    return [part + b"\n\n" for part in parts if part.strip()]


@dataclass
class Upstream:
    frames: list[bytes]
    rng: random.Random
    # The Responses answers: one calling the tool, one after its output (ids made unique).
    answers: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
    invalid_sent: int = 0
    served: Counter[str] = field(default_factory=Counter)
    numbered: int = 0

    def pick(self) -> str:
        names, weights = zip(*FAULTS, strict=True)
        return str(self.rng.choices(names, weights)[0])

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        if INVALID_HEADER in request.headers:
            self.invalid_sent += 1
        fault = self.pick()
        responses = request.path.endswith("/responses")
        if responses and fault not in ("error500", "rate429"):
            # A whole answer: the stream faults are the Chat streams'.
            fault = "whole"
        self.served[("responses " if responses else "") + fault] += 1
        if fault in ("error500", "rate429"):
            status = 500 if fault == "error500" else 429
            error = {"error": {"message": fault, "type": "server_error", "code": None}}
            return web.json_response(error, status=status)
        if responses:
            return web.json_response(self.responses_answer(await request.json()))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        cut = self.rng.randrange(1, len(self.frames)) if fault != "whole" else len(self.frames)
        for frame in self.frames[:cut]:
            await response.write(frame)
        if fault == "reset":
            assert request.transport is not None
            request.transport.abort()
            return response
        if fault == "stall":
            await asyncio.sleep(UPSTREAM_IDLE * 3)
        # After a stall turngate has hung up already.
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    def responses_answer(self, asked: dict[str, Any]) -> dict[str, Any]:
        """A chained request gets the text answer, any other the call; each its own ids."""
        self.numbered += 1
        n = self.numbered
        chained = "previous_response_id" in asked
        answer = orjson.loads(orjson.dumps(self.answers[1 if chained else 0]))
        answer["id"] = f"resp_soak_{n}"
        if not chained:
            answer["output"][0]["call_id"] = f"call_soak_{n}"
            answer["output"][0]["id"] = f"fc_soak_{n}"
        return dict(answer)


def tool_calls_seen(stream: bytes) -> dict[int, str]:
    """The tool calls' arguments a client assembles from a Chat stream, by index."""
    calls: dict[int, str] = {}
    for line in stream.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if not data or data == b"[DONE]":
            continue
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        for choice in chunk.get("choices") or ():
            for call in (choice.get("delta") or {}).get("tool_calls") or ():
                index = call.get("index", 0)
                piece = (call.get("function") or {}).get("arguments") or ""
                calls[index] = calls.get(index, "") + piece
    return calls


@dataclass
class Tally:
    outcomes: Counter[str] = field(default_factory=Counter)
    partial_calls: int = 0
    whole_calls: int = 0
    requests: int = 0


async def client(
    *,
    number: int,
    url: str,
    valid: bytes,
    invalid: bytes,
    expected: dict[int, str],
    deadline: float,
    tally: Tally,
    rng: random.Random,
) -> None:
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        attempt = 0
        while time.monotonic() < deadline:
            conversation = f"soak-{number}-{attempt // 3}"
            attempt += 1
            bad = rng.random() < 0.10
            headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-soak"}
            headers["Turngate-Conversation-Id"] = conversation
            if bad:
                headers[INVALID_HEADER] = "1"
            tally.requests += 1
            try:
                async with session.post(url, data=invalid if bad else valid, headers=headers) as r:
                    out = bytearray()
                    kind = f"http {r.status}"
                    try:
                        async for chunk in r.content.iter_any():
                            out.extend(chunk)
                    except aiohttp.ClientPayloadError:
                        kind += " cut"
                    if r.status == 200:
                        if b'"error"' in out:
                            kind += " error-event"
                        elif out.rstrip().endswith(b"data: [DONE]"):
                            kind += " complete"
                        for index, arguments in tool_calls_seen(bytes(out)).items():
                            if arguments == expected.get(index):
                                tally.whole_calls += 1
                            else:
                                tally.partial_calls += 1
                    if bad:
                        kind = "invalid " + kind
            except (aiohttp.ClientError, TimeoutError) as exc:
                kind = f"exception {type(exc).__name__}"
            tally.outcomes[kind] += 1


async def responses_client(
    *, url: str, ask: dict[str, Any], deadline: float, tally: Tally, rng: random.Random
) -> None:
    """A Responses tool loop chained by ``previous_response_id``, its output left out in 10%
    of loops (marked invalid: it must never reach the upstream)."""
    timeout = aiohttp.ClientTimeout(total=60)
    headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-soak"}
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while time.monotonic() < deadline:
            try:
                await _chained_loop(session, url, ask=ask, headers=headers, tally=tally, rng=rng)
            except (aiohttp.ClientError, TimeoutError) as exc:
                tally.outcomes[f"responses exception {type(exc).__name__}"] += 1


async def _chained_loop(
    session: aiohttp.ClientSession,
    url: str,
    *,
    ask: dict[str, Any],
    headers: dict[str, str],
    tally: Tally,
    rng: random.Random,
) -> None:
    tally.requests += 1
    async with session.post(url, data=orjson.dumps(ask), headers=headers) as r:
        first = await r.read()
    tally.outcomes[f"responses http {r.status}"] += 1
    if r.status != 200:
        return
    answer = orjson.loads(first)
    call = answer["output"][0]
    bad = rng.random() < 0.10
    chained: dict[str, Any] = {"model": ask["model"], "tools": ask["tools"]}
    chained["previous_response_id"] = answer["id"]
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "x"}
    chained["input"] = [{"role": "user", "content": "and then?"}] if bad else [output]
    tally.requests += 1
    marked = {**headers, INVALID_HEADER: "1"} if bad else headers
    async with session.post(url, data=orjson.dumps(chained), headers=marked) as r:
        await r.read()
    kind = f"responses chained http {r.status}"
    tally.outcomes[("invalid " if bad else "") + kind] += 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def usage(pid: int) -> tuple[int, int]:
    """(RSS bytes, open file descriptors) of process ``pid``."""
    rss = 0
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


async def wait_ready(url: str, process: subprocess.Popen[bytes]) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(200):
            if process.poll() is not None:
                raise SystemExit(f"turngate exited with {process.returncode}")
            try:
                async with session.get(url + "/readyz") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit("turngate did not become ready")


def canonical_per_revision(db: Path) -> tuple[int, int, int]:
    """(revisions with a COMMITTED operation, the most COMMITTED for one, operations)."""
    connection = sqlite3.connect(db)
    try:
        rows = connection.execute(
            "SELECT COUNT(*) FROM operations WHERE state = 'COMMITTED' "
            "GROUP BY conversation_key, conversation_revision"
        ).fetchall()
        total = connection.execute("SELECT COUNT(*) FROM operations").fetchone()[0]
    finally:
        connection.close()
    return len(rows), max((row[0] for row in rows), default=0), int(total)


async def soak(clients: int, seconds: float, seed: int) -> bool:
    recorded = (FIXTURES / f"{RECORDING}.sse").read_bytes()
    request: dict[str, Any] = orjson.loads((FIXTURES / f"{RECORDING}.request.json").read_bytes())
    request["stream"] = True
    valid = orjson.dumps(request)
    broken = dict(request)
    broken["messages"] = [
        *request["messages"],
        {"role": "tool", "tool_call_id": "call_never_made", "content": "42"},
    ]
    invalid = orjson.dumps(broken)
    expected = tool_calls_seen(recorded)

    answers = (
        orjson.loads((FIXTURES / RESPONSES_CALL).read_bytes()),
        orjson.loads((FIXTURES / RESPONSES_AFTER).read_bytes()),
    )
    ask: dict[str, Any] = orjson.loads(
        (FIXTURES / RESPONSES_CALL.replace(".json", ".request.json")).read_bytes()
    )
    ask.pop("stream", None)
    upstream = Upstream(frames_of(recorded), random.Random(seed), answers)
    upstream_app = web.Application()
    upstream_app.router.add_route("*", "/{tail:.*}", upstream.handle)
    runner = web.AppRunner(upstream_app, access_log=None)
    await runner.setup()
    upstream_port, port = free_port(), free_port()
    await web.TCPSite(runner, "127.0.0.1", upstream_port, backlog=4096).start()

    folder = Path(tempfile.mkdtemp(prefix="turngate-soak-"))
    db = folder / "state.db"
    command = [sys.executable, "-m", "turngate.cli", "serve", "--port", str(port)]
    command += ["--state", f"sqlite://{db}", "--log-level", "error"]
    command += ["--upstream-openai", f"http://127.0.0.1:{upstream_port}"]
    command += ["--upstream-read-timeout", str(UPSTREAM_IDLE)]
    env = {**os.environ, "TURNGATE_CREDENTIAL_SECRET": "soak"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        await wait_ready(url, process)
        tally = Tally()
        rng = random.Random(seed + 1)
        started = time.monotonic()
        deadline = started + seconds
        workers = [
            asyncio.create_task(
                responses_client(
                    url=url + "/openai/v1/responses",
                    ask=ask,
                    deadline=deadline,
                    tally=tally,
                    rng=random.Random(rng.random()),
                )
                if n % 5 == 4
                else client(
                    number=n,
                    url=url + "/openai/v1/chat/completions",
                    valid=valid,
                    invalid=invalid,
                    expected=expected,
                    deadline=deadline,
                    tally=tally,
                    rng=random.Random(rng.random()),
                )
            )
            for n in range(clients)
        ]
        await asyncio.sleep(min(5.0, seconds / 4))
        start_rss, start_fds = usage(process.pid)
        peak_rss, peak_fds = start_rss, start_fds
        while not all(w.done() for w in workers):
            await asyncio.sleep(1.0)
            rss, fds = usage(process.pid)
            peak_rss, peak_fds = max(peak_rss, rss), max(peak_fds, fds)
        await asyncio.gather(*workers)
        elapsed = time.monotonic() - started
        await asyncio.sleep(UPSTREAM_IDLE + 2.0)
        end_rss, end_fds = usage(process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            _, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
        await runner.cleanup()

    revisions, most, operations = canonical_per_revision(db)
    mib = 1024 * 1024
    print(f"soak: {clients} clients, {elapsed:.0f} s, seed {seed}, turngate pid {process.pid}")
    print(
        f"requests: {tally.requests} sent, {sum(tally.outcomes.values())} answered "
        f"({tally.requests / elapsed:.0f}/s); operations in the store: {operations}"
    )
    print("outcomes by kind:")
    for kind, count in sorted(tally.outcomes.items(), key=lambda kv: -kv[1]):
        print(f"  {count:8d}  {kind}")
    print("upstream answers by fault: " + ", ".join(f"{k} {v}" for k, v in upstream.served.items()))
    rss_ok = end_rss - start_rss <= RSS_GROWTH_BOUND
    fds_ok = end_fds - start_fds <= FD_GROWTH_BOUND
    print(
        f"RSS: start {start_rss / mib:.1f} MiB, peak {peak_rss / mib:.1f}, end {end_rss / mib:.1f} "
        f"(bound: end <= start + {RSS_GROWTH_BOUND // mib} MiB) {'ok' if rss_ok else 'EXCEEDED'}"
    )
    print(
        f"open FDs: start {start_fds}, peak {peak_fds}, end {end_fds} "
        f"(bound: end <= start + {FD_GROWTH_BOUND}) {'ok' if fds_ok else 'EXCEEDED'}"
    )
    print(f"invariant 1, sends of invalid sequences: {upstream.invalid_sent}")
    print(
        f"invariant 2, partial tool dispatches seen by clients: {tally.partial_calls} "
        f"(whole tool calls seen: {tally.whole_calls})"
    )
    print(
        f"invariant 3, most canonical turns for one revision: {most} "
        f"({revisions} revisions committed)"
    )
    print(f"turngate exit status {process.returncode}")
    if process.returncode not in (0, -signal.SIGTERM):
        print(stderr.decode(errors="replace")[-2000:])
    return (
        rss_ok
        and fds_ok
        and upstream.invalid_sent == 0
        and tally.partial_calls == 0
        and most <= 1
        and process.returncode == 0
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=10)
    args = parser.parse_args(argv)
    if not asyncio.run(soak(args.clients, args.seconds, args.seed)):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
