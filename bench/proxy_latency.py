"""What turngate adds to a request, against a bare aiohttp pass-through, same machine, same run.

Run: .venv/bin/python -m bench proxy     (or: -m bench.proxy_latency [--quick])
     -m bench.proxy_latency --telemetry [--quick]: tracing and metrics on vs off instead

Processes, each started here: the fake upstream (a canned Chat completion), a bare aiohttp
pass-through proxy (read the body, POST it upstream on a shared session, return the
answer), the floor (the same pass-through running on each body the steps every request
needs, ``required_steps``), and `turngate serve`. The proxies are pinned to one core, the
upstream and this load generator to the other (os.sched_setaffinity), and measured one at
a time: direct to the upstream, through the bare proxy, through the floor, through turngate
(SQLite state, the default; memory://; SQLite with ``?sync=normal``, which waits for the
disk on no write).
Bodies are valid tool-heavy Chat conversations of about 10 KB and 150 KB. Concurrency 1
gives p50/p99 latency; concurrency 32 gives requests per second.

Then each proxy's own CPU per request, from /proc (user + system time of the whole
process, every thread: the SQLite store's worker included) over sequential requests: the
honest figure, where the in-process breakdown per step leaves out aiohttp, telemetry, the
store's thread hops and the upstream call.

Printed ratios (targets from the issue), for turngate and for the floor: the added p50
latency over the bare pass-through's added latency (<= 1.5x), and the throughput at 32 over
the bare pass-through's (>= 80%). Then what each target leaves turngate per request beside
what the required steps cost in process (print_budget), and each proxy's CPU per request
during the 32-way load.

The machine is shared with other jobs, so the whole set runs in rounds (3, or 2 with
--quick), every target once per round, in turn: a figure is the median over rounds and the
range beside it (min-max over rounds) is the noise to read it against. The CPU breakdown
per step is process CPU time, best of several interleaved rounds.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from bench._options import bench_options
from bench.graph_roundtrip import tool_heavy_request

CHAT = "/v1/chat/completions"
ANSWER = orjson.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "Revenue is flat; churn is up 2%."},
            }
        ],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 12, "total_tokens": 1012},
    }
)
PROXY_CORE, LOAD_CORE = 1, 0
# The SQLite file opened with sync=normal: no write waits for the disk (docs/operations.md).
SYNC_NORMAL = "turngate (sqlite, sync=normal)"
# The bare pass-through running turngate's required steps on each body (required_steps).
FLOOR = "floor: bare + required steps"


# -- the three servers -----------------------------------------------------------------


def run_upstream(port: int) -> None:
    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=ANSWER, content_type="application/json")

    app = web.Application(client_max_size=1 << 26)
    app.router.add_post(CHAT, answer)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def run_bare(port: int, upstream: str, *, floor: bool = False) -> None:
    """The bare pass-through; with ``floor``, it also runs on each body the steps every
    request needs (``required_steps``) before it forwards it: what turngate would cost with
    no store, manifest, telemetry or policy plumbing at all."""
    session_key = web.AppKey("session", aiohttp.ClientSession)
    check = required_steps() if floor else None

    async def session_ctx(app: web.Application) -> Any:
        app[session_key] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        yield
        await app[session_key].close()

    async def forward(request: web.Request) -> web.Response:
        body = await request.read()
        if check is not None:
            check(body)
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        async with request.app[session_key].post(
            upstream + CHAT, data=body, headers=headers
        ) as resp:
            data = await resp.read()
            return web.Response(status=resp.status, body=data, content_type=resp.content_type)

    app = web.Application(client_max_size=1 << 26)
    app.cleanup_ctx.append(session_ctx)
    app.router.add_post("/openai" + CHAT, forward)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start(command: list[str], core: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.sched_setaffinity(process.pid, {core})
    return process


async def wait_ready(url: str, *, attempts: int = 200, pause: float = 0.05) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(attempts):
            try:
                async with session.get(url) as resp:
                    await resp.read()
                    return
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(pause)
    raise RuntimeError(f"{url} did not start within {attempts * pause:g} s")


# -- load ------------------------------------------------------------------------------


@dataclass
class Result:
    p50_ms: float
    p99_ms: float
    rps: float
    # The proxy's CPU per request (us, /proc) during the 32-way load; None for direct.
    busy_us: float | None = None


async def latency(session: aiohttp.ClientSession, url: str, body: bytes, n: int) -> list[float]:
    headers = {"Content-Type": "application/json", "Authorization": "Bearer bench"}
    times = []
    for _ in range(n):
        start_at = time.perf_counter()
        async with session.post(url, data=body, headers=headers) as resp:
            await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"{url}: HTTP {resp.status}: {(await resp.read())[:300]!r}")
        times.append(time.perf_counter() - start_at)
    return times


async def throughput(url: str, body: bytes, concurrency: int, seconds: float) -> float:
    headers = {"Content-Type": "application/json", "Authorization": "Bearer bench"}
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            async with session.post(url, data=body, headers=headers) as resp:
                await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"{url}: HTTP {resp.status}")
            done += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        return done / (time.perf_counter() - started)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(
    url: str, body: bytes, *, n: int, seconds: float, pid: int | None = None
) -> Result:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:
        await latency(session, url, body, max(20, n // 10))
        times = await latency(session, url, body, n)
    cpu_before = cpu_seconds(pid) if pid is not None else 0.0
    started = time.perf_counter()
    rps = await throughput(url, body, 32, seconds)
    busy = None
    if pid is not None:
        requests = rps * (time.perf_counter() - started)
        busy = (cpu_seconds(pid) - cpu_before) / requests * 1e6
    return Result(percentile(times, 0.5) * 1000, percentile(times, 0.99) * 1000, rps, busy)


def body_of(target_bytes: int) -> bytes:
    # Message counts that land near the target with bench.graph_roundtrip's conversation.
    messages = 25 if target_bytes < 50_000 else 215
    return orjson.dumps(tool_heavy_request(messages=messages, target_bytes=target_bytes))


# -- the run ---------------------------------------------------------------------------


async def run(quick: bool) -> None:
    os.sched_setaffinity(0, {LOAD_CORE})
    names = ("upstream", "bare", "floor", "turngate", "turngate-mem", "turngate-normal")
    ports = {name: free_port() for name in names}
    upstream = f"http://127.0.0.1:{ports['upstream']}"
    me = [sys.executable, "-m", "bench.proxy_latency"]
    state = Path(tempfile.mkdtemp(prefix="turngate-bench-")) / "state.db"
    serve = [sys.executable, "-m", "turngate.cli", "serve", "--log-level", "warning"]
    serve += ["--upstream-openai", upstream]
    processes = [
        start([*me, "upstream", str(ports["upstream"])], LOAD_CORE),
        start([*me, "bare", str(ports["bare"]), upstream], PROXY_CORE),
        start([*me, "floor", str(ports["floor"]), upstream], PROXY_CORE),
        start(
            [*serve, "--port", str(ports["turngate"]), "--state", f"sqlite://{state}"],
            PROXY_CORE,
        ),
        start(
            [*serve, "--port", str(ports["turngate-mem"]), "--state", "memory://"],
            PROXY_CORE,
        ),
        start(
            [
                *serve,
                *("--port", str(ports["turngate-normal"])),
                *("--state", f"sqlite://{state.with_name('normal.db')}?sync=normal"),
            ],
            PROXY_CORE,
        ),
    ]
    try:
        await wait_ready(upstream + "/")
        await wait_ready(f"http://127.0.0.1:{ports['bare']}/")
        await wait_ready(f"http://127.0.0.1:{ports['floor']}/")
        await wait_ready(f"http://127.0.0.1:{ports['turngate']}/healthz")
        await wait_ready(f"http://127.0.0.1:{ports['turngate-mem']}/healthz")
        await wait_ready(f"http://127.0.0.1:{ports['turngate-normal']}/healthz")
        targets = {
            "direct": upstream + CHAT,
            "bare pass-through": f"http://127.0.0.1:{ports['bare']}/openai{CHAT}",
            FLOOR: f"http://127.0.0.1:{ports['floor']}/openai{CHAT}",
            "turngate (sqlite)": f"http://127.0.0.1:{ports['turngate']}/openai{CHAT}",
            "turngate (memory)": f"http://127.0.0.1:{ports['turngate-mem']}/openai{CHAT}",
            SYNC_NORMAL: f"http://127.0.0.1:{ports['turngate-normal']}/openai{CHAT}",
        }
        n, seconds, rounds = (200, 2.0, 2) if quick else (1000, 5.0, 3)
        print(
            f"cores: proxies on {PROXY_CORE}, upstream + load on {LOAD_CORE}; n={n}, "
            f"{seconds}s, {rounds} rounds"
        )
        bodies = {size: body_of(size) for size in (10_000, 150_000)}
        results: dict[int, dict[str, list[Result]]] = {
            size: {name: [] for name in targets} for size in bodies
        }
        proxies = dict(zip(targets, [None, *processes[1:]], strict=True))
        for _ in range(rounds):
            for size, body in bodies.items():
                for name, url in targets.items():
                    process = proxies[name]
                    pid = process.pid if process is not None else None
                    results[size][name].append(
                        await measure(url, body, n=n, seconds=seconds, pid=pid)
                    )
        cpu_rounds = 300 if not quick else 200
        serve_cpu: dict[int, dict[str, float]] = {size: {} for size in bodies}
        for size, body in bodies.items():
            for name, process in proxies.items():
                if process is None:
                    continue
                serve_cpu[size][name] = await process_cpu(
                    process.pid, targets[name], body, cpu_rounds
                )
        for size, body in bodies.items():
            report(len(body), results[size])
            print(
                f"serve CPU per request, from /proc over {cpu_rounds} sequential requests (ms): "
                + ", ".join(f"{name} {ms:.2f}" for name, ms in serve_cpu[size].items())
            )
            steps = breakdown(body)
            print(
                "turngate CPU per request, in process (us): "
                + ", ".join(f"{name} {us:.0f}" for name, us in steps.items())
                + f", SQLite claim + COMMIT with SEND {await store_round_trips():.0f}"
            )
            print_budget(results[size], sum(steps.values()))
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(30)


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def process_cpu(pid: int, url: str, body: bytes, n: int) -> float:
    """Milliseconds of the server's CPU per request, over ``n`` sequential requests."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:
        await latency(session, url, body, 20)
        started = cpu_seconds(pid)
        await latency(session, url, body, n)
        return (cpu_seconds(pid) - started) / n * 1000


