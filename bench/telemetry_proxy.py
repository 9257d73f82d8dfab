"""Requests per second through the REAL proxy with tracing and metrics on vs off, same run.

Run: .venv/bin/python -m bench telemetry_proxy [-- --quick]
     (or: -m bench.proxy_latency --telemetry [--quick])

Processes, each started here: the fake upstream (bench.proxy_latency's canned Chat
completion), an OTLP/HTTP sink that drops everything (bench.telemetry_overhead's), and one
`turngate serve --state memory://` per configuration, all turngate processes pinned to one
core, the upstream, the sink and this load generator to the other:

    off       OTEL_SDK_DISABLED=true: no-op tracer and meter
    default   nothing configured: no-op tracer, metrics counted for GET /metrics
    on-10%    OTLP/HTTP traces and metrics (every 1 s) to the sink, 1 dispatch in 10 traced
    on        the same, every dispatch traced

The body is a valid tool-heavy Chat conversation of about 10 KB; concurrency 32. The
configurations are measured in turn, round after round; a figure is the median over rounds
with its min-max beside it (the machine is shared).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from statistics import median

from bench._options import bench_options
from bench.proxy_latency import CHAT, body_of, free_port, throughput, wait_ready

SERVE_CORE, LOAD_CORE = 1, 0
EXPORTING = {"OTEL_METRIC_EXPORT_INTERVAL": "1000"}
CONFIGURATIONS: dict[str, dict[str, str]] = {
    "off": {"OTEL_SDK_DISABLED": "true"},
    "default": {},
    "on-10%": {
        **EXPORTING,
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.1",
    },
    "on": EXPORTING,
}


def spawn(
    command: list[str], core: int, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    os.sched_setaffinity(process.pid, {core})
    return process


async def run(quick: bool) -> None:
    os.sched_setaffinity(0, {LOAD_CORE})
    upstream_port, sink_port = free_port(), free_port()
    upstream = f"http://127.0.0.1:{upstream_port}"
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    processes = [
        spawn(
            [sys.executable, "-m", "bench.proxy_latency", "upstream", str(upstream_port)], LOAD_CORE
        ),
        spawn(
            [sys.executable, "-m", "bench.telemetry_overhead", "sink", str(sink_port)], LOAD_CORE
        ),
    ]
    urls: dict[str, str] = {}
    try:
        for name, env in CONFIGURATIONS.items():
            port = free_port()
            chosen = {**base, **env}
            if name.startswith("on"):
                chosen["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{sink_port}"
            command = [sys.executable, "-m", "turngate.cli", "serve", "--log-level", "warning"]
            command += ["--upstream-openai", upstream, "--state", "memory://"]
            command += ["--port", str(port)]
            processes.append(spawn(command, SERVE_CORE, chosen))
            urls[name] = f"http://127.0.0.1:{port}"
        await wait_ready(upstream + "/")
        await wait_ready(f"http://127.0.0.1:{sink_port}/")
        for url in urls.values():
            await wait_ready(url + "/healthz")
        seconds, rounds = (1.5, 3) if quick else (3.0, 5)
        body = body_of(10_000)
        print(
            f"turngate on core {SERVE_CORE}, upstream + sink + load on {LOAD_CORE}; "
            f"body {len(body)} B, concurrency 32, {seconds}s x {rounds} rounds"
        )
        results: dict[str, list[float]] = {name: [] for name in urls}
        for url in urls.values():
            await throughput(url + "/openai" + CHAT, body, 32, 0.5)  # warm-up
        for _ in range(rounds):
            for name, url in urls.items():
                results[name].append(await throughput(url + "/openai" + CHAT, body, 32, seconds))
        off = median(results["off"])
        print(f"{'configuration':<10} {'req/s':>8} {'min-max':>15} {'vs off':>7}")
        for name, values in results.items():
            mid = median(values)
            spread = f"{min(values):.0f}-{max(values):.0f}"
            print(f"{name:<10} {mid:>8.0f} {spread:>15} {mid / off:>7.2f}")
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(30)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    # ``--telemetry``: how bench.proxy_latency hands this bench its arguments.
    telemetry = ("--telemetry", "(this bench: tracing and metrics on vs off)")
    asyncio.run(run(quick=bench_options("bench.telemetry_proxy", args, telemetry).quick))


if __name__ == "__main__":
    main()
