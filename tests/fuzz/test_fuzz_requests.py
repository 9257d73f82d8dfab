"""Request parsers under fuzzing: a mutated or made-up body, parsed by its API's adapter,
validated, rendered back and to every other API, raises nothing but typed turngate errors."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fixtures_dir import COUNTS, FIXTURES_PRESENT
from tests.fuzz import caught, drive_request
from tests.fuzz.strategies import FUZZ, request_bodies, request_seeds, routes
from turngate.adapters import API_NAMES
from turngate.adapters.base import RouteInfo
from turngate.graph.model import ApiName


@pytest.mark.parametrize("api", API_NAMES)
@FUZZ
@given(data=st.data())
def test_request_pipeline_raises_only_typed_errors(api: ApiName, data: st.DataObject) -> None:
    body: Any = data.draw(request_bodies(api), label="body")
    route = data.draw(routes, label="route")
    outcome = caught(lambda: drive_request(api, body, route))
    COUNTS["fuzz request examples"] += 1
    COUNTS[f"fuzz request outcome {outcome.split(':')[0]}"] += 1


@pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")
@pytest.mark.parametrize("api", API_NAMES)
def test_request_seeds_get_past_the_parser(api: ApiName) -> None:
    """Mutations start from bodies that parse, so they reach the validator and renderers."""
    seeds = request_seeds(api)
    outcomes = [drive_request(api, body, RouteInfo(model="m", stream=False)) for body in seeds]
    parsed = [o for o in outcomes if o.startswith("parsed:")]
    assert len(parsed) >= len(seeds) - 1, outcomes
