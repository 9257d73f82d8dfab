"""The flags of the benches that take only ``--quick`` (and a switch or two)."""

from __future__ import annotations

import argparse


def bench_options(prog: str, args: list[str], *switches: tuple[str, str]) -> argparse.Namespace:
    """``--quick`` and each (flag, help) of ``switches`` read from ``args``. A flag not
    known (``--help`` included) stops here with its message, not after minutes of run."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    for flag, text in switches:
        parser.add_argument(flag, action="store_true", help=text)
    return parser.parse_args(args)
