"""The counts the suite prints (the issues' "the suite prints these counts") survive
`make test`'s workers: each worker's counts reach the summary, added up, and a largest
figure is the largest any worker saw."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

INNER = """
import pytest
from tests.fixtures_dir import COUNTS, note_largest

@pytest.mark.parametrize("n", range(6))
def test_counted(n):
    COUNTS["inner tests counted"] += 1
    note_largest("inner largest n", n)
"""


def test_workers_counts_are_added_up_in_the_summary(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(INNER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = ["-n", "2", "-p", "tests.conftest", "-p", "no:cacheprovider", "--rootdir"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args, str(tmp_path), str(tmp_path / "test_inner.py")],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 workers" in done.stdout
    summary = done.stdout.split("turngate")[-1]
    assert "inner tests counted: 6" in summary
    assert "inner largest n: 5" in summary
