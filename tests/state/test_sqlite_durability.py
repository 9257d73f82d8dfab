"""Which SQLite writes wait for the disk (synchronous=FULL) and which need not (NORMAL).

A power cut may undo a NORMAL write. That is safe only for SEND, STREAM and BIND: undone,
they leave the operation DISPATCHING, SENT or STREAMING, still in flight, so the next
start finds it UNKNOWN as it would have anyway. A claim, a commit, a failure or a loss
undone would let an attempt be sent twice or refuse a history the client already holds:
those are FULL.

A store opened with ``sync=normal`` waits for the disk on no write at all: a crash of the
process still loses nothing committed (WAL), as the SIGKILL test in
tests/proxy/test_serve_process.py shows for that store too.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.state.stores import draft
from turngate.state.machine import Transition
from turngate.state.sqlite import SQLiteStore

T = Transition
FULL, NORMAL = 2, 1


async def level_of_last_write(store: SQLiteStore) -> int:
    # Set before each write transaction and left as it was: the level that write used.
    row = await store._run(lambda db: db.execute("PRAGMA synchronous").fetchone())
    return int(row[0])


async def test_only_send_stream_and_bind_are_written_without_waiting_for_the_disk(
    tmp_path: Path,
):
    store = SQLiteStore(tmp_path / "state.db")
    await store.open()
    try:
        streamed = await store.claim(draft(None), now=1.0)
        assert await level_of_last_write(store) == FULL
        await store.transition(streamed.operation_id, T.SEND, now=2.0)
        assert await level_of_last_write(store) == NORMAL
        await store.transition(streamed.operation_id, T.STREAM, now=3.0)
        assert await level_of_last_write(store) == NORMAL
        await store.transition(streamed.operation_id, T.BIND, now=3.5, handle="chatcmpl-1")
        assert await level_of_last_write(store) == NORMAL
        await store.transition(streamed.operation_id, T.COMMIT, now=4.0)
        assert await level_of_last_write(store) == FULL

        # A stream whose headers came before SEND was written: both in one NORMAL write.
        folded = await store.claim(draft(None), now=4.5)
        moved = await store.transition(folded.operation_id, T.STREAM, now=4.6, sent=True)
        assert [c.transition for c in moved.history[-2:]] == [T.SEND, T.STREAM]
        assert await level_of_last_write(store) == NORMAL
        await store.transition(folded.operation_id, T.COMMIT, now=4.7)

        for outcome in (T.FAIL, T.LOSE):
            record = await store.claim(draft(None), now=5.0)
            await store.transition(record.operation_id, T.SEND, now=6.0)
            assert await level_of_last_write(store) == NORMAL
            await store.transition(record.operation_id, outcome, now=7.0)
            assert await level_of_last_write(store) == FULL

        # Any other write is FULL too, whatever the write before it used.
        sent = await store.claim(draft(None), now=7.4)
        await store.transition(sent.operation_id, T.SEND, now=7.5)
        await store.append_log("shadow", {"n": 1}, now=7.6, keep=10)
        assert await level_of_last_write(store) == FULL

        lost = await store.claim(draft(None), now=8.0)
        await store.transition(lost.operation_id, T.SEND, now=9.0)
        recovered = {r.operation_id for r in await store.recover(now=10.0)}
        assert recovered == {sent.operation_id, lost.operation_id}
        assert await level_of_last_write(store) == FULL
    finally:
        await store.close()


async def test_a_claim_after_a_send_is_fully_synced_again(tmp_path: Path):
    store = SQLiteStore(tmp_path / "state.db")
    await store.open()
    try:
        first = await store.claim(draft(conversation_id="c"), now=1.0)
        await store.transition(first.operation_id, T.SEND, now=2.0)
        await store.claim(draft(conversation_id="other"), now=3.0)
        assert await level_of_last_write(store) == FULL
    finally:
        await store.close()


async def test_a_store_opened_with_sync_normal_waits_for_the_disk_on_no_write(tmp_path: Path):
    store = SQLiteStore(tmp_path / "state.db", sync="normal")
    await store.open()
    try:
        assert await level_of_last_write(store) == NORMAL
        committed = await store.claim(draft(None), now=1.0)
        assert await level_of_last_write(store) == NORMAL
        await store.transition(committed.operation_id, T.SEND, now=2.0)
        await store.transition(committed.operation_id, T.COMMIT, now=3.0)
        assert await level_of_last_write(store) == NORMAL
        for outcome in (T.FAIL, T.LOSE):
            record = await store.claim(draft(None), now=4.0)
            await store.transition(record.operation_id, outcome, now=5.0)
            assert await level_of_last_write(store) == NORMAL
        await store.append_log("shadow", {"n": 1}, now=6.0, keep=10)
        assert await level_of_last_write(store) == NORMAL
        # Claims queued together go in one group commit: NORMAL too.
        grouped = await asyncio.gather(*(store.claim(draft(None), now=7.0) for _ in range(16)))
        assert await level_of_last_write(store) == NORMAL
        lost = {r.operation_id for r in await store.recover(now=8.0)}
        assert lost == {r.operation_id for r in grouped}
        assert await level_of_last_write(store) == NORMAL
    finally:
        await store.close()

    # What it committed is there for the next open, whatever the level.
    reopened = SQLiteStore(tmp_path / "state.db")
    await reopened.open()
    try:
        assert (await reopened.get(committed.operation_id)).state.name == "COMMITTED"
        assert await level_of_last_write(reopened) == FULL
    finally:
        await reopened.close()
