"""Where the recorded provider traffic lives, and the suite's printed counts.

Tests read ../shared/fixtures (beside the checkout; TURNGATE_FIXTURES overrides). When
the folder is absent, the tests that need it are skipped *and* the run's summary says so
in capitals, so a missing folder is never silent.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import orjson
import pytest

_DEFAULT = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures"
FIXTURES_DIR = Path(os.environ.get("TURNGATE_FIXTURES", _DEFAULT))
FIXTURES_PRESENT = (FIXTURES_DIR / "MANIFEST.tsv").is_file()

# Counts that tests add to and the terminal summary prints ("bodies round-tripped: 12").
COUNTS: Counter[str] = Counter()
# Figures the summary prints as the largest any test saw (summed counts do not add up so).
LARGEST: dict[str, int] = {}


def note_largest(key: str, value: int) -> None:
    """Keep ``value`` for the summary's ``key`` if it is the largest seen."""
    LARGEST[key] = max(LARGEST.get(key, value), value)


def fixture_paths(pattern: str, *, exclude: str | None = None) -> list[Path]:
    """Fixture files matching ``pattern`` (a glob under the fixtures folder), sorted.

    ``exclude`` drops names ending with it (e.g. ".request.json" to keep only responses).
    """
    if not FIXTURES_PRESENT:
        return []
    paths = sorted(FIXTURES_DIR.glob(pattern))
    return [p for p in paths if exclude is None or not p.name.endswith(exclude)]


def fixture_params(pattern: str, *, exclude: str | None = None, arity: int = 1) -> list[object]:
    """``pytest.mark.parametrize`` values for each fixture file, or one loud skip if absent.

    ``arity`` is the number of parameter names a caller's parametrize will use, so the skip
    placeholder has as many values.
    """
    paths = fixture_paths(pattern, exclude=exclude)
    if paths:
        return [pytest.param(p, id=p.name) for p in paths]
    reason = f"recorded fixtures ABSENT: {FIXTURES_DIR} does not exist"
    if FIXTURES_PRESENT:
        reason = f"no fixture matches {pattern!r} in {FIXTURES_DIR}"
    placeholder = [None] * arity
    return [pytest.param(*placeholder, marks=pytest.mark.skip(reason=reason), id="fixtures-absent")]


def load_json(path: Path) -> object:
    return orjson.loads(path.read_bytes())
