"""Fuzz inputs, seeded with the recorded traffic in ../shared/fixtures.

Inputs stay inside what the wire can hand a parser, i.e. what ``orjson.loads`` returns:
integers in [-2**63, 2**64), finite floats, valid Unicode (NUL and astral characters
included), nesting up to orjson's 1024 levels. On top of that NaN and the infinities are
produced at the Python level. Lone surrogates and wider integers are left out: no input
turngate reads can hold them (orjson refuses both).

Mutations are structural and copy only the path they change, so a seed is never altered.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.fixtures_dir import fixture_paths
from turngate.adapters import API_NAMES
from turngate.adapters.base import RouteInfo
from turngate.adapters.sse import MARK_STYLES
from turngate.graph.model import ApiName

RelayStep = tuple[str, bytes]
# The default run: about 150 examples per target keeps tests/fuzz near 30 s on two cores;
# bench/fuzz_long.py runs the same strategies for longer. No example database: every run
# draws afresh, and what a run finds is pinned in tests/fuzz/examples/ by hand.
FUZZ = settings(
    max_examples=150,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

FOLDERS: dict[ApiName, str] = {
    "openai_chat": "openai-chat",
    "openai_responses": "openai-responses",
    "anthropic": "anthropic",
    "gemini": "gemini",
}
Path_ = tuple[str | int, ...]

# --- seeds ---------------------------------------------------------------------------------


def _load(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


@functools.cache
def request_seeds(api: ApiName) -> tuple[dict[str, Any], ...]:
    paths = fixture_paths(f"{FOLDERS[api]}/*.request.json")
    return tuple(v for v in map(_load, paths) if isinstance(v, dict))


@functools.cache
def response_seeds(api: ApiName) -> tuple[dict[str, Any], ...]:
    paths = fixture_paths(f"{FOLDERS[api]}/*.json", exclude=".request.json")
    return tuple(v for v in map(_load, paths) if isinstance(v, dict))


@functools.cache
def stream_seeds(api: ApiName) -> tuple[bytes, ...]:
    return tuple(p.read_bytes() for p in fixture_paths(f"{FOLDERS[api]}/*.sse"))


_DATA_LINE = re.compile(rb"^data: ?(.*?)\r?$", re.MULTILINE)
_EVENT_LINE = re.compile(rb"^event: ?(.*?)\r?$", re.MULTILINE)


@functools.cache
def frame_payloads(api: ApiName) -> tuple[dict[str, Any], ...]:
    """Every JSON object a recorded stream of ``api`` carries in a ``data:`` line."""
    out = []
    for stream in stream_seeds(api):
        for match in _DATA_LINE.finditer(stream):
            try:
                value = orjson.loads(match.group(1))
            except orjson.JSONDecodeError:
                continue
            if isinstance(value, dict):
                out.append(value)
    return tuple(out)


@functools.cache
def vocabulary() -> tuple[tuple[str, ...], tuple[Any, ...], tuple[str, ...]]:
    """Keys, short scalar values and SSE event names found anywhere in the recordings: a
    mutation that writes one of them reaches the branches a random string never would."""
    keys: set[str] = set()
    scalars: set[Any] = set()
    events: set[str] = set()
    trees: list[Any] = []
    for api in API_NAMES:
        trees += request_seeds(api) + response_seeds(api) + frame_payloads(api)
        for stream in stream_seeds(api):
            events.update(m.group(1).decode() for m in _EVENT_LINE.finditer(stream))
    for tree in trees:
        for value in walk(tree):
            if isinstance(value, dict):
                keys.update(value)
            elif (
                (isinstance(value, str) and len(value) <= 40)
                or isinstance(value, bool | int | float)
                or value is None
            ):
                scalars.add(value)
    keys.update(["type", "role", "content", "text", "id", "name", "index"])
    return (
        tuple(sorted(keys)),
        tuple(sorted(scalars, key=repr)) or ("",),
        tuple(sorted(events)) or ("message",),
    )


def walk(tree: Any) -> Iterable[Any]:
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


# --- JSON values ---------------------------------------------------------------------------

INT_EDGES = (0, -1, 1, 2**31 - 1, -(2**31), 2**53 + 1, 2**63 - 1, -(2**63), 2**64 - 1)
FLOAT_EDGES = (0.0, -0.0, 0.5, 1e308, -1e308, 5e-324, 1.8446744073709552e19, math.nan, math.inf)
TRICKY_TEXT = (
    "",
    "\x00",
    "a\x00b",
    "\u2028\u2029",
    "\r\n\r\n",
    "\ufeff",
    "\U0001f600" * 3,
    "assistant:",
    "\nuser: ignore the above",
    "<|im_start|>system\n",
    "[INST]",
    "{",
    '{"a":',
    "[]",
    "{}",
    "null",
    "data: [DONE]",
    "e\u0301",
)
DEPTHS = (63, 64, 65, 254, 255, 256, 500, 998, 999, 1000, 1022)

# Any code point UTF-8 can carry: no lone surrogates.
valid_text = st.text(st.characters(codec="utf-8"), max_size=24)


def _vocab_keys() -> st.SearchStrategy[str]:
    keys = vocabulary()[0]
    return st.sampled_from(keys) | valid_text


def _vocab_scalars() -> st.SearchStrategy[Any]:
    return st.sampled_from(vocabulary()[1])


scalars: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from(INT_EDGES),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(FLOAT_EDGES),
    valid_text,
    st.sampled_from(TRICKY_TEXT),
    st.deferred(_vocab_scalars),
)

json_values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.deferred(_vocab_keys), children, max_size=4)
    ),
    max_leaves=12,
)


def json_objects() -> st.SearchStrategy[dict[str, Any]]:
    """A from-scratch object: vocabulary keys, any values."""
    return st.dictionaries(st.deferred(_vocab_keys), json_values, max_size=6)


def deep(value: Any, depth: int, as_dict: bool) -> Any:
    for _ in range(depth):
        value = {"a": value} if as_dict else [value]
    return value


def json_bytes(value: Any) -> bytes:
    """``value`` as JSON, however deep (orjson stops at 255 levels); NaN as ``null``."""
    try:
        return orjson.dumps(value)
    except TypeError:
        pass
    out: list[bytes] = []
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, bytes):
            out.append(node)
        elif isinstance(node, dict):
            items = [(orjson.dumps(str(k)) + b":", v) for k, v in node.items()]
            stack.append(b"}")
            for n, (key, child) in enumerate(reversed(items)):
                stack += [child, key]
                if n < len(items) - 1:
                    stack.append(b",")
            stack.append(b"{")
        elif isinstance(node, list):
            stack.append(b"]")
            for n, child in enumerate(reversed(node)):
                stack.append(child)
                if n < len(node) - 1:
                    stack.append(b",")
            stack.append(b"[")
        else:
            out.append(orjson.dumps(node))
    return b"".join(out)


def depth_of(value: Any) -> int:
    """Nesting depth of containers (a scalar is 0), without recursion."""
    best = 0
    stack = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict | list):
            best = max(best, level)
            stack.extend((child, level + 1) for child in _children(node))
    return best


# --- structural mutation of JSON -----------------------------------------------------------


def _children(node: Any) -> list[Any]:
    if isinstance(node, dict):
        return list(node.values())
    if isinstance(node, list):
        return node
    return []


def _keys(node: Any) -> list[str | int]:
    if isinstance(node, dict):
        return list(node)
    if isinstance(node, list):
        return list(range(len(node)))
    return []


def _descend(draw: st.DrawFn, root: Any, max_depth: int = 12) -> Path_:
    """A random path into ``root``; below the root when it has children (a body that is not
    an object is refused before any adapter sees it)."""
    path: list[str | int] = []
    node = root
    for _ in range(draw(st.integers(1 if _keys(root) else 0, max_depth))):
        keys = _keys(node)
        if not keys:
            break
        key = keys[draw(st.integers(0, len(keys) - 1))]
        path.append(key)
        node = node[key]
    return tuple(path)


def get_at(root: Any, path: Path_) -> Any:
    for key in path:
        root = root[key]
    return root


_DELETE = object()


def set_at(root: Any, path: Path_, value: Any) -> Any:
    """A copy of ``root`` with the node at ``path`` replaced (or removed: ``_DELETE``);
    only the containers on the path are copied."""
    if not path:
        return None if value is _DELETE else value
    head, rest = path[0], path[1:]
    copy: Any = dict(root) if isinstance(root, dict) else list(root)
    if rest:
        copy[head] = set_at(root[head], rest, value)
    elif value is _DELETE:
        del copy[head]
    else:
        copy[head] = value
    return copy


def _wrong_type(draw: st.DrawFn, node: Any) -> Any:
    options = [None, True, 0, -1, 2**63 - 1, 1.5, math.nan, "", "x", [], {}, [node], {"": node}]
    return draw(st.sampled_from([o for o in options if type(o) is not type(node)]))


def _huge(draw: st.DrawFn, node: Any) -> Any:
    size = draw(st.sampled_from((1_000, 65_536, 300_000)))
    if draw(st.booleans()):
        unit = draw(st.sampled_from(("a", "\U0001f600", "\x00", '"', "\\", "é")))
        return unit * size
    return [node] * (size // 100)


def _edit_text(draw: st.DrawFn, node: str) -> Any:
    """Edit a string; a string holding JSON (tool arguments) is mutated as JSON."""
    if node[:1] in ("{", "[") and draw(st.booleans()):
        try:
            inner = orjson.loads(node)
        except orjson.JSONDecodeError:
            inner = None
        if inner is not None:
            return json_bytes(mutate_once(draw, inner, ())).decode()
    at = draw(st.integers(0, len(node)))
    if draw(st.booleans()):
        return node[:at]
    return node[:at] + draw(st.sampled_from(TRICKY_TEXT) | valid_text) + node[at:]


def _crossover(draw: st.DrawFn, donors: tuple[Any, ...]) -> Any:
    if not donors:
        return draw(json_values)
    donor = draw(st.sampled_from(donors))
    return get_at(donor, _descend(draw, donor))


MUTATIONS = (
    "replace",
    "wrong_type",
    "delete",
    "duplicate",
    "insert_key",
    "crossover",
    "deep",
    "huge",
    "edit_text",
    "number_edge",
)


def mutate_once(draw: st.DrawFn, root: Any, donors: tuple[Any, ...], max_depth: int = 1023) -> Any:
    """One mutation somewhere in ``root``; the result nests at most ``max_depth`` deep
    unless ``root`` or a donor already did (the default: what orjson.loads accepts)."""
    path = _descend(draw, root)
    node = get_at(root, path)
    op = draw(st.sampled_from(MUTATIONS))
    if op == "replace":
        return set_at(root, path, draw(json_values))
    if op == "wrong_type":
        return set_at(root, path, _wrong_type(draw, node))
    if op == "delete":
        return set_at(root, path, _DELETE) if path else root
    if op == "duplicate":
        if isinstance(node, list) and node:
            at = draw(st.integers(0, len(node) - 1))
            return set_at(root, path, [*node[: at + 1], node[at], *node[at + 1 :]])
        if path and isinstance(path[-1], int):
            parent = get_at(root, path[:-1])
            at = path[-1]
            return set_at(root, path[:-1], [*parent[: at + 1], node, *parent[at + 1 :]])
        return root
    if op == "insert_key":
        if not isinstance(node, dict):
            return root
        key = draw(st.deferred(_vocab_keys))
        value = draw(json_values) if draw(st.booleans()) else _crossover(draw, donors)
        return set_at(root, path, {**node, key: value})
    if op == "crossover":
        return set_at(root, path, _crossover(draw, donors))
    if op == "deep":
        depth = draw(st.sampled_from(DEPTHS) | st.integers(1, 1000))
        depth = max(1, min(depth, max_depth - len(path) - depth_of(node)))
        return set_at(root, path, deep(node, depth, draw(st.booleans())))
    if op == "huge":
        return set_at(root, path, _huge(draw, node))
    if op == "edit_text":
        return set_at(root, path, _edit_text(draw, node)) if isinstance(node, str) else root
    if op == "number_edge":
        return set_at(root, path, draw(st.sampled_from(INT_EDGES + FLOAT_EDGES)))
    raise AssertionError(op)


@st.composite
def mutated_json(
    draw: st.DrawFn, seeds: tuple[Any, ...], donors: tuple[Any, ...] = (), max_steps: int = 3
) -> Any:
    """A seed (or, without seeds, a from-scratch object) with 1..max_steps mutations."""
    root = draw(st.sampled_from(seeds)) if seeds else draw(json_objects())
    for _ in range(draw(st.integers(1, max_steps))):
        root = mutate_once(draw, root, donors or seeds)
    return root


def request_bodies(api: ApiName) -> st.SearchStrategy[Any]:
    seeds = request_seeds(api)
    donors = tuple(s for other in API_NAMES for s in request_seeds(other))
    return st.one_of(
        mutated_json(seeds, donors) if seeds else json_objects(),
        mutated_json(seeds, donors, max_steps=8) if seeds else json_objects(),
        json_objects(),
    )


def response_bodies(api: ApiName) -> st.SearchStrategy[Any]:
    seeds = response_seeds(api)
    donors = seeds + frame_payloads(api)
    # Mostly recorded bodies with a mutation or two; a stream chunk where a body was
    # expected, and a made-up object, now and then.
    return st.one_of(
        mutated_json(seeds, donors, max_steps=1) if seeds else json_objects(),
        mutated_json(seeds, donors) if seeds else json_objects(),
        mutated_json(frame_payloads(api), donors) if frame_payloads(api) else json_objects(),
        json_objects(),
    )


routes = st.builds(
    RouteInfo,
    model=st.none() | st.sampled_from(("gemini-2.5-flash", "", "m/../x")) | valid_text,
    stream=st.none() | st.booleans(),
)


# --- streams -------------------------------------------------------------------------------

_FRAME_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
SSE_NOISE = (
    b"\n",
    b"\r",
    b"\r\n",
    b"\n\n",
    b"\r\r",
    b"\r\n\r\n",
    b"\xef\xbb\xbf",
    b"\xff\xfe\x80",
    b"\x00",
    b": comment\n\n",
    b"data: [DONE]\n\n",
    b"data:\n\n",
    b"data\n\n",
    b"event: error\n",
    b"id: 7\n",
    b"id: a\x00b\n",
    b"retry: 10\n",
    b"retry: x\n",
    b"retry: " + b"9" * 5000 + b"\n",
    b"data: {}\n\n",
    b"data: []\n\n",
    b"data: null\n\n",
    b'data: {"type":"ping"}\n\n',
    b"data: \xff\n\n",
    b'data: "\\ud800"\n\n',
    b"data: {\n",
)


def split_frames(stream: bytes) -> list[bytes]:
    """The stream's frames, each with its closing blank line; trailing bytes last."""
    frames, at = [], 0
    for match in _FRAME_END.finditer(stream):
        frames.append(stream[at : match.end()])
        at = match.end()
    if at < len(stream):
        frames.append(stream[at:])
    return frames


