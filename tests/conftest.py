from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures_dir import COUNTS, FIXTURES_DIR, FIXTURES_PRESENT, LARGEST, note_largest


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On a pytest-xdist worker: hand the counts to the controller, which prints them."""
    output: dict[str, Any] | None = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["turngate_counts"] = dict(COUNTS)
        output["turngate_largest"] = dict(LARGEST)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """On the pytest-xdist controller: add up a worker's counts as it finishes."""
    output: dict[str, Any] = getattr(node, "workeroutput", {})
    COUNTS.update(output.get("turngate_counts", {}))
    for key, value in output.get("turngate_largest", {}).items():
        note_largest(key, value)


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
    figures = {**COUNTS, **LARGEST}
    for key in sorted(figures):
        write(f"{key}: {figures[key]}")


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
