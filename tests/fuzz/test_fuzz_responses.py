"""Response parsers under fuzzing: a mutated response body (or a stream chunk where a
body was expected) gives an assistant turn or a typed turngate error, never a crash."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fixtures_dir import COUNTS
from tests.fuzz import caught, drive_response
from tests.fuzz.strategies import FUZZ, response_bodies
from turngate.adapters import API_NAMES
from turngate.graph.model import ApiName


@pytest.mark.parametrize("api", API_NAMES)
@FUZZ
@given(data=st.data())
def test_response_parser_raises_only_typed_errors(api: ApiName, data: st.DataObject) -> None:
    body: Any = data.draw(response_bodies(api), label="body")
    outcome = caught(lambda: drive_response(api, body))
    COUNTS["fuzz response examples"] += 1
    COUNTS[f"fuzz response outcome {outcome.split(':')[0]}"] += 1