class ChatSteps:
    """The steps SPEC sections 3, 4 and 6 ask of every Chat request, in turngate's own code
    (its built-in policy, one token cache), set up once."""

    def __init__(self) -> None:
        from turngate.adapters import get_adapter
        from turngate.policies.config import BUILTIN_POLICY
        from turngate.policies.tokens import TokenCache, load_encodings

        load_encodings()
        self.adapter = get_adapter("openai_chat")
        self.config, self.policy = BUILTIN_POLICY, BUILTIN_POLICY.defaults
        self.tokens = TokenCache()

    def admission(self, value: dict[str, Any], model: str | None) -> object:
        from turngate.policies.admission import admit

        return admit(
            value,
            api="openai_chat",
            model=model,
            max_output_tokens=None,
            config=self.config,
            policy=self.policy,
            cache=self.tokens,
        )

    def check(self, body: bytes) -> None:
        """All of them on the body's bytes: read and parse, label, validate (a refusal
        raises), render and compare, count for admission, digest the sequence and bytes."""
        from turngate.graph.codec import digest_bytes
        from turngate.graph.validator import validate
        from turngate.policies import trust
        from turngate.proxy.body import decode_json

        adapter = self.adapter
        value = decode_json(body)
        seq = trust.relabel(adapter.parse_request(value), self.policy.trust)
        if not validate(seq, adapter.capabilities).ready:
            raise ValueError("an invalid sequence")
        if adapter.render_request(seq) != value:
            raise ValueError("the graph did not render the body back")
        self.admission(value, seq.model)
        _ = seq.sequence_digest, digest_bytes(body)


