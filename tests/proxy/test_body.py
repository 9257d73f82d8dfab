"""decode_json: what a body must be to be read, and which rule refuses it.

The repeated-key check (jiter's, over the bytes) is held to a plain parse with the standard
library on the spellings a byte-level check could get wrong (escaped quotes, spaced keys,
keys ending in an escaped backslash, CR LF whitespace), and by a property.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turngate.errors import BadRequestBody
from turngate.proxy.body import MAX_JSON_CONTAINERS, MAX_JSON_DEPTH, decode_json


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