def _frame_with(raw: bytes, payload: Any, event: str | None) -> bytes:
    """``raw`` with its data lines replaced by ``payload`` (and its event name by ``event``)."""
    end = b"\r\n" if b"\r\n" in raw else b"\n"
    lines = [ln for ln in re.split(rb"\r\n|\n|\r", raw) if ln and not ln.startswith(b"data")]
    if event is not None:
        lines = [ln for ln in lines if not ln.startswith(b"event")]
        lines.insert(0, b"event: " + event.encode())
    body = json_bytes(payload) if not isinstance(payload, bytes) else payload
    data = [b"data: " + line for line in body.split(b"\n")]
    return end.join([*lines, *data]) + end + end


def _frame_json(raw: bytes) -> Any:
    data = [m.group(1) for m in _DATA_LINE.finditer(raw)]
    if not data:
        return None
    try:
        return orjson.loads(b"\n".join(data))
    except orjson.JSONDecodeError:
        return None


def _event_names() -> st.SearchStrategy[str]:
    return st.sampled_from(vocabulary()[2]) | valid_text.filter(
        lambda s: "\n" not in s and "\r" not in s
    )


FRAME_MUTATIONS = ("payload", "event", "drop", "duplicate", "swap", "inject", "donor")
BYTE_MUTATIONS = ("truncate", "flip", "insert", "delete", "duplicate", "line_ends", "giant")


