"""Run the benchmarks: `python -m bench` runs every one, `python -m bench proxy graph` some.

A name selects every bench module it starts (``proxy`` -> ``proxy_latency``). Arguments
after ``--`` go to each selected bench, e.g. ``python -m bench proxy -- --quick``.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def bench_modules() -> list[str]:
    here = Path(__file__).parent
    return sorted(
        info.name for info in pkgutil.iter_modules([str(here)]) if not info.name.startswith("_")
    )


def main(argv: list[str]) -> int:
    names, _, passed = (
        (argv[: argv.index("--")], "--", argv[argv.index("--") + 1 :])
        if "--" in argv
        else (argv, "", [])
    )
    options = [n for n in names if n.startswith("-")]
    if options:
        # Not a bench's name: without this, ``stream --help`` ran the whole stream bench.
        print(f"options go after --, e.g. python -m bench stream -- {' '.join(options)}")
        return 2
    available = bench_modules()
    chosen = [m for m in available if not names or any(m.startswith(n) for n in names)]
    if not chosen:
        print(f"no bench matches {' '.join(names)}; available: {', '.join(available)}")
        return 2
    failed = []
    for name in chosen:
        print(f"== bench.{name}", flush=True)
        module = importlib.import_module(f"bench.{name}")
        sys.argv = [f"bench.{name}", *passed]
        if module.main():  # a bench that finds a fault returns non-zero
            failed.append(name)
        print()
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
