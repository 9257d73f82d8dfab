"""User-space instructions per chat request: the bare pass-through, the floor and turngate.

Run: .venv/bin/python -m bench request_instructions     (or: -m bench.request_instructions
     [--quick]: the 10 KB body only)
Needs valgrind (Debian: `apt-get install valgrind`); without it, says so and stops.

`bench proxy` times requests on a shared machine, where one run's ratios stray by half from
the next's (docs/performance.md, "Reading the figures"). Instructions do not: each proxy of
`bench proxy` (the bare aiohttp pass-through, the floor running turngate's required steps,
turngate with the memory store) runs under `valgrind --tool=callgrind`, its counters are
zeroed and dumped (`callgrind_control`) around REQUESTS sequential requests of the bench's
bodies, and the total over the requests is the cost of one. The ratio to the bare
pass-through is what issue 4's throughput target reads as work per request: at 80% of the
bare pass-through's throughput, turngate may do 1.25 times its work. Kernel time (the same
syscalls per request for every proxy, about) is not counted.
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
from pathlib import Path

import aiohttp

from bench.instructions_stream import dumped_total
from bench.proxy_latency import (
    CHAT,
    LOAD_CORE,
    PROXY_CORE,
    body_of,
    free_port,
    wait_ready,
)

REQUESTS = 40
PROXIES = ("bare pass-through", "floor: bare + required steps", "turngate (memory)")
# Every 1.25: what turngate's work per request may be at 80% of the bare one's throughput.
BUDGET = 1.25


def command(proxy: str, port: int, upstream: str) -> tuple[list[str], str]:
    me = [sys.executable, "-m", "bench.proxy_latency"]
    if proxy == PROXIES[0]:
        return [*me, "bare", str(port), upstream], "/"
    if proxy == PROXIES[1]:
        return [*me, "floor", str(port), upstream], "/"
    serve = [sys.executable, "-m", "turngate.cli", "serve", "--log-level", "warning"]
    serve += ["--upstream-openai", upstream, "--port", str(port), "--state", "memory://"]
    return serve, "/healthz"


async def instructions(proxy: str, upstream: str, body: bytes) -> float:
    """Instructions ``proxy`` runs per request of ``body``, sequential, warm."""
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="turngate-callgrind-"))
    argv, ready = command(proxy, port, upstream)
    valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={folder}/cg.%p"]
    # The system allocator: pymalloc's arenas would move counts between runs.
    env = {**os.environ, "PYTHONMALLOC": "malloc"}
    process = subprocess.Popen(
        [*valgrind, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    os.sched_setaffinity(process.pid, {PROXY_CORE})
    url = f"http://127.0.0.1:{port}/openai{CHAT}"
    headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench"}
    try:
        await wait_ready(f"http://127.0.0.1:{port}{ready}", attempts=600, pause=0.2)
        async with aiohttp.ClientSession() as session:

            async def send(count: int) -> None:
                for _ in range(count):
                    async with session.post(url, data=body, headers=headers) as response:
                        await response.read()
                        assert response.status == 200, response.status

            await send(5)  # warm up: caches, first-use imports
            control = ["callgrind_control"]
            subprocess.run([*control, "-z", str(process.pid)], check=True, capture_output=True)
            await send(REQUESTS)
            subprocess.run([*control, "-d", str(process.pid)], check=True, capture_output=True)
        dumps = sorted(folder.glob(f"cg.{process.pid}.*"), key=lambda p: int(p.suffix[1:]))
        return dumped_total(dumps[-1]) / REQUESTS
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(120)
        shutil.rmtree(folder, ignore_errors=True)


async def run(sizes: list[int]) -> None:
    os.sched_setaffinity(0, {LOAD_CORE})
    port = free_port()
    upstream = subprocess.Popen(
        [sys.executable, "-m", "bench.proxy_latency", "upstream", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.sched_setaffinity(upstream.pid, {LOAD_CORE})
    base = f"http://127.0.0.1:{port}"
    print(f"{REQUESTS} sequential requests per proxy under callgrind; memory store")
    try:
        await wait_ready(base + "/")
        for size in sizes:
            body = body_of(size)
            counts = {proxy: await instructions(proxy, base, body) for proxy in PROXIES}
            bare = counts[PROXIES[0]]
            print(f"\nbody {len(body) / 1000:.0f} KB            instructions per request   vs bare")
            for proxy, count in counts.items():
                print(f"{proxy:<32}{count:>16,.0f}{count / bare:>9.2f}x")
            print(
                f"the 80% throughput target allows {BUDGET:.2f}x; turngate's work is "
                f"{counts[PROXIES[2]] / bare / BUDGET:.1f} times that, the floor's "
                f"{counts[PROXIES[1]] / bare / BUDGET:.1f} times"
            )
    finally:
        upstream.send_signal(signal.SIGINT)
        upstream.wait(30)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="bench.request_instructions")
    parser.add_argument("--quick", action="store_true", help="the 10 KB body only")
    options = parser.parse_args(args)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind): nothing measured")
        return
    asyncio.run(run([10_000] if options.quick else [10_000, 150_000]))


if __name__ == "__main__":
    main()