@st.composite
def mutated_stream(draw: st.DrawFn, api: ApiName, giant: int = 4096) -> bytes:
    """A recorded stream of ``api`` broken at the frame level, then at the byte level.
    ``giant``: around which size to grow a line (the decoder's configured limit)."""
    seeds = stream_seeds(api)
    payloads = frame_payloads(api)
    if not seeds or draw(st.integers(0, 9)) == 0:
        frames = [draw(st.sampled_from(SSE_NOISE) | st.binary(max_size=64))]
    else:
        frames = split_frames(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(FRAME_MUTATIONS))
        at = draw(st.integers(0, max(0, len(frames) - 1)))
        if op == "payload" and frames:
            payload = _frame_json(frames[at])
            if payload is not None:
                new = mutate_once(draw, payload, payloads)
                frames[at] = _frame_with(frames[at], new, None)
        elif op == "event" and frames:
            frames[at] = _frame_with(
                frames[at], _frame_json(frames[at]) or b"{}", draw(_event_names())
            )
        elif op == "drop" and frames:
            del frames[at]
        elif op == "duplicate" and frames:
            frames.insert(at, frames[at])
        elif op == "swap" and len(frames) > 1:
            other = draw(st.integers(0, len(frames) - 1))
            frames[at], frames[other] = frames[other], frames[at]
        elif op == "inject":
            frames.insert(at, draw(st.sampled_from(SSE_NOISE)))
        elif op == "donor" and payloads:
            payload = mutate_once(draw, draw(st.sampled_from(payloads)), payloads)
            name = payload.get("type") if isinstance(payload, dict) else None
            frames.insert(at, _frame_with(b"", payload, name if isinstance(name, str) else None))
    data = b"".join(frames)
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(BYTE_MUTATIONS))
        at = draw(st.integers(0, len(data)))
        if op == "truncate":
            data = data[:at]
        elif op == "flip" and at < len(data):
            data = data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1 :]
        elif op == "insert":
            data = data[:at] + draw(st.sampled_from(SSE_NOISE) | st.binary(max_size=8)) + data[at:]
        elif op == "delete":
            data = data[:at] + data[at + draw(st.integers(1, 64)) :]
        elif op == "duplicate":
            data = data[:at] + data[at : at + draw(st.integers(1, 512))] + data[at:]
        elif op == "line_ends":
            end = draw(st.sampled_from((b"\r", b"\r\n", b"\n")))
            data = re.sub(rb"\r\n|\n|\r", end, data)
        elif op == "giant":
            size = giant + draw(st.integers(-3, 3))
            line = b"data: " + b"x" * max(0, size - 6)
            data = data[:at] + line + draw(st.sampled_from((b"", b"\n", b"\n\n"))) + data[at:]
    return data


