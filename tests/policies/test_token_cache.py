"""The token-count cache gives the counts a fresh count gives, whatever it already holds."""

from __future__ import annotations

import copy
import tracemalloc
from typing import Any

from turngate.policies.config import BUILTIN_POLICY
from turngate.policies.tokens import TokenCache, count_request, count_texts

TURN_ONE = ["role", "user", "content", "Summarise the report.", "role", "user", "content", "ok"]
TURN_TWO = [*TURN_ONE, "role", "assistant", "content", "Revenue is flat.", "Revenue is flat."]


def fresh(texts: list[str]) -> int:
    return sum(count_texts(texts, "o200k_base"))


def test_a_cold_warm_and_partly_warm_cache_count_as_a_fresh_count() -> None:
    cache = TokenCache()
    assert cache.total(TURN_ONE, "o200k_base") == fresh(TURN_ONE)  # cold, repeats inside
    assert cache.total(TURN_ONE, "o200k_base") == fresh(TURN_ONE)  # all found
    assert cache.total(TURN_TWO, "o200k_base") == fresh(TURN_TWO)  # new strings, repeated
    assert cache.total([], "o200k_base") == 0


def test_encodings_are_kept_apart() -> None:
    cache = TokenCache()
    text = ["naïve café ☕ " * 20]
    assert cache.total(text, "o200k_base") == fresh(text)
    assert cache.total(text, "cl100k_base") == sum(count_texts(text, "cl100k_base"))


def test_eviction_and_oversized_strings_keep_the_counts_exact() -> None:
    cache = TokenCache(max_chars=30, max_string=20)
    long = "a much longer string than the cache keeps"
    texts = ["first text", "second text", long, "third text here"]
    assert cache.total(texts, "o200k_base") == fresh(texts)
    assert cache.chars <= 30
    assert cache.total(texts, "o200k_base") == fresh(texts)


def test_a_body_counts_the_same_whatever_its_items_cache_holds() -> None:
    entry = BUILTIN_POLICY.model_entry("gpt-4o")
    assert entry is not None
    media = BUILTIN_POLICY.media
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 2000}}
    turn_one: dict[str, Any] = {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]},
        ],
        "tools": [{"type": "function", "function": {"name": "look", "parameters": {}}}],
        "stop": ["\n\n"],
    }
    cache = TokenCache()
    for body in (
        turn_one,
        turn_one,  # every item seen before
        {**turn_one, "messages": [*turn_one["messages"], {"role": "assistant", "content": "A"}]},
        # The same items under another array's name: kept apart (a Gemini media key counts).
        {"model": "gpt-4o", "history": turn_one["messages"]},
        # One item changed: a miss, never the old count.
        {**turn_one, "messages": [{"role": "system", "content": "Be very brief."}]},
    ):
        expected = count_request(copy.deepcopy(body), entry, media)
        assert count_request(copy.deepcopy(body), entry, media, cache) == expected
    # Other media estimates (a policy reload) count the same items anew.
    dearer = media.model_copy(update={"image_tokens": media.image_tokens + 1000})
    expected = count_request(copy.deepcopy(turn_one), entry, dearer)
    assert count_request(copy.deepcopy(turn_one), entry, dearer, cache) == expected
    assert expected.media == count_request(turn_one, entry, media).media + 1000


def test_the_items_cache_is_bounded() -> None:
    entry = BUILTIN_POLICY.model_entry("gpt-4o")
    assert entry is not None
    cache = TokenCache(max_chars=400)
    for n in range(50):
        body = {"messages": [{"role": "user", "content": f"message number {n}"}]}
        assert count_request(body, entry, BUILTIN_POLICY.media, cache) == count_request(
            body, entry, BUILTIN_POLICY.media
        )
    assert cache.item_chars <= 400


def test_the_memory_a_full_cache_holds_is_near_what_it_counts() -> None:
    """Its bound counts the bytes of each item's JSON; orjson's results carry a buffer of 4 KB
    and more behind them, which the cache held too (199 MB for a full default cache whose
    items and strings count 32 MB). What it keeps must be about what it counts."""
    entry = BUILTIN_POLICY.model_entry("gpt-4o")
    assert entry is not None
    cache = TokenCache(max_chars=300_000)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(3_000):
            text = f"message {n}: " + "lorem ipsum " * (n % 7 + 1)
            body = {"messages": [{"role": "user", "content": text}]}
            count_request(body, entry, BUILTIN_POLICY.media, cache)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    counted = cache.item_chars + cache.chars
    assert cache.item_chars > 250_000  # full: the oldest items were dropped
    # Per-entry overhead (tuple, dict slot, bytes header) on top of the counted bytes.
    assert held < 3 * counted, (held, counted)
