"""What the policy engine adds per request, in process, on the 150 KB Chat body of the proxy
bench (bench.proxy_latency): trust labels, context admission of the final bytes (cold, and
with the token-count cache a conversation's next turn finds warm), and a shadow record.

    .venv/bin/python -m bench policy

Best of 7 rounds; each request is decoded from bytes anew, as the proxy does, so no string
object is shared between rounds (the cache is keyed by content, not identity).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson

from bench.proxy_latency import body_of
from turngate.adapters import get_adapter
from turngate.graph.validator import validate
from turngate.policies.admission import admit
from turngate.policies.config import BUILTIN_POLICY
from turngate.policies.diff import shadow_record
from turngate.policies.tokens import TokenCache
from turngate.policies.trust import check


def best_of(step: Callable[[], object], rounds: int = 7, loops: int = 20) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(loops):
            step()
        best = min(best, (time.perf_counter() - started) / loops)
    return best * 1e6


def next_turn(request: dict[str, Any]) -> bytes:
    """The same conversation one turn later: its history plus a new question."""
    grown = dict(request)
    grown["messages"] = [
        *request["messages"],
        {"role": "user", "content": "And what changed since yesterday, by region?"},
    ]
    return orjson.dumps(grown)


def main() -> None:
    raw = body_of(150_000)
    request = orjson.loads(raw)
    adapter = get_adapter("openai_chat")
    config, policy = BUILTIN_POLICY, BUILTIN_POLICY.defaults
    seq = adapter.parse_request(request)
    rendered = adapter.render_request(seq)
    cache = TokenCache()

    def admission(body: bytes, tokens: TokenCache | None) -> object:
        return admit(
            orjson.loads(body),
            api="openai_chat",
            model="gpt-4o",
            max_output_tokens=None,
            config=config,
            policy=policy,
            cache=tokens,
        )

    admission(raw, cache)  # the conversation's earlier turn warmed the cache
    later = next_turn(request)
    decode = best_of(lambda: orjson.loads(raw))
    steps = {
        "parse into the graph": best_of(lambda: adapter.parse_request(request)),
        "validate (no policy)": best_of(lambda: validate(seq, adapter.capabilities)),
        "trust labels + validate": best_of(
            lambda: check(seq, adapter.capabilities, policy.trust, policy.role_forgery)
        ),
        "render + compare": best_of(lambda: adapter.render_request(seq) == request),
        "admission, no cache": best_of(lambda: admission(raw, None)) - decode,
        "admission, next turn, cache warm": best_of(lambda: admission(later, cache)) - decode,
        "shadow record (diff of the rendering)": best_of(
            lambda: shadow_record(
                api="openai_chat",
                model="gpt-4o",
                raw=raw,
                body=request,
                rendered=rendered,
                verdict=None,
                policy=policy.shadow,
            )
        ),
    }
    print(f"body {len(raw) / 1000:.0f} KB, {len(request['messages'])} messages (microseconds)")
    for name, micros in steps.items():
        print(f"  {name:40} {micros:8.0f}")


if __name__ == "__main__":
    main()
