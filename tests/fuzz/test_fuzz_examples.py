"""Every crash the fuzzers found, pinned: each file in tests/fuzz/examples/ is replayed
through its target and must give the outcome EXPECTED.json records for it.

A file is named ``<target>.<api>.<what>.<json|sse>``: ``request`` and ``response`` files
hold a body, ``relay`` files the bytes an upstream streamed (replayed whole, cut at every
frame end, and byte by byte when short: the outcome must not depend on how it was read).
EXPECTED.json gives, per file, the outcome, the root cause of the crash it once caused, and
the relay's options (tool schemas, limits) where they matter.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.fixtures_dir import COUNTS
from tests.fuzz import caught, drive_relay, drive_request, drive_response
from tests.fuzz.strategies import TREE
from turngate.adapters import API_NAMES
from turngate.adapters.base import RouteInfo
from turngate.graph.model import ApiName

EXAMPLES = Path(__file__).parent / "examples"
EXPECTED: dict[str, dict[str, Any]] = orjson.loads((EXAMPLES / "EXPECTED.json").read_bytes())
FILES = sorted(p for p in EXAMPLES.iterdir() if p.name != "EXPECTED.json")
# Schemas EXPECTED.json names instead of spelling them out.
SCHEMAS = {"TREE": TREE}
_FRAME_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


def test_every_example_has_an_expectation_and_every_expectation_a_file() -> None:
    assert sorted(EXPECTED) == [p.name for p in FILES]


def target_of(path: Path) -> tuple[str, ApiName]:
    target, api, _rest = path.name.split(".", 2)
    assert api in API_NAMES, path.name
    return target, api


def relay_options(name: str) -> dict[str, Any]:
    options = dict(EXPECTED[name].get("options", {}))
    if "tools" in options:
        options["tools"] = {tool: SCHEMAS[schema] for tool, schema in options["tools"].items()}
    return options


def readings(data: bytes) -> list[list[bytes]]:
    """The same bytes as one read, as one read per frame, and one byte per read."""
    ends = [m.end() for m in _FRAME_END.finditer(data)]
    by_frame = [data[a:b] for a, b in zip([0, *ends], [*ends, len(data)], strict=True)]
    out = [[data], [piece for piece in by_frame if piece]]
    if len(data) <= 4096:
        out.append([data[k : k + 1] for k in range(len(data))])
    return out


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_pinned_example_gives_its_expected_outcome(path: Path) -> None:
    target, api = target_of(path)
    expected = EXPECTED[path.name]["outcome"]
    data = path.read_bytes()
    if target == "relay":
        options = relay_options(path.name)
        # A relay never raises: every failure becomes the API's own error event.
        for pieces in readings(data):
            steps = [("feed", piece) for piece in pieces]
            assert drive_relay(api, steps, **options) == expected, f"{len(pieces)} reads"
    elif target == "request":
        body = orjson.loads(data)
        route = RouteInfo(model="m", stream=False)
        assert caught(lambda: drive_request(api, body, route)) == expected
    elif target == "response":
        body = orjson.loads(data)
        assert caught(lambda: drive_response(api, body)) == expected
    else:
        raise AssertionError(f"unknown target {target!r} in {path.name}")
    COUNTS["fuzz pinned examples replayed"] += 1
