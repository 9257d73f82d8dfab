"""The token-count cache gives the counts a fresh count gives, whatever it already holds."""

from __future__ import annotations

from turngate.policies.tokens import TokenCache, count_texts

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
