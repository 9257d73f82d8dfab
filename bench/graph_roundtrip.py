"""Parse + validate + render of a 200-message tool-heavy Chat request, against orjson.

Run: .venv/bin/python -m bench.graph_roundtrip
Prints best-of-N times and the ratio to an orjson loads + dumps of the same bytes
(target: <= 4x). Digests are lazy, so a second line shows the cost with the sequence
digest computed too (what the proxy's manifest asks for), then each step alone.

The request holds only plain messages (text, function calls, text results), so it takes the
outline path (graph/outline.py). The "blocks built" rows time the same request with its
system message written as one content part, which makes the adapter build every block, as
it does for any request with content parts, images or extra fields. The last rows time the
same conversation in the form of each other API (rendered from the Chat graph by that API's
adapter), each against an orjson loads + dumps of its own bytes: their adapters have no
outline yet, so they build every block.

Times are CPU time of this process (time.process_time), so other processes on a shared
machine slow a run less than they would wall time. Each round times every row once, in
turn (interleaved); a row's figure is its best round, and the spread line gives the
median over best of each row, the noise to read the ratios against.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson

from turngate.adapters import get_adapter
from turngate.adapters.base import Adapter
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
        # Trimmed: rendered to Anthropic, a last assistant text is a prefill, which may not
        # end in whitespace (anthropic_prefill_whitespace).
        body.append({"role": role, "content": PARAGRAPH.rstrip()})
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


def timed(fn: Callable[[], object], loops: int) -> float:
    start = time.process_time()
    for _ in range(loops):
        fn()
    return (time.process_time() - start) / loops


def interleaved(
    rows: dict[str, Callable[[], object]], rounds: int = 9, loops: int = 40
) -> dict[str, list[float]]:
    """Every row timed once per round, rows in turn: slow spells hit all rows alike."""
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(rounds):
        for name, fn in rows.items():
            times[name].append(timed(fn, loops))
    return times


def main() -> None:
    raw = orjson.dumps(tool_heavy_request())
    request = orjson.loads(raw)
    full = orjson.loads(raw)
    system = full["messages"][0]
    system["content"] = [{"type": "text", "text": system["content"]}]
    raw_full = orjson.dumps(full)

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

    def turngate_full() -> object:
        seq = ADAPTER.parse_request(orjson.loads(raw_full))
        assert validate(seq, CAPABILITIES).ready
        return orjson.dumps(ADAPTER.render_request(seq))

    def baseline_full() -> object:
        return orjson.dumps(orjson.loads(raw_full))

    others = {api: _other_api_rows(api, ADAPTER.parse_request(request)) for api in OTHER_APIS}
    assert orjson.loads(turngate()) == request
    assert orjson.loads(turngate_full()) == full
    assert ADAPTER.parse_request(request).outline is not None
    assert ADAPTER.parse_request(full).outline is None
    seq = ADAPTER.parse_request(request)
    times = interleaved(
        {
            "orjson loads+dumps": baseline,
            "parse+validate+render": turngate,
            "  ... + sequence digest": turngate_with_digest,
            "  parse": lambda: ADAPTER.parse_request(request),
            "  validate": lambda: validate(seq, CAPABILITIES),
            "  render": lambda: ADAPTER.render_request(seq),
            "  sequence digest": lambda: ADAPTER.parse_request(request).sequence_digest,
            "orjson, parts request": baseline_full,
            "parts: parse+validate+render": turngate_full,
            **{row: fn for rows in others.values() for row, fn in rows.items()},
        }
    )
    best = {name: min(values) for name, values in times.items()}
    # The digest row re-parses; show what the digest itself adds.
    best["  sequence digest"] -= best["  parse"]
    base = best["orjson loads+dumps"]
    full_ratio = best["parts: parse+validate+render"] / best["orjson, parts request"]
    print(f"request: {len(request['messages'])} messages, {len(raw) / 1000:.0f} KB")
    for name, seconds in best.items():
        note = ""
        if name in ("parse+validate+render", "  ... + sequence digest"):
            note = f"ratio {seconds / base:4.2f}x"
        if name == "parse+validate+render":
            note += " (target <= 4x)"
        if name == "parts: parse+validate+render":
            note = f"ratio {full_ratio:4.2f}x"
        if name.endswith(": parse+validate+render") and name.split(":")[0] in OTHER_APIS:
            api = name.split(":")[0]
            note = f"ratio {seconds / best[f'orjson, {api} request']:4.2f}x"
        print(f"{name:<42}{seconds * 1e6:8.0f} us   {note}")
    noise = {
        name: statistics.median(values) / min(values) - 1
        for name, values in times.items()
        if not name.startswith("  ")
    }
    print(
        "noise (median over best, CPU time): "
        + ", ".join(f"{name} +{share:.0%}" for name, share in noise.items())
    )


OTHER_APIS = ("openai_responses", "anthropic", "gemini")


def _other_api_rows(api: str, chat_graph: Any) -> dict[str, Callable[[], object]]:
    """The Chat conversation in ``api``'s form: its orjson baseline and turngate's path."""
    adapter: Adapter = get_adapter(api)
    raw = orjson.dumps(adapter.render_request(chat_graph))

    def baseline() -> object:
        return orjson.dumps(orjson.loads(raw))

    def turngate() -> object:
        seq = adapter.parse_request(orjson.loads(raw))
        assert validate(seq, adapter.capabilities).ready, api
        return orjson.dumps(adapter.render_request(seq))

    assert orjson.loads(turngate()) == orjson.loads(raw)
    return {f"orjson, {api} request": baseline, f"{api}: parse+validate+render": turngate}


if __name__ == "__main__":
    main()
