"""A clock the test moves by hand: ``clock()`` is ``clock.now``."""

from __future__ import annotations

import time


class Clock:
    def __init__(self, now: float | None = None) -> None:
        self.now = time.time() if now is None else now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