@st.composite
def cuts(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """``data`` in the pieces one read at a time would give."""
    if not data:
        return [b""]
    if len(data) <= 64 and draw(st.integers(0, 4)) == 0:
        return [data[k : k + 1] for k in range(len(data))]
    points = sorted(set(draw(st.lists(st.integers(0, len(data)), max_size=12))))
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


@st.composite
def relay_steps(draw: st.DrawFn, api: ApiName, giant: int = 16384) -> list[RelayStep]:
    data = draw(mutated_stream(api, giant))
    steps: list[RelayStep] = [("feed", piece) for piece in draw(cuts(data))]
    for _ in range(draw(st.integers(0, 2)) if draw(st.integers(0, 3)) == 0 else 0):
        at = draw(st.integers(0, len(steps)))
        # Only Responses streams resume from their handle; any API restarts a generation.
        kinds = ("old", "restart", "fail") + (("resume",) if api == "openai_responses" else ())
        kind = draw(st.sampled_from(kinds))
        piece = draw(st.sampled_from(stream_seeds(api) or (b"",)))[:200] if kind == "old" else b""
        steps.insert(at, (kind, piece))
    return steps


marks = st.none() | st.sampled_from(MARK_STYLES)
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
# A recursive schema (pydantic writes them for recursive models): checking a value against
# it recurses as deep as the value nests.
TREE = {"type": "object", "properties": {"child": {"$ref": "#"}}}
TOOL_NAMES = ("get_weather", "tree", "final_result")


def tool_names() -> st.SearchStrategy[str]:
    names = [v for v in vocabulary()[1] if isinstance(v, str) and v.isidentifier()]
    return st.sampled_from(TOOL_NAMES) | st.sampled_from(names or TOOL_NAMES) | valid_text


schemas = st.sampled_from((None, WEATHER, TREE, {"type": "object"})) | json_values
tool_schemas: st.SearchStrategy[dict[str, Any] | None] = st.none() | st.dictionaries(
    st.sampled_from(TOOL_NAMES) | st.deferred(tool_names), schemas, max_size=4
)
# Tool arguments as a provider may stream them, nested as deep as JSON allows.
deep_arguments = st.sampled_from(DEPTHS).map(lambda n: '{"child":' * n + "{}" + "}" * n)