def required_steps() -> Callable[[bytes], None]:
    return ChatSteps().check


def breakdown(body: bytes, rounds: int = 50) -> dict[str, float]:
    """Where turngate's own CPU time goes for one body, in microseconds (best of 5)."""
    from bench.graph_roundtrip import interleaved
    from turngate.graph.codec import digest_bytes
    from turngate.graph.validator import validate
    from turngate.policies import trust
    from turngate.proxy.body import decode_json

    chat = ChatSteps()
    adapter, policy = chat.adapter, chat.policy
    value = decode_json(body)
    seq = adapter.parse_request(value)

    def admission() -> object:
        return chat.admission(value, seq.model)

    admission()  # the same body again: every string is in the cache, as in the load above
    steps = {
        "read JSON + depth check": lambda: decode_json(body),
        "parse into the graph": lambda: adapter.parse_request(value),
        "trust labels": lambda: trust.relabel(seq, policy.trust),
        "validate": lambda: validate(seq, adapter.capabilities),
        "render + compare": lambda: adapter.render_request(seq) == value,
        "admission": admission,
        "sequence digest": lambda: adapter.parse_request(value).sequence_digest,
        "request digest": lambda: digest_bytes(body),
    }
    times = interleaved(steps, rounds=5, loops=rounds)
    out = {name: min(values) * 1e6 for name, values in times.items()}
    # The digest row re-parses; report what the digest itself adds.
    out["sequence digest"] -= out["parse into the graph"]
    return out


