from __future__ import annotations

import pytest

from tests.fixtures_dir import COUNTS, FIXTURES_DIR, FIXTURES_PRESENT


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    write = terminalreporter.write_line
    terminalreporter.section("turngate")
    if FIXTURES_PRESENT:
        write(f"recorded fixtures: {FIXTURES_DIR}")
    else:
        write(
            f"RECORDED FIXTURES ABSENT: {FIXTURES_DIR} does not exist; every test that "
            "replays provider traffic was SKIPPED. Put ../shared/fixtures beside the checkout "
            "or set TURNGATE_FIXTURES.",
            red=True,
            bold=True,
        )
    for key in sorted(COUNTS):
        write(f"{key}: {COUNTS[key]}")
