"""User-space instructions per streamed chunk, turngate against the bare pass-through.

Run: .venv/bin/python -m bench instructions     (or: -m bench.instructions_stream [--quick]
     [--api API]: the streams of bench/stream_overhead.py as that API writes them)
Needs valgrind (Debian: `apt-get install valgrind`); without it, says so and stops.

Seconds on a shared machine stray by a fifth between runs of the same code (docs/
performance.md, "Streams, fourth pass"); instructions do not. Each proxy runs under
`valgrind --tool=callgrind` behind an upstream that paces its chunks far apart (40 ms by
default, so each is read on its own even at valgrind's speed), and the counters are zeroed
and dumped (`callgrind_control`) around streams of 500 chunks and then of 100: the
difference over the 400 chunks more is the cost of one chunk, within a few percent between
runs; what a request costs once is the 100-chunk stream less its chunks. Kernel time (the
syscalls, the same number per chunk for both proxies) is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web

from bench import stream_overhead as streams
from bench.proxy_latency import LOAD_CORE, PROXY_CORE, free_port, wait_ready

SHORT, LONG = streams.SHORT, streams.CHUNKS


def run_upstream(port: int, pace: float, api: streams.Api) -> None:
    frames = {
        f"bench-{kind}{suffix}": maker(chunks)
        for kind, maker in (("text", api.text), ("tools", api.tools))
        for suffix, chunks in (("", LONG), ("-short", SHORT))
    }

    async def answer(request: web.Request) -> web.StreamResponse:
        model = api.kind_of(orjson.loads(await request.read()))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for frame in frames[model]:
            await response.write(frame)
            await asyncio.sleep(pace)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post(api.path, answer)
    app.router.add_get("/", lambda _: web.Response(text="ok"))  # type: ignore[arg-type,return-value]
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def dumped_total(path: Path) -> int:
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no instruction total in {path}")


async def counted(
    proxy: str, kind: str, upstream: str, streams_at_once: int, api: streams.Api
) -> tuple[int, int]:
    """Instructions of ``proxy`` over ``streams_at_once`` streams of 500 chunks, then of 100."""
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="turngate-callgrind-"))
    valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={folder}/cg.%p"]
    if proxy == "bare":
        command = [sys.executable, "-m", "bench.stream_overhead", "bare", str(port), upstream]
        command.append(api.name)
        ready = "/"
    else:
        command = [sys.executable, "-m", "turngate.cli", "serve", "--log-level", "warning"]
        command += ["--upstream-openai", upstream, "--upstream-anthropic", upstream]
        command += ["--upstream-gemini", upstream, "--port", str(port), "--state", "memory://"]
        ready = "/healthz"
    # The system allocator: pymalloc's arenas would move counts between runs.
    env = {**os.environ, "PYTHONMALLOC": "malloc"}
    process = subprocess.Popen(
        [*valgrind, *command], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    os.sched_setaffinity(process.pid, {PROXY_CORE})
    url = f"http://127.0.0.1:{port}{api.prefix}{api.path}{api.query}"
    long_body = api.request(kind)
    short_body = long_body.replace(f'"bench-{kind}"'.encode(), f'"bench-{kind}-short"'.encode())
    try:
        async with aiohttp.ClientSession() as session:
            # valgrind starts the interpreter some 50 times slower.
            await wait_ready(f"http://127.0.0.1:{port}{ready}", attempts=600, pause=0.2)

            async def batch(body: bytes, count: int) -> None:
                await asyncio.gather(
                    *(streams.one_stream(session, url, body) for _ in range(count))
                )

            await batch(short_body, 2)  # warm up
            totals = []
            for body in (long_body, short_body):
                subprocess.run(
                    ["callgrind_control", "-z", str(process.pid)], check=True, capture_output=True
                )
                await batch(body, streams_at_once)
                subprocess.run(
                    ["callgrind_control", "-d", str(process.pid)], check=True, capture_output=True
                )
                dumps = sorted(folder.glob(f"cg.{process.pid}.*"), key=lambda p: int(p.suffix[1:]))
                totals.append(dumped_total(dumps[-1]))
            return totals[0], totals[1]
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(120)
        shutil.rmtree(folder, ignore_errors=True)


async def run(kinds: list[str], at_once: int, pace: float, api: streams.Api) -> None:
    os.sched_setaffinity(0, {LOAD_CORE})
    port = free_port()
    me = [sys.executable, "-m", "bench.instructions_stream", "upstream", str(port), str(pace)]
    me.append(api.name)
    upstream = subprocess.Popen(me)
    os.sched_setaffinity(upstream.pid, {LOAD_CORE})
    base = f"http://127.0.0.1:{port}"
    print(
        f"{api.name} streams, {at_once} at once, one chunk every {pace * 1000:.0f} ms; memory store"
    )
    try:
        await wait_ready(base + "/")
        for kind in kinds:
            figures = {}
            for proxy in ("bare", "turngate"):
                started = time.monotonic()
                whole, few = await counted(proxy, kind, base, at_once, api)
                per_chunk = (whole - few) / (at_once * (LONG - SHORT))
                per_request = few / at_once - SHORT * per_chunk
                figures[proxy] = (per_chunk, per_request)
                print(
                    f"{kind:<6}{proxy:<10}{per_chunk:>10,.0f} instructions per chunk"
                    f"{per_request:>14,.0f} per request ({time.monotonic() - started:.0f} s)"
                )
            ratio = figures["turngate"][0] / figures["bare"][0]
            print(f"{kind}: turngate per chunk {ratio:.2f}x the bare pass-through's (user space)")
    finally:
        upstream.send_signal(signal.SIGINT)
        upstream.wait(30)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "upstream":
        run_upstream(int(args[1]), float(args[2]), streams.APIS[args[3]])
        return
    parser = argparse.ArgumentParser(prog="bench.instructions_stream")
    parser.add_argument("--quick", action="store_true", help="text chunks only")
    parser.add_argument("--streams", type=int, default=4, help="streams at once (default 4)")
    parser.add_argument("--pace", type=float, default=0.04, help="seconds between chunks")
    parser.add_argument("--api", choices=sorted(streams.APIS), default="openai_chat")
    options = parser.parse_args(args)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind): nothing measured")
        return
    kinds = ["text"] if options.quick else ["text", "tools"]
    asyncio.run(run(kinds, options.streams, options.pace, streams.APIS[options.api]))


if __name__ == "__main__":
    main()
