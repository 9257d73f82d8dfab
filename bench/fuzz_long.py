"""The fuzz targets of tests/fuzz, run longer: more examples, every crash kept, not just the first.

Run: .venv/bin/python -m bench.fuzz_long [--examples N] [--only PREFIX…] [--out DIR]
     [--atheris SECONDS] [--quick]

For each target (request and response parsers, SSE decoder, stream decoders, relays,
assembler; per API where it applies) hypothesis draws ``--examples`` inputs from the
strategies the test suite uses. Nothing stops at the first crash: each distinct crash
(exception type and the innermost turngate line that raised it) is counted and its smallest
input written to ``--out`` (default: a new temporary folder), ready to be reduced and pinned
in tests/fuzz/examples/.

``--atheris SECONDS`` then runs coverage-guided byte fuzzing (libFuzzer through atheris,
``pip install atheris``; optional, not a test dependency) for that long per byte target,
each in its own process, seeded with the recorded fixtures. libFuzzer writes any crashing
input to ``--out`` as ``crash-…``.

Prints one row per target (examples, time, outcomes, distinct crashes); exits 1 on a crash.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz import (
    caught,
    drive_assembler,
    drive_decoder,
    drive_relay,
    drive_request,
    drive_response,
    drive_sse,
)
from tests.fuzz.strategies import (
    marks,
    mutated_stream,
    relay_steps,
    request_bodies,
    request_seeds,
    response_bodies,
    response_seeds,
    routes,
    stream_seeds,
    tool_schemas,
)
from tests.fuzz.test_fuzz_assembler import event_lists
from turngate.adapters import API_NAMES
from turngate.adapters.base import RouteInfo
from turngate.graph.model import ApiName


@dataclass
class Crash:
    signature: str
    count: int = 0
    size: int = 0
    trace: str = ""
    example: bytes = b""


@dataclass
class Run:
    target: str
    examples: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    crashes: dict[str, Crash] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass(frozen=True)
class Target:
    name: str
    strategy: Callable[[], st.SearchStrategy[Any]]
    drive: Callable[[Any], str]
    # The input as the bytes of a file to pin, and that file's suffix.
    encode: Callable[[Any], bytes]
    suffix: str
    # Whether a typed turngate error is an acceptable outcome (a relay must not raise at all).
    typed_ok: bool = True


def signature(exc: BaseException) -> str:
    """Exception type and the innermost turngate line on its traceback."""
    where = "?"
    for frame in traceback.extract_tb(exc.__traceback__):
        if "/turngate/" in frame.filename:
            where = f"{frame.filename.split('/turngate/', 1)[1]}:{frame.lineno}"
    return f"{type(exc).__name__} at turngate/{where}: {str(exc)[:80]}"


def dump_json(value: Any) -> bytes:
    """orjson when it can; the stdlib for NaN, Infinity and what orjson will not nest."""
    if not _has_nonfinite(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_INDENT_2)
        except TypeError:
            pass
    return json.dumps(value, allow_nan=True).encode()


def _has_nonfinite(value: Any) -> bool:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return True
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def fed_bytes(steps: list[tuple[str, bytes]]) -> bytes:
    return b"".join(piece for kind, piece in steps if kind == "feed")


def api_targets(api: ApiName) -> list[Target]:
    return [
        Target(
            f"request.{api}",
            lambda: st.tuples(request_bodies(api), routes),
            lambda v: drive_request(api, v[0], v[1]),
            lambda v: dump_json(v[0]),
            ".json",
        ),
        Target(
            f"response.{api}",
            lambda: response_bodies(api),
            lambda v: drive_response(api, v),
            dump_json,
            ".json",
        ),
        Target(
            f"decoder.{api}",
            lambda: mutated_stream(api),
            lambda v: drive_decoder(api, v),
            bytes,
            ".sse",
        ),
        Target(
            f"relay.{api}",
            lambda: st.tuples(relay_steps(api), marks, tool_schemas),
            lambda v: drive_relay(api, v[0], marks=v[1], tools=v[2]),
            lambda v: fed_bytes(v[0]),
            ".sse",
            typed_ok=False,
        ),
        Target(
            f"assembler.{api}",
            lambda: st.tuples(event_lists(api), marks, tool_schemas),
            lambda v: drive_assembler(api, v[0], marks=v[1], tools=v[2]),
            lambda v: repr(v[0]).encode(),
            ".txt",
        ),
    ]


def sse_streams() -> st.SearchStrategy[tuple[bytes, int]]:
    """A broken stream of any API and the line limit its giant lines are grown around."""
    return st.tuples(st.sampled_from(API_NAMES), st.sampled_from((1024, 16384, 65536))).flatmap(
        lambda t: st.tuples(mutated_stream(t[0], giant=t[1]), st.just(t[1]))
    )


def targets() -> list[Target]:
    out = [target for api in API_NAMES for target in api_targets(api)]
    out.append(
        Target(
            "sse",
            sse_streams,
            lambda v: drive_sse([v[0]], max_line=v[1], max_frame=v[1] * 2, strict=False),
            lambda v: v[0],
            ".sse",
        )
    )
    return out


def fuzz(target: Target, examples: int) -> Run:
    run = Run(target.name)

    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(target.strategy())
    def one(value: Any) -> None:
        run.examples += 1
        try:
            outcome = (
                caught(lambda: target.drive(value)) if target.typed_ok else target.drive(value)
            )
        except Exception as exc:  # every untyped error is a finding, kept and counted
            example = target.encode(value)
            crash = run.crashes.setdefault(signature(exc), Crash(signature(exc)))
            crash.count += 1
            if not crash.example or len(example) < crash.size:
                crash.size, crash.example = len(example), example
                crash.trace = "".join(traceback.format_exception(exc))
            outcome = "crash"
        kind = outcome.partition(":")[0]
        # Which typed errors escaped is worth seeing; other outcomes are counted by kind.
        run.outcomes[outcome if kind == "raised" else kind] += 1

    started = time.perf_counter()
    one()
    run.seconds = time.perf_counter() - started
    return run


def report(run: Run, out: Path, suffix: str) -> None:
    outcomes = ", ".join(f"{k} {v}" for k, v in run.outcomes.most_common())
    print(
        f"{run.target:<26} {run.examples:>6} examples {run.seconds:7.1f}s  "
        f"{len(run.crashes)} crashes  [{outcomes}]",
        flush=True,
    )
    for n, crash in enumerate(sorted(run.crashes.values(), key=lambda c: -c.count)):
        path = out / f"{run.target}.{n}{suffix}"
        path.write_bytes(crash.example)
        path.with_suffix(".trace").write_text(crash.trace)
        print(f"    {crash.count:>5}x {crash.signature}  -> {path} ({crash.size} bytes)")


# --- atheris: coverage-guided byte fuzzing, one process per target ------------------------

BYTE_TARGETS = [f"{kind}.{api}" for kind in ("request", "response", "relay") for api in API_NAMES]


def byte_drive(name: str) -> Callable[[bytes], None]:
    """What one libFuzzer input (bytes) drives: a body is read as orjson reads it; relay
    input is an upstream's bytes, fed in two reads cut where its first byte says."""
    kind, api_name = name.split(".")
    api: ApiName = api_name  # type: ignore[assignment]
    route = RouteInfo(model="m", stream=False)

    def body_of(data: bytes) -> Any:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            return None

    if kind == "request":

        def request(data: bytes) -> None:
            body = body_of(data)
            if body is not None:
                caught(lambda: drive_request(api, body, route))

        return request
    if kind == "response":

        def response(data: bytes) -> None:
            body = body_of(data)
            if body is not None:
                caught(lambda: drive_response(api, body))

        return response

    def relay(data: bytes) -> None:
        cut = data[0] * len(data) // 256 if data else 0
        drive_relay(api, [("feed", data[:cut]), ("feed", data[cut:])])

    return relay


