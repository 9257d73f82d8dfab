"""House rule 1: the pure core imports no I/O or telemetry library (DESIGN.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import turngate

ROOT = Path(turngate.__file__).parent
FORBIDDEN = {"aiohttp", "asyncio", "sqlite3", "redis", "opentelemetry", "socket", "time"}
PURE = [
    *sorted((ROOT / "graph").rglob("*.py")),
    *sorted((ROOT / "adapters").rglob("*.py")),
    *sorted((ROOT / "policies").rglob("*.py")),
    ROOT / "state" / "machine.py",
]


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_module_imports_no_io(path: Path):
    assert imported_modules(path) & FORBIDDEN == set()


def test_the_scan_sees_every_pure_package():
    assert len(PURE) >= 10
    proxy = ROOT / "cli.py"
    assert "turngate" in imported_modules(proxy)
