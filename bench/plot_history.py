"""Issue 4's speed figures, session by session, as one chart: `python -m bench plot_history`.

Reads bench/speed-history.csv (one row per session, added by hand from that session's
`bench request_instructions --quick` and `bench proxy --quick`) and writes
docs/img/speed-history.svg: instructions per request, added p50 latency and throughput at
32 in flight, each against the bare aiohttp pass-through and beside its target. Needs
matplotlib (`pip install -e '.[bench]'`; `make bench` installs it).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HISTORY = ROOT / "bench" / "speed-history.csv"
CHART = ROOT / "docs" / "img" / "speed-history.svg"

# One colour per line across the panels.
COLOURS = {"turngate": "tab:blue", "turngate, SQLite": "tab:orange", "floor": "tab:purple"}

# (title, y label, target, [(column, label)], whether the target is a floor)
PANELS: tuple[tuple[str, str, float, tuple[tuple[str, str], ...], bool], ...] = (
    (
        "Instructions per 10 KB request (callgrind)",
        "x bare pass-through",
        1.25,
        (("instructions_turngate", "turngate"), ("instructions_floor", "floor")),
        False,
    ),
    (
        "Added p50 latency, 10 KB, one at a time",
        "x bare pass-through",
        1.5,
        (("p50_memory", "turngate"), ("p50_sqlite", "turngate, SQLite"), ("p50_floor", "floor")),
        False,
    ),
    (
        "Throughput, 10 KB, 32 in flight",
        "% of bare pass-through",
        80.0,
        (
            ("throughput_memory", "turngate"),
            ("throughput_sqlite", "turngate, SQLite"),
            ("throughput_floor", "floor"),
        ),
        True,
    ),
)


def read_history(path: Path) -> list[dict[str, float | None]]:
    """The sessions' rows, each column a number or None where that session measured none."""
    with path.open(newline="") as handle:
        rows = csv.DictReader(line for line in handle if not line.startswith("#"))
        history = [{k: float(v) if v else None for k, v in row.items()} for row in rows]
    if not history:
        raise ValueError(f"{path} holds no session")
    return history


def series(history: list[dict[str, float | None]], column: str) -> tuple[list[float], list[float]]:
    """The sessions that measured ``column``, and its values (throughput as a percentage)."""
    scale = 100.0 if column.startswith("throughput") else 1.0
    points = [(row["session"], row[column]) for row in history if row[column] is not None]
    return [s for s, _ in points if s is not None], [v * scale for _, v in points if v is not None]


def draw(history: list[dict[str, float | None]], out: Path) -> None:
    import matplotlib

    matplotlib.use("svg")
    import matplotlib.pyplot as plt

    # A chart that changes only when its figures do; text kept as text.
    plt.rcParams["svg.hashsalt"] = "turngate"
    plt.rcParams["svg.fonttype"] = "none"
    figure, axes = plt.subplots(len(PANELS), 1, figsize=(9, 9), sharex=True)
    for ax, (title, unit, target, columns, floor) in zip(axes, PANELS, strict=True):
        for column, label in columns:
            sessions, values = series(history, column)
            ax.plot(sessions, values, marker="o", label=label, color=COLOURS[label])
        side = "at least" if floor else "at most"
        ax.axhline(target, color="tab:red", linestyle="--", label=f"target: {side} {target:g}")
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(unit)
        ax.set_ylim(0, 100 if floor else None)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    axes[-1].set_xlabel("session")
    figure.suptitle("turngate against the bare aiohttp pass-through (issue 4)")
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, format="svg", metadata={"Date": None})
    plt.close(figure)


def latest(history: list[dict[str, float | None]]) -> list[str]:
    """Each figure's last measured value against its target, as lines to print."""
    lines = []
    for _title, unit, target, columns, floor in PANELS:
        for column, label in columns:
            sessions, values = series(history, column)
            if values:
                met = values[-1] >= target if floor else values[-1] <= target
                lines.append(
                    f"{column:<24}{label:<18}session {sessions[-1]:.0f}: {values[-1]:6.2f} "
                    f"{unit} (target {target:g}: {'met' if met else 'not met'})"
                )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.plot_history", description=__doc__)
    parser.add_argument("--history", type=Path, default=HISTORY)
    parser.add_argument("--out", type=Path, default=CHART)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    history = read_history(args.history)
    print("\n".join(latest(history)))
    try:
        draw(history, args.out)
    except ModuleNotFoundError as missing:
        print(f"{missing}: the chart needs matplotlib (pip install -e '.[bench]')")
        return 1
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
