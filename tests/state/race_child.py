"""Another process racing for a claim slot (run by test_store_contract.py).

    python -m tests.state.race_child BACKEND WHERE CONVERSATION N

Opens the store, prints ``ready``, reads a wall-clock start time from stdin, sleeps until
it, fires N concurrent claims, then prints one JSON line: the operation ids it won, the
number of conflicts and the operation ids the conflicts named.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from tests.state.stores import backend_named, draft
from turngate.state.store import ClaimConflict, OperationRecord


async def main(backend: str, where: str, conversation: str, count: int) -> None:
    store = backend_named(backend).make(Path(where))
    await store.open()
    try:
        print("ready", flush=True)
        start_at = float(await asyncio.to_thread(sys.stdin.readline))
        await asyncio.sleep(max(0.0, start_at - time.time()))
        results = await asyncio.gather(
            *(store.claim(draft(conversation), now=1.0) for _ in range(count)),
            return_exceptions=True,
        )
    finally:
        await store.close()
    conflicts = [r for r in results if isinstance(r, ClaimConflict)]
    won = [r.operation_id for r in results if isinstance(r, OperationRecord)]
    if len(conflicts) + len(won) != count:
        raise SystemExit(f"unexpected results: {results!r}")
    report = {
        "won": won,
        "conflicts": len(conflicts),
        "existing": sorted({c.existing.operation_id for c in conflicts}),
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
