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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):  # type: ignore[no-untyped-def]
    """Without the recorded fixtures, a test that reads one is skipped, loudly, not failed."""
    outcome = yield
    if FIXTURES_PRESENT or outcome.excinfo is None:
        return
    error = outcome.excinfo[1]
    if isinstance(error, FileNotFoundError) and str(FIXTURES_DIR) in str(error.filename or ""):
        outcome.force_exception(
            pytest.skip.Exception(f"recorded fixtures ABSENT: {error.filename} does not exist")
        )