async def store_round_trips(requests: int = 200) -> float:
    """Process CPU (both threads) of one quick non-streamed request's SQLite writes, in
    microseconds: the claim, then the COMMIT that carries SEND (proxy/attempt.py). Like the
    load above, the request has no conversation id and no Idempotency-Key: no answer is
    kept for replay (proxy/replay.py).

    The fsyncs themselves are waits, not CPU; their wall time depends on the disk.
    """
    from turngate.state.manifest import DispatchManifest
    from turngate.state.sqlite import SQLiteStore

    store = SQLiteStore(Path(tempfile.mkdtemp(prefix="turngate-bench-")) / "cpu.db")
    await store.open()

    async def one(n: int) -> None:
        draft = DispatchManifest(
            operation_id=f"op_bench_{n}",
            conversation_id=None,
            conversation_revision=3,
            api="openai_chat",
            provider="openai",
            adapter="openai_chat@1",
            model="gpt-4o",
            route="/openai/v1/chat/completions",
            stream=False,
            sequence_digest="sha256:" + "a" * 64,
            toolset_digest="sha256:" + "b" * 64,
            policy_digest="sha256:" + "c" * 64,
            request_digest="sha256:" + "d" * 64,
            credential_hash="hmac-sha256:" + "e" * 64,
            created_at=time.time(),
        )
        await store.claim(draft, now=time.time())
        digest = "sha256:" + "f" * 64
        await store.commit_turn(draft.operation_id, digest=digest, now=time.time(), sent=True)

    try:
        for n in range(20):
            await one(-n - 1)
        started = time.process_time()
        for n in range(requests):
            await one(n)
        return (time.process_time() - started) / requests * 1e6
    finally:
        await store.close()


