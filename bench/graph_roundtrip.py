"""Parse + validate + render of a 200-message tool-heavy Chat request, against orjson.

Run: .venv/bin/python -m bench.graph_roundtrip
Prints best-of-N times and the ratio to an orjson loads + dumps of the same bytes
(target: <= 4x). Digests are lazy, so a second line shows the cost with the sequence
digest computed too (what the proxy's manifest asks for).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson

from turngate.adapters.openai_chat import ADAPTER, CAPABILITIES
from turngate.graph.validator import validate

PARAGRAPH = (
    "The quarterly report lists revenue by region, churn by cohort and the open incidents "
    "with their owners; summarise what changed since last week and flag anything unusual. "
)


def tool_heavy_request(messages: int = 200, target_bytes: int = 150_000) -> dict[str, Any]:
    body: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an operations analyst. " + PARAGRAPH}
    ]
    turn = 0
    while len(body) + 5 <= messages:
        turn += 1
        body.append({"role": "user", "content": f"Step {turn}: " + PARAGRAPH * 2})
        calls = [
            {
                "id": f"call_{turn}_{k}",
                "type": "function",
                "function": {
                    "name": "query_metrics",
                    "arguments": orjson.dumps(
                        {"region": f"r{k}", "since": "2026-11-01", "fields": ["rev", "churn"]}
                    ).decode(),
                },
            }
            for k in range(3)
        ]
        body.append({"role": "assistant", "content": None, "tool_calls": calls})
        for k in range(3):
            body.append(
                {"role": "tool", "tool_call_id": f"call_{turn}_{k}", "content": PARAGRAPH * 2}
            )
    while len(body) < messages:
        role = "user" if body[-1]["role"] != "user" else "assistant"
        body.append({"role": role, "content": PARAGRAPH})
    request = {
        "model": "gpt-4o",
        "messages": body,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "query_metrics",
                    "description": "Query metrics.",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "region": {"type": "string"},
                            "since": {"type": "string"},
                            "fields": {"type": "array", "items": {"type": "string"}},
                        },
                        "required": ["region"],
                    },
                },
            }
        ],
    }
    size = len(orjson.dumps(request))
    scale = max(1, round(target_bytes / size))
    if scale > 1:
        for message in request["messages"]:
            if isinstance(message.get("content"), str):
                message["content"] = message["content"] * scale
    return request


def best_of(fn: Callable[[], object], rounds: int = 7, loops: int = 50) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        times.append((time.perf_counter() - start) / loops)
    return min(times)


def main() -> None:
    raw = orjson.dumps(tool_heavy_request())
    request = orjson.loads(raw)

    def baseline() -> object:
        return orjson.dumps(orjson.loads(raw))

    def turngate() -> object:
        seq = ADAPTER.parse_request(orjson.loads(raw))
        assert validate(seq, CAPABILITIES).ready
        return orjson.dumps(ADAPTER.render_request(seq))

    def turngate_with_digest() -> object:
        seq = ADAPTER.parse_request(orjson.loads(raw))
        assert validate(seq, CAPABILITIES).ready
        seq.sequence_digest  # noqa: B018 - the manifest asks for it
        return orjson.dumps(ADAPTER.render_request(seq))

    assert orjson.loads(turngate()) == request
    base = best_of(baseline)
    ours = best_of(turngate)
    digested = best_of(turngate_with_digest)
    spread = statistics.pstdev([best_of(baseline, 1) for _ in range(5)])
    rows = [
        ("orjson loads+dumps", base, ""),
        ("parse+validate+render", ours, f"ratio {ours / base:4.2f}x (target <= 4x)"),
        ("  ... + sequence digest", digested, f"ratio {digested / base:4.2f}x"),
    ]
    print(f"request: {len(request['messages'])} messages, {len(raw) / 1000:.0f} KB")
    for name, seconds, note in rows:
        print(f"{name:<28}{seconds * 1e6:8.0f} us   {note}")
    print(f"baseline spread (stdev of 5 single runs): {spread * 1e6:.0f} us")


if __name__ == "__main__":
    main()
