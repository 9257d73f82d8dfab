"""Requests/s of a handler making a dispatch's telemetry calls: telemetry on vs off, same run.

Run: .venv/bin/python -m bench telemetry     (or: -m bench.telemetry_overhead [--quick])

One small aiohttp handler makes the calls the proxy makes per dispatch (the dispatch span
with the inbound traceparent, verdict, manifest, four state events, the upstream CLIENT
span with traceparent injection, the response's GenAI attributes, the validator, first-byte
and duration metrics, the dispatch log line) and answers a canned completion; there is no
real upstream, so the figure isolates telemetry. It is served by a separate process pinned
to one core, in five configurations (one process each, all on one core), measured in short
runs alternated ten times, the best run of each kept:

    bare      the handler without the dispatch's telemetry calls, meter off (the floor)
    off       OTEL_SDK_DISABLED=true: no-op tracer and meter
    default   nothing configured: no-op tracer, metrics counted for /metrics
    on        traces and metrics exported by OTLP/HTTP (batch spans, metrics every 1 s) to a
              local sink on the load generator's core, every dispatch traced
    on-10%    the same with OTEL_TRACES_SAMPLER=traceidratio, OTEL_TRACES_SAMPLER_ARG=0.1

Then the same calls timed in this process without HTTP (microseconds per dispatch), which
is steadier when other jobs share the machine.

The dispatch log's level is ``warning`` in every configuration, as for a quiet production
sidecar (its INFO line is then skipped). Printed: best requests/s of each configuration at
concurrency 32, the ratios to ``off``, and the in-process microseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from bench._options import bench_options
from bench.proxy_latency import free_port, wait_ready
from turngate.telemetry import DispatchLine, configure_dispatch_log, log_dispatch
from turngate.telemetry.config import TelemetryConfig
from turngate.telemetry.prometheus import install
from turngate.telemetry.setup import Telemetry, setup_telemetry

ROUTE = "/openai/v1/chat/completions"
UPSTREAM_URL = "https://api.openai.com/v1/chat/completions"
ANSWER = orjson.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"content": "ok"}}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 12, "total_tokens": 1012},
    }
)
SERVER_CORE, LOAD_CORE = 1, 0
ROUNDS = 10
# + the sink's endpoint, set in run() for every "on…" configuration.
EXPORTING = {"OTEL_METRIC_EXPORT_INTERVAL": "1000"}
CONFIGURATIONS: dict[str, dict[str, str]] = {
    "bare": {"OTEL_SDK_DISABLED": "true"},
    "off": {"OTEL_SDK_DISABLED": "true"},
    "default": {},
    "on": EXPORTING,
    "on-10%": {
        **EXPORTING,
        "OTEL_TRACES_SAMPLER": "traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.1",
    },
}
INBOUND = {
    "Content-Type": "application/json",
    "Authorization": "Bearer sk-bench",
    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
}


# -- the served handler ----------------------------------------------------------------


def record_dispatch(telemetry: Telemetry, inbound: Mapping[str, str], started: float) -> None:
    """The telemetry calls of one committed, non-streaming dispatch (the request duration
    is install()'s middleware's)."""
    metrics = telemetry.metrics
    operation_id = "op_" + uuid.uuid4().hex
    with telemetry.dispatch_span(
        api="openai_chat",
        model="gpt-4o",
        route=ROUTE,
        stream=False,
        rollout_mode="enforce",
        conversation_id="conv-bench",
        carrier=inbound,
    ) as span:
        span.verdict("READY", [])
        metrics.validated("openai_chat", [])
        span.manifest(operation_id, revision=3, attempt=1)
        span.state("claim", "DISPATCHING")
        outbound = CIMultiDict(inbound)
        with span.upstream("POST", UPSTREAM_URL, outbound) as call:
            span.state("send", "SENT")
            call.status(200)
            metrics.first_byte("openai_chat", time.perf_counter() - started)
        span.state("commit", "COMMITTED")
        span.response(
            model="gpt-4o-2024-08-06",
            response_id="chatcmpl-bench",
            finish_reasons=["stop"],
            input_tokens=1000,
            output_tokens=12,
        )
    seconds = time.perf_counter() - started
    log_dispatch(
        DispatchLine(
            route=ROUTE,
            api="openai_chat",
            verdict="READY",
            duration_ms=seconds * 1000,
            operation_id=operation_id,
            state="COMMITTED",
            attempt=1,
            upstream_status=200,
        )
    )


def record_nothing(inbound: Mapping[str, str], started: float) -> None:
    """What ``record_dispatch`` does that is not telemetry (ids, the outbound headers)."""
    "op_" + uuid.uuid4().hex
    CIMultiDict(inbound)
    time.perf_counter() - started


def run_server(port: int, bare: bool) -> None:
    telemetry = setup_telemetry()
    configure_dispatch_log("warning", stream=sys.stderr)

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        started = time.perf_counter()
        # Where the upstream call would be.
        await asyncio.sleep(0)
        if bare:
            record_nothing(request.headers, started)
        else:
            record_dispatch(telemetry, request.headers, started)
        return web.Response(body=ANSWER, content_type="application/json")

    app = web.Application()
    install(app, telemetry)
    app.router.add_post(ROUTE, handler)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def run_sink(port: int) -> None:
    """An OTLP/HTTP collector that accepts and drops everything."""

    async def accept(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=b"", content_type="application/x-protobuf")

    app = web.Application(client_max_size=1 << 26)
    app.router.add_post("/v1/traces", accept)
    app.router.add_post("/v1/metrics", accept)
    app.router.add_get("/", accept)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# -- load ------------------------------------------------------------------------------


async def throughput(url: str, concurrency: int, seconds: float) -> float:
    headers = INBOUND
    body = b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}'
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


async def serve_all(
    configurations: dict[str, dict[str, str]], stack: contextlib.ExitStack
) -> dict[str, str]:
    """One server process per configuration, all pinned to the server core (an idle one
    costs nothing); returns each one's URL."""
    urls: dict[str, str] = {}
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    for name, env in configurations.items():
        port = free_port()
        command = [sys.executable, "-m", "bench.telemetry_overhead", "serve", str(port), name]
        process = spawn(command, SERVER_CORE, {**base, **env})
        stack.callback(stop, process)
        await wait_ready(f"http://127.0.0.1:{port}/metrics")
        urls[name] = f"http://127.0.0.1:{port}{ROUTE}"
    return urls


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(timeout=30)


