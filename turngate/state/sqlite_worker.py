"""The SQLite store's one worker thread, and group commit of the writes queued on it.

Every call runs on this thread, which owns the connection, one after another in the order
they were submitted, so the event loop never waits on the disk. A write that says how
durable it must be (``level``: the claim, transitions, the canonical commit) may be
grouped with the writes queued behind it: they run in one ``BEGIN IMMEDIATE`` transaction,
each inside its own savepoint (a call that raises leaves nothing behind and the others
go on), and every caller hears back only after the one COMMIT, which is fsynced when any
of them needed it. A call's result therefore still means its write is as durable as it
asked; under load, one fsync serves many claims and commits instead of one each.

A write alone in the queue runs exactly as before: its own transaction at its own level.
A group that meets an SQLite error (a constraint, a full disk, a lock held too long) is
rolled back whole and each of its calls runs again on its own, so every caller gets the
outcome it would have had without grouping.
"""

from __future__ import annotations

import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from turngate.state.sqlite_sync import Level, synchronous

R = TypeVar("R")

# Calls per group: bounds how long the first of them waits for the rest.
MAX_GROUP = 64


@dataclass(frozen=True)
class _Job:
    # Plain calls run as they are; writes get the connection.
    call: Callable[[], Any] | None
    write: Callable[[sqlite3.Connection], Any] | None
    level: Level | None
    future: Future[Any]


# The last item of the queue: the thread ends when it takes it.
_STOP = _Job(None, None, None, Future())


class Worker:
    """One thread running the store's calls. ``alone`` runs one write on the connection as
    the store always does (its errors translated); ``connection`` is the open connection."""

    def __init__(
        self,
        name: str,
        *,
        alone: Callable[[Callable[[sqlite3.Connection], Any]], Any],
        connection: Callable[[], sqlite3.Connection],
    ) -> None:
        self._alone = alone
        self._connection = connection
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        # A daemon, as the executor it replaces was joined at exit: a store left open must
        # not keep the process alive, and a write cut off at exit is undone by SQLite.
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def submit(self, call: Callable[[], R]) -> Future[R]:
        """Run ``call`` alone, after everything submitted before it."""
        future: Future[R] = Future()
        self._jobs.put(_Job(call, None, None, future))
        return future

    def submit_write(
        self, level: Level, write: Callable[..., R], *args: Any, **kwargs: Any
    ) -> Future[R]:
        """Run ``write(connection, *args, **kwargs)``, maybe in a group; ``level`` is the
        durability ``write`` sets for itself (``PRAGMA synchronous``)."""
        future: Future[R] = Future()

        def bound(db: sqlite3.Connection) -> R:
            return write(db, *args, **kwargs)

        self._jobs.put(_Job(None, bound, level, future))
        return future

    def stop(self) -> None:
        """No call after those already submitted."""
        self._jobs.put(_STOP)

    def _work(self) -> None:
        held: _Job | None = None
        while True:
            job = held if held is not None else self._jobs.get()
            held = None
            if job is _STOP:
                return
            group = [job]
            while job.level is not None and len(group) < MAX_GROUP:
                try:
                    following = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if following is _STOP or following.level is None:
                    held = following
                    break
                group.append(following)
            running = [j for j in group if j.future.set_running_or_notify_cancel()]
            if len(running) == 1:
                _settle(running[0], self._run_alone)
            elif running:
                self._run_group(running)
            if held is _STOP:
                return

    def _run_alone(self, job: _Job) -> Any:
        if job.call is not None:
            return job.call()
        assert job.write is not None
        return self._alone(job.write)

    def _run_group(self, group: list[_Job]) -> None:
        outcomes: list[tuple[bool, Any]] = []
        try:
            db = self._connection()
            level: Level = "FULL" if any(job.level == "FULL" for job in group) else "NORMAL"
            synchronous(db, level)
            db.execute("BEGIN IMMEDIATE")
            try:
                for job in group:
                    assert job.write is not None
                    try:
                        outcomes.append((True, job.write(db)))
                    except sqlite3.Error:
                        raise
                    except Exception as exc:
                        outcomes.append((False, exc))
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except Exception:
            # Nothing of the group is kept: each call again, on its own.
            for job in group:
                _settle(job, self._run_alone)
            return
        for job, (ok, value) in zip(group, outcomes, strict=True):
            if ok:
                job.future.set_result(value)
            else:
                job.future.set_exception(value)


def _settle(job: _Job, run: Callable[[_Job], Any]) -> None:
    try:
        result = run(job)
    except BaseException as exc:
        job.future.set_exception(exc)
    else:
        job.future.set_result(result)
