"""decode_json: what a body must be to be read, and which rule refuses it.

The repeated-key check (jiter's, over the bytes) is held to a plain parse with the standard
library on the spellings a byte-level check could get wrong (escaped quotes, spaced keys,
keys ending in an escaped backslash, CR LF whitespace), and by a property.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turngate.errors import BadRequestBody
from turngate.proxy.body import (
    MAX_JSON_CONTAINERS,
    MAX_JSON_DEPTH,
    _decode_carefully,
    decode_json,
)


def refusal(raw: bytes) -> str | None:
    try:
        decode_json(raw)
    except BadRequestBody as exc:
        return exc.rule
    return None


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(rb'{"a":"x\":y","b":1}', id="escaped-quote-then-colon-in-a-value"),
        pytest.param(rb'{"a":"\"a\":1,\"a\":2"}', id="a-repeated-key-inside-a-string"),
        pytest.param(rb'{"a" :1,"b"  :2}', id="spaced-keys"),
        pytest.param(b'{\r\n  "a"\r\n  :\r\n  1,\r\n  "b"\t:\t2\r\n}', id="crlf-and-tab"),
        pytest.param(rb'{"a\\":1,"b\\":2}', id="keys-ending-in-an-escaped-backslash"),
        pytest.param(rb'{"a\\\\":1,"a\\":2}', id="two-escaped-backslashes-is-another-key"),
        pytest.param(rb'{"a":"x\\\":y","b":"\\\\\":"}', id="odd-backslash-runs-in-values"),
        pytest.param(rb'{"a":":","b":": "}', id="values-opening-with-a-colon"),
        pytest.param(rb'{"a":"x\" :y","b":"\"  :"}', id="escaped-quote-space-colon-in-values"),
        pytest.param(rb'{"a":{"a":{"a":1}},"b":[{"a":1},{"a":2}]}', id="same-key-other-objects"),
        pytest.param(b'{"":1,"a":{"":2}}', id="empty-keys-in-two-objects"),
    ],
)
def test_bodies_without_a_repeated_key_are_read(raw: bytes) -> None:
    assert decode_json(raw) == json.loads(raw)


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        pytest.param(rb'{"a":1,"a":2}', "a", id="plain"),
        pytest.param(rb'{"a" :1,"a" : 2}', "a", id="spaced"),
        pytest.param(rb'{"a":1,"a"  :2}', "a", id="one-spaced"),
        pytest.param(b'{\r\n"a"\r\n:1,\r\n"a"\r\n:2}', "a", id="crlf"),
        pytest.param(rb'{"a\\":1,"a\\":2}', "a\\", id="ending-in-an-escaped-backslash"),
        pytest.param(rb'{"q\"":1,"q\"":2}', 'q"', id="ending-in-an-escaped-quote"),
        pytest.param(rb'{"a":"x\":y","a":"\":"}', "a", id="escaped-quote-colon-values"),
        pytest.param(rb'{"m":[{"k":1,"k":2}]}', "k", id="nested"),
        pytest.param(b'{"":1,"":2}', "", id="empty-key"),
    ],
)
def test_a_repeated_key_is_refused_and_named(raw: bytes, key: str) -> None:
    with pytest.raises(BadRequestBody) as refused:
        decode_json(raw)
    assert refused.value.rule == "duplicate_json_key"
    assert repr(key) in str(refused.value)


def nested(depth: int, inner: Any = None) -> Any:
    value: Any = {} if inner is None else inner
    for _ in range(depth - 1):
        value = {"x": value}
    return value


def test_depth_is_counted_from_the_top_object() -> None:
    assert refusal(orjson.dumps(nested(MAX_JSON_DEPTH))) is None
    assert refusal(orjson.dumps(nested(MAX_JSON_DEPTH + 1))) == "json_too_deep"
    # Arrays count as levels too.
    assert refusal(orjson.dumps({"x": nested(MAX_JSON_DEPTH - 2, [[]])})) is None
    assert refusal(orjson.dumps({"x": nested(MAX_JSON_DEPTH - 1, [[]])})) == "json_too_deep"


def test_too_many_containers_is_413_even_when_also_too_deep() -> None:
    many = [[] for _ in range(MAX_JSON_CONTAINERS)]
    assert refusal(orjson.dumps({"many": many})) == "request_too_large"
    # The containers sit below the depth limit, where the walk stops.
    assert refusal(orjson.dumps(nested(MAX_JSON_DEPTH + 2, {"many": many}))) == "request_too_large"
    assert refusal(orjson.dumps({"few": many[:1000]})) is None


@pytest.mark.parametrize(
    ("raw", "rule"),
    [
        (b"", "invalid_json"),
        (b"  \r\n", "invalid_json"),
        (b"[1]", "invalid_json"),
        (b'{"a":1', "invalid_json"),
        (b'{"a":"caf\xc3"}', "invalid_utf8"),
        (b"[" * 2000 + b"]" * 2000, "json_too_deep"),
    ],
)
def test_what_is_not_one_json_object(raw: bytes, rule: str) -> None:
    assert refusal(raw) == rule


# Keys and values made of the characters a byte-level key check must get right.
_tricky = st.text(alphabet='ab":\\ \r\n', max_size=6)
_spacing = st.sampled_from(["", " ", "\r\n", "\t ", "  \n"])


@st.composite
def objects(draw: st.DrawFn, depth: int = 0) -> str:
    members = []
    for _ in range(draw(st.integers(0, 4))):
        key = json.dumps(draw(_tricky))
        if depth < 2 and draw(st.booleans()):
            value = draw(objects(depth + 1))
        else:
            value = json.dumps(draw(_tricky))
        members.append(f"{key}{draw(_spacing)}:{draw(_spacing)}{value}")
    return "{" + ",".join(members) + "}"


def repeats_a_key(raw: bytes) -> bool:
    repeated = False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal repeated
        repeated |= len({key for key, _ in items}) < len(items)
        return dict(items)

    json.loads(raw, object_pairs_hook=pairs)
    return repeated


@settings(max_examples=400, deadline=None)
@given(objects())
def test_the_repeated_key_check_agrees_with_a_plain_parse(text: str) -> None:
    raw = text.encode()
    expected = "duplicate_json_key" if repeats_a_key(raw) else None
    assert refusal(raw) == expected


def outcome(read: Callable[[bytes], dict[str, Any]], raw: bytes) -> tuple[str, str]:
    try:
        return ("value", repr(read(raw)))
    except BadRequestBody as exc:
        return (exc.rule, str(exc))


_scalars = (
    st.none()
    | st.booleans()
    # Past 64 bits and past a double's range: where jiter and orjson read numbers otherwise.
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
_json_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=20,
)


@st.composite
def edited_bodies(draw: st.DrawFn) -> bytes:
    """A JSON object as a client may write it, maybe with one edit that may break it: a
    byte dropped, replaced or inserted, a member repeated, a number made huge."""
    body = draw(st.dictionaries(st.text(max_size=4), _json_values, min_size=1, max_size=4))
    raw = json.dumps(body, indent=draw(st.sampled_from([None, 1]))).encode()
    edit = draw(st.sampled_from(["none", "drop", "replace", "insert", "repeat", "huge"]))
    at = draw(st.integers(0, len(raw) - 1))
    byte = bytes([draw(st.sampled_from(b'{}[]",:0-e.\\\xff\xc3 9nul'))])
    if edit == "drop":
        raw = raw[:at] + raw[at + 1 :]
    elif edit == "replace":
        raw = raw[:at] + byte + raw[at + 1 :]
    elif edit == "insert":
        raw = raw[:at] + byte + raw[at:]
    elif edit == "repeat":
        first = next(iter(body))
        raw = raw[:-1] + b"," + json.dumps(first).encode() + b":1}"
    elif edit == "huge":
        raw = raw[:-1] + b',"n":' + draw(st.sampled_from([b"1e400", b"-1e999", b"9" * 30])) + b"}"
    return raw


@settings(max_examples=1000, deadline=None)
@given(edited_bodies())
def test_the_one_parse_reads_every_body_as_orjson_then_jiter_would(raw: bytes) -> None:
    # decode_json parses once (jiter); _decode_carefully is orjson's parse, the depth walk,
    # then jiter's key check: the same value, or the same refusal in the same words.
    assert outcome(decode_json, raw) == outcome(_decode_carefully, raw)


@pytest.mark.parametrize(
    "raw",
    [b'{"n":18446744073709551616}', b'{"n":-9223372036854775809}', b'{"a":[{"n":1e400}]}'],
)
def test_numbers_orjson_reads_as_floats_or_refuses_are_read_its_way(raw: bytes) -> None:
    assert outcome(decode_json, raw) == outcome(_decode_carefully, raw)
    assert outcome(decode_json, raw)[0] in ("value", "invalid_json")
    if outcome(decode_json, raw)[0] == "value":
        assert type(decode_json(raw)["n"]) is float
