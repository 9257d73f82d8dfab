"""Operation ids: ``op_`` and 32 hex digits, unguessable, and later ones sort later."""

from __future__ import annotations

import re
import time

from turngate.state.manifest import new_operation_id

SHAPE = re.compile(r"op_[0-9a-f]{32}")


def test_ids_have_their_shape_and_never_repeat() -> None:
    ids = [new_operation_id() for _ in range(20_000)]
    assert all(SHAPE.fullmatch(i) for i in ids)
    assert len(set(ids)) == len(ids)
    # 80 random bits after the time: ids of one millisecond differ in their last 20 digits.
    same_time = [i for i in ids if i[:15] == ids[0][:15]]
    assert len({i[15:] for i in same_time}) == len(same_time)


def test_an_id_made_later_sorts_later() -> None:
    # What keeps the state file's indexes growing at their right edge.
    earlier = new_operation_id()
    time.sleep(0.002)
    later = new_operation_id()
    assert earlier < later
    assert int(later[3:15], 16) - int(earlier[3:15], 16) >= 2  # milliseconds apart
    assert abs(int(later[3:15], 16) - time.time() * 1000) < 1000