def spawn(
    command: list[str], core: int, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    os.sched_setaffinity(process.pid, {core})
    return process


class DroppingExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def batch_us(work: Callable[[], None], n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        work()
    return (time.perf_counter() - started) / n * 1e6


def in_process(n: int) -> dict[str, float]:
    """Microseconds of one dispatch's telemetry calls, in this process, no HTTP: the best
    batch of each configuration, the configurations interleaved so load elsewhere on the
    machine falls on all of them alike."""
    configure_dispatch_log("warning", stream=sys.stderr)
    inbound = CIMultiDict(INBOUND)
    telemetries = {
        "off": setup_telemetry(TelemetryConfig(disabled=True)),
        "default": setup_telemetry(TelemetryConfig()),
        # Spans created, filled and ended; their export (a background thread) left out.
        "on (every span, export excluded)": traced(),
    }
    with sampled_environment(CONFIGURATIONS["on-10%"]):
        telemetries["on-10% (export excluded)"] = traced()
    work: dict[str, Callable[[], None]] = {
        "bare": lambda: record_nothing(inbound, time.perf_counter()),
        **{
            name: functools.partial(record_telemetry, telemetry, inbound)
            for name, telemetry in telemetries.items()
        },
    }
    best = dict.fromkeys(work, float("inf"))
    for _ in range(7):
        for name, calls in work.items():
            best[name] = min(best[name], batch_us(calls, n))
    for telemetry in telemetries.values():
        telemetry.shutdown()
    return best


def traced() -> Telemetry:
    return setup_telemetry(
        TelemetryConfig(), span_processors=[SimpleSpanProcessor(DroppingExporter())]
    )


@contextlib.contextmanager
def sampled_environment(env: Mapping[str, str]) -> Iterator[None]:
    """The sampler variables, which the SDK's TracerProvider reads from the environment."""
    names = ("OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG")
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update({name: env[name] for name in names})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def record_telemetry(telemetry: Telemetry, inbound: Mapping[str, str]) -> None:
    started = time.perf_counter()
    record_dispatch(telemetry, inbound, started)
    # What install()'s middleware records for the served handler.
    seconds = time.perf_counter() - started
    telemetry.metrics.request_finished(route=ROUTE, api="openai_chat", status=200, seconds=seconds)


async def run(quick: bool) -> None:
    os.sched_setaffinity(0, {LOAD_CORE})
    rounds, seconds = (3, 1.0) if quick else (ROUNDS, 1.5)
    with contextlib.ExitStack() as stack:
        sink_port = free_port()
        sink_command = [sys.executable, "-m", "bench.telemetry_overhead", "sink", str(sink_port)]
        stack.callback(stop, spawn(sink_command, LOAD_CORE))
        await wait_ready(f"http://127.0.0.1:{sink_port}/")
        endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink_port}"}
        configurations = {
            name: {**env, **endpoint} if name.startswith("on") else env
            for name, env in CONFIGURATIONS.items()
        }
        urls = await serve_all(configurations, stack)
        for url in urls.values():
            await throughput(url, 32, 0.5)
        best: dict[str, float] = {}
        # Short runs, alternated many times: other jobs on the machine come and go, and the
        # best run of each configuration is the one least disturbed.
        for _round in range(rounds):
            for name, url in urls.items():
                best[name] = max(best.get(name, 0.0), await throughput(url, 32, seconds))
    print(
        f"requests/s of the handler at concurrency 32, {seconds} s per run, best of {rounds} "
        f"alternating rounds, servers pinned to core {SERVER_CORE}"
    )
    for name, rps in best.items():
        print(f"  {name:8s} {rps:9.0f} req/s")
    print(f"ratio on/off       {best['on'] / best['off']:.3f}")
    print(f"ratio on-10%/off   {best['on-10%'] / best['off']:.3f}")
    print(f"ratio default/off  {best['default'] / best['off']:.3f}")
    print(f"ratio off/bare     {best['off'] / best['bare']:.3f}")
    print("telemetry calls of one dispatch, in process (best of 7 interleaved batches):")
    for name, micros in in_process(1_000 if quick else 5_000).items():
        print(f"  {name:34s} {micros:7.1f} us")


def main() -> None:
    args = sys.argv[1:]
    if args and args[0] == "serve":
        run_server(int(args[1]), bare=args[2] == "bare")
    elif args and args[0] == "sink":
        run_sink(int(args[1]))
    else:
        asyncio.run(run(quick=bench_options("bench.telemetry_overhead", args).quick))


if __name__ == "__main__":
    main()
