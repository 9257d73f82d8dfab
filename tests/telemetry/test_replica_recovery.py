"""Replicas on one Redis, through the real proxy app with in-memory telemetry: attempts of a
replica that stopped are taken over by the recovery task and counted UNKNOWN from then on;
one settled by another replica and one settled by its deadline both leave the gauges, each
with its exact UNKNOWN duration."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.clock import Clock
from tests.state.redis_server import key_prefix, redis_url
from tests.state.stores import draft
from tests.telemetry.helpers import captured, labels, points
from turngate.proxy.app import SERVICES, create_app
from turngate.proxy.recovery import recover_once
from turngate.settings import Settings
from turngate.state.machine import DispatchState, Transition
from turngate.state.redis import RedisStore

DEADLINE = 120.0


@pytest.fixture
async def replicas(tmp_path: Path) -> AsyncIterator[list[RedisStore]]:
    """Three stores on this test's keys: three replicas' views of one Redis."""
    prefix = key_prefix(tmp_path)
    stores = [RedisStore(redis_url(), key_prefix=prefix) for _ in range(3)]
    yield stores
    for store in stores:
        await store.close()


async def test_attempts_taken_over_are_counted_until_settled_here_or_elsewhere(
    aiohttp_server: Any, replicas: list[RedisStore]
) -> None:
    stopped, serving, other = replicas
    clock = Clock()
    start = clock.now
    capture = captured()
    app = create_app(
        Settings(unknown_deadline=DEADLINE),
        store=serving,
        clock=clock,
        credential_secret="s",
        telemetry=capture.telemetry,
    )
    await aiohttp_server(app, access_log=None)
    services = app[SERVICES]

    # Two attempts in flight on another replica, which then stops (its lease goes with
    # it). The second started earlier: its deadline comes 100 s from now.
    await stopped.open()
    first = await stopped.claim(dataclasses.replace(draft("conv-a"), created_at=start), now=start)
    early = dataclasses.replace(draft("conv-b"), created_at=start - DEADLINE + 100)
    second = await stopped.claim(early, now=start)
    for record in (first, second):
        await stopped.transition(record.operation_id, Transition.SEND, now=start)

    def gauges() -> tuple[int, float]:
        metrics = points(capture.reader)
        return (
            metrics["turngate.dispatch.unknown"][frozenset()],
            metrics["turngate.dispatch.unknown_age"][frozenset()],
        )

    # A live replica's attempts are not this one's to count.
    await recover_once(services)
    assert gauges() == (0, 0.0)
    await stopped.close()
    await recover_once(services)
    assert gauges() == (2, 0.0)

    # A retry served by another replica settles the first; this replica's next round sees it.
    clock.now = start + 50
    await other.open()
    await other.transition(first.operation_id, Transition.SETTLE, now=clock.now)
    assert gauges() == (2, 50.0)
    await recover_once(services)
    assert gauges() == (1, 50.0)

    # The second's deadline passes: this replica settles it.
    clock.now = start + 100
    # (The app's own task may run a round too: the outcome is the same.)
    await recover_once(services)
    assert gauges() == (0, 0.0)
    settled = await serving.get(second.operation_id)
    assert settled is not None
    assert settled.state is DispatchState.FAILED
    durations = points(capture.reader)["turngate.dispatch.unknown_duration"]
    assert {k: (v.count, v.sum) for k, v in durations.items()} == {
        labels(api="openai_chat", outcome="settled"): (2, 50.0 + 100.0)
    }