def report(size: int, rounds: dict[str, list[Result]]) -> None:
    """Medians over rounds, each with its min-max; ratios per round, then their median."""
    print(f"\nbody {size / 1000:.0f} KB (median over rounds [min-max])")
    print(f"{'':<32}{'p50 ms':>20}{'p99 ms':>9}{'req/s @32':>20}")
    for name, rs in rounds.items():
        p50s, rps = [r.p50_ms for r in rs], [r.rps for r in rs]
        print(
            f"{name:<32}{median(p50s):9.2f} [{min(p50s):.2f}-{max(p50s):.2f}]"
            f"{median([r.p99_ms for r in rs]):9.2f}"
            f"{median(rps):9.0f} [{min(rps):.0f}-{max(rps):.0f}]"
        )
    for name in (FLOOR, "turngate (sqlite)", "turngate (memory)", SYNC_NORMAL):
        added, bare_added, latency, share = [], [], [], []
        for direct, bare, ours in zip(
            rounds["direct"], rounds["bare pass-through"], rounds[name], strict=True
        ):
            added.append(ours.p50_ms - direct.p50_ms)
            bare_added.append(bare.p50_ms - direct.p50_ms)
            latency.append(added[-1] / bare_added[-1])
            share.append(ours.rps / bare.rps)
        print(
            f"{name}: added p50 {median(added):.2f} ms vs bare {median(bare_added):.2f} ms = "
            f"{median(latency):.2f}x [{min(latency):.2f}-{max(latency):.2f}] (target <= 1.5x); "
            f"throughput {median(share):.0%} [{min(share):.0%}-{max(share):.0%}] of bare "
            "(target >= 80%)"
        )


def print_budget(rounds: dict[str, list[Result]], steps_us: float) -> None:
    """What each target leaves turngate per request, against what the steps SPEC sections 3,
    4 and 6 ask of every request (read and parse the body, label, validate, render, count
    the tokens for admission, digest the sequence and the bytes) cost in process
    on a warm cache (no aiohttp, store, telemetry): a target is within reach only when those
    steps fit in what it leaves.

    Throughput: at 80% of the bare pass-through's req/s, turngate's core may spend
    1 / (0.8 x bare req/s) per request; the bare pass-through's own serving (its CPU per
    request at 32 in flight, /proc) is the HTTP work turngate does too. Latency: 1.5x the
    bare pass-through's added p50 leaves half of it above the bare pass-through's p50, and
    at one request at a time the proxy's CPU is on the path.
    """
    bare = rounds["bare pass-through"]
    wall = 1e6 / (0.8 * median(r.rps for r in bare))
    serving = median(r.busy_us for r in bare if r.busy_us is not None)
    added = median(b.p50_ms - d.p50_ms for b, d in zip(bare, rounds["direct"], strict=True))
    for target, left in (
        ("throughput 80%", wall - serving),
        ("added p50 1.5x", 0.5 * added * 1000),
    ):
        verdict = "fit" if steps_us <= left else f"are {steps_us / max(left, 1):.1f}x it"
        print(
            f"{target}: leaves turngate {left:.0f} us per request above the bare "
            f"pass-through's own work; turngate's steps in process take {steps_us:.0f} us "
            f"({verdict})"
        )
    busy = {
        name: median(r.busy_us for r in rs if r.busy_us is not None)
        for name, rs in rounds.items()
        if name != "direct"
    }
    print("CPU per request at 32 in flight, /proc (us; | marks the 80% target's budget):")
    print(bars(busy, mark=wall))


def bars(values: dict[str, float], *, mark: float, width: int = 48) -> str:
    """One bar per value, scaled to the largest, with ``|`` where ``mark`` falls."""
    top = max([*values.values(), mark])
    at = round(mark / top * width)
    lines = []
    for name, value in values.items():
        bar = list("#" * round(value / top * width) + " " * width)[: width + 1]
        bar[at] = "|"
        lines.append(f"  {name:<32}{value:7.0f} {''.join(bar).rstrip()}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "upstream":
        run_upstream(int(args[1]))
    elif args and args[0] == "bare":
        run_bare(int(args[1]), args[2])
    elif args and args[0] == "floor":
        run_bare(int(args[1]), args[2], floor=True)
    else:
        telemetry = ("--telemetry", "tracing and metrics on vs off instead")
        options = bench_options("bench.proxy_latency", args, telemetry)
        if options.telemetry:
            # Through turngate itself (bench/telemetry_proxy.py).
            from bench.telemetry_proxy import main as telemetry_main

            telemetry_main(args)
        else:
            asyncio.run(run(quick=options.quick))


if __name__ == "__main__":
    main()