def seeds_of(name: str) -> list[bytes]:
    kind, api_name = name.split(".")
    api: ApiName = api_name  # type: ignore[assignment]
    if kind == "relay":
        return list(stream_seeds(api))
    bodies = request_seeds(api) if kind == "request" else response_seeds(api)
    return [orjson.dumps(b) for b in bodies]


# The child process instruments turngate (and only turngate: instrumenting every loaded
# module takes minutes) before anything imports it.
_CHILD = """
import sys
from pathlib import Path
import atheris
with atheris.instrument_imports(include=["turngate"]):
    from turngate.adapters import API_NAMES, get_adapter
    from turngate.adapters.relay import stream_codec
    for api in API_NAMES:
        get_adapter(api)
        stream_codec(api)
from bench.fuzz_long import atheris_child
atheris_child(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]))
"""


def atheris_child(name: str, seconds: int, out: Path) -> None:
    import atheris  # type: ignore[import-untyped, import-not-found, unused-ignore]

    corpus = Path(tempfile.mkdtemp(prefix=f"corpus-{name}-"))
    for n, seed in enumerate(seeds_of(name)):
        (corpus / f"seed{n}").write_bytes(seed)
    argv = [
        sys.argv[0],
        str(corpus),
        f"-max_total_time={seconds}",
        f"-artifact_prefix={out}/{name}.",
        "-max_len=262144",
        "-rss_limit_mb=4096",
        "-print_final_stats=1",
    ]
    atheris.Setup(argv, byte_drive(name))
    atheris.Fuzz()


def atheris_runs(seconds: int, out: Path, only: list[str]) -> int:
    try:
        import atheris  # type: ignore[import-untyped, import-not-found, unused-ignore]  # noqa: F401
    except ImportError:
        print("atheris: not installed (pip install atheris); skipped")
        return 0
    failures = 0
    for name in BYTE_TARGETS:
        if only and not any(name.startswith(p) for p in only):
            continue
        started = time.perf_counter()
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, name, str(seconds), str(out)],
            cwd=Path(__file__).resolve().parents[1],
            capture_output=True,
            text=True,
            check=False,
        )
        stats = [ln for ln in child.stderr.splitlines() if ln.startswith("stat::")]
        runs = next((ln.split(":")[-1].strip() for ln in stats if "number_of_executed" in ln), "?")
        verdict = "ok" if child.returncode == 0 else f"CRASH (exit {child.returncode})"
        print(
            f"atheris {name:<24} {runs:>8} runs {time.perf_counter() - started:6.1f}s  {verdict}",
            flush=True,
        )
        if child.returncode != 0:
            failures += 1
            print("\n".join(child.stderr.splitlines()[-30:]))
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.fuzz_long")
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--atheris", type=int, default=0, metavar="SECONDS")
    parser.add_argument("--quick", action="store_true", help="200 examples per target")
    args = parser.parse_args(argv)
    sys.setrecursionlimit(10_000)  # the stdlib writes examples nested up to 1024 deep
    out = args.out or Path(tempfile.mkdtemp(prefix="turngate-fuzz-"))
    out.mkdir(parents=True, exist_ok=True)
    examples = 200 if args.quick else args.examples
    crashes = total = 0
    for target in targets():
        if args.only and not any(target.name.startswith(p) for p in args.only):
            continue
        run = fuzz(target, examples)
        report(run, out, target.suffix)
        crashes += len(run.crashes)
        total += run.examples
    print(f"hypothesis: {total} examples, {crashes} distinct crashes; inputs in {out}")
    if args.atheris:
        crashes += atheris_runs(args.atheris, out, args.only)
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
