"""A turngate process killed with SIGKILL mid-dispatch: the file keeps what it committed.

A real child process opens the store, claims (and maybe sends and streams), says so and
blocks; the test kills it, opens the file again and recovers: the attempt is UNKNOWN with
its whole history, and it still blocks a new claim for its slot (no new generation starts
until the old attempt is known to be over).
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.state.stores import draft
from turngate.errors import StoreUnavailable
from turngate.state.machine import DispatchState, Transition, advance
from turngate.state.sqlite import SQLiteStore
from turngate.state.store import LOST_AT_START, ClaimConflict

S, T = DispatchState, Transition
REPO = Path(__file__).resolve().parents[2]

CLAIM_AND_BLOCK = """
import asyncio, sys, time
from tests.state.stores import draft
from turngate.state.machine import Transition
from turngate.state.sqlite import SQLiteStore

async def main(path, steps):
    store = SQLiteStore(path)
    await store.open()
    record = await store.claim(draft("conv-crash", revision=4), now=10.0)
    for at, step in enumerate(steps, start=11):
        await store.transition(record.operation_id, Transition(step), now=float(at),
                               handle="resp_crash" if step == "stream" else None)
    print("claimed", record.operation_id, flush=True)
    time.sleep(3600)  # blocks the loop and the process: the only way out is the kill

asyncio.run(main(sys.argv[1], [s for s in sys.argv[2].split(",") if s]))
"""

HOLD_WRITE_LOCK = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
db.execute(
    "INSERT INTO operations VALUES ('op-half', 'conv-crash', 4, 0, 1, 'DISPATCHING', NULL, '{}')"
)
print("locked", flush=True)
time.sleep(3600)
"""


def run_until(code: str, ready: str, *args: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line.startswith(ready), f"child said {line!r}, exit code {child.poll()}"
    return child


def kill(child: subprocess.Popen[str]) -> None:
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=30) == -signal.SIGKILL
    assert child.stdout is not None
    child.stdout.close()


@pytest.mark.parametrize(
    ("steps", "killed_in"),
    [([], S.DISPATCHING), ([T.SEND], S.SENT), ([T.SEND, T.STREAM], S.STREAMING)],
    ids=["dispatching", "sent", "streaming"],
)
async def test_killed_mid_dispatch_is_recovered_as_unknown(
    tmp_path: Path, steps: list[Transition], killed_in: DispatchState
) -> None:
    path = tmp_path / "state.db"
    child = await asyncio.to_thread(
        run_until, CLAIM_AND_BLOCK, "claimed", str(path), ",".join(steps)
    )
    # The commits sit in the write-ahead log, not yet in the main file: recovery reads them.
    wal = path.with_name(path.name + "-wal")
    assert wal.stat().st_size > 0
    kill(child)

    store = SQLiteStore(path)
    await store.open()
    try:
        moved = await store.recover(now=100.0)
        assert len(moved) == 1
        record = await store.get(moved[0].operation_id)
        assert record == moved[0]
        assert record.state is S.UNKNOWN
        expected = [(S.PREPARED, None), (S.DISPATCHING, T.CLAIM)]
        for step in steps:
            expected.append((advance(expected[-1][0], step), step))
        assert expected[-1][0] is killed_in
        expected.append((S.UNKNOWN, T.LOSE))
        assert [(c.state, c.transition) for c in record.history] == expected
        assert [c.at for c in record.history] == [10.0, 10.0, *range(11, 11 + len(steps)), 100.0]
        assert record.history[-1].detail == LOST_AT_START
        assert record.handle == ("resp_crash" if T.STREAM in steps else None)
        assert record.manifest.attempt == 1

        with pytest.raises(ClaimConflict) as raised:
            await store.claim(draft("conv-crash", revision=4), now=101.0)
        assert raised.value.existing == record
        assert await store.recover(now=102.0) == []
    finally:
        await store.close()


async def test_killed_inside_a_write_leaves_no_half_record_and_no_lock(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SQLiteStore(path, busy_timeout=10.0)
    await store.open()
    await store.close()
    child = await asyncio.to_thread(run_until, HOLD_WRITE_LOCK, "locked", str(path))
    # While the child holds the write lock, a claim waits for it (and would time out).
    impatient = SQLiteStore(path, busy_timeout=0.2)
    await impatient.open()
    try:
        assert await impatient.ping() is False
        with pytest.raises(StoreUnavailable, match="locked"):
            await impatient.claim(draft("conv-crash", revision=4), now=1.0)
    finally:
        await impatient.close()
    kill(child)

    await store.open()
    try:
        assert await store.ping() is True
        assert await store.get("op-half") is None
        assert await store.recover(now=1.0) == []
        claimed = await store.claim(draft("conv-crash", revision=4), now=2.0)
        assert claimed.manifest.attempt == 1
    finally:
        await store.close()


def test_the_file_is_consistent_after_the_kill(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    child = run_until(CLAIM_AND_BLOCK, "claimed", str(path), "send")
    kill(child)
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert db.execute("SELECT count(*) FROM history").fetchone() == (3,)
    finally:
        db.close()
