"""`python -m bench`: every bench starts from the shared entry point and its faults show."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def bench_module_names() -> list[str]:
    return sorted(p.stem for p in (ROOT / "bench").glob("*.py") if not p.stem.startswith("_"))


@pytest.mark.parametrize("name", bench_module_names())
def test_every_bench_main_runs_without_arguments(name: str):
    # `python -m bench` calls each module's main() with no argument; one that requires
    # argv stopped the whole run with a TypeError before.
    main = importlib.import_module(f"bench.{name}").main
    inspect.signature(main).bind()


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_unknown_bench_name_lists_the_available_ones():
    done = run_bench("no-such-bench")
    assert done.returncode == 2
    assert "available:" in done.stdout
    assert "proxy_latency" in done.stdout


def test_an_option_before_the_separator_runs_no_bench():
    # ``stream --help`` once ran the whole stream bench, --help taken for a name.
    done = run_bench("stream", "--help")
    assert done.returncode == 2
    assert "options go after --, e.g. python -m bench stream -- --help" in done.stdout
    assert "== bench." not in done.stdout


def test_the_proxy_bench_refuses_a_flag_it_does_not_know():
    # It once ran its four minutes for any flag, --help included.
    done = run_bench("proxy", "--", "--no-such-flag")
    assert done.returncode != 0
    assert "unrecognized arguments: --no-such-flag" in done.stderr
    assert "body 10 KB" not in done.stdout


def test_arguments_after_the_separator_reach_the_bench():
    # --only with no matching target: the fuzz bench parses it and runs nothing.
    done = run_bench("fuzz", "--", "--only", "no-such-target")
    assert done.returncode == 0, done.stderr
    assert "hypothesis: 0 examples, 0 distinct crashes" in done.stdout


def test_a_bad_flag_stops_the_run_with_its_message():
    done = run_bench("fuzz", "--", "--unknown-flag")
    assert done.returncode != 0
    assert "unrecognized arguments: --unknown-flag" in done.stderr


def test_a_bench_that_finds_a_fault_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    import bench.__main__ as entry
    import bench.fuzz_long

    monkeypatch.setattr(bench.fuzz_long, "main", lambda: 1)  # as when it finds a crash
    assert entry.main(["fuzz"]) == 1
    assert "failed: fuzz_long" in capsys.readouterr().out


@pytest.mark.parametrize("api", ["openai_responses", "anthropic", "gemini"])
def test_the_round_trip_benchs_conversation_is_valid_in_every_api(api: str):
    # The bench asserts each API's form of its conversation is ready before it times it; a
    # new rule that refuses the form stops the bench (it did, unnoticed, for a session).
    from bench.graph_roundtrip import _other_api_rows, tool_heavy_request
    from turngate.adapters.openai_chat import ADAPTER

    rows = _other_api_rows(api, ADAPTER.parse_request(tool_heavy_request()))
    assert len(rows) == 2


def test_the_speed_history_reads_as_one_row_per_session_with_a_figure_each():
    # bench/speed-history.csv is edited by hand each session; the chart is drawn from it.
    from bench.plot_history import HISTORY, PANELS, latest, read_history

    history = read_history(HISTORY)
    sessions = [row["session"] for row in history]
    assert sessions == sorted(set(sessions)), "a session twice, or out of order"
    columns = [column for *_, panel, _floor in PANELS for column, _label in panel]
    for row in history:
        assert set(row) == {"session", *columns}
        assert all(v is None or v > 0 for v in row.values()), row
    assert len(latest(history)) == len(columns), "a figure no session measured"
