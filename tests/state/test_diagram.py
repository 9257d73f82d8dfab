"""docs/state-machine.md is generated from the table and cannot drift from it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from turngate.state.diagram import render_document, render_mermaid
from turngate.state.machine import TERMINAL, TRANSITIONS, DispatchState, Transition

DOC = Path(__file__).resolve().parents[2] / "docs" / "state-machine.md"
ARROW = re.compile(r"^    (\S+) --> (\S+?)(?:: (\w+))?$")


def test_doc_is_the_generated_text() -> None:
    assert DOC.read_text(encoding="utf-8") == render_document(), (
        "docs/state-machine.md is stale: run "
        "`python -m turngate.state.diagram > docs/state-machine.md`"
    )


def test_module_prints_the_document() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "turngate.state.diagram"],
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    assert printed == render_document()


def test_diagram_reads_back_as_the_table() -> None:
    lines = render_mermaid().splitlines()
    assert lines[0] == "stateDiagram-v2"
    table: dict[tuple[DispatchState, Transition], DispatchState] = {}
    starts, ends = [], []
    for line in lines[1:]:
        match = ARROW.match(line)
        assert match, f"not a Mermaid transition: {line!r}"
        source, target, label = match.groups()
        if source == "[*]":
            starts.append(DispatchState(target))
        elif target == "[*]":
            ends.append(DispatchState(source))
        else:
            key = (DispatchState(source), Transition(label))
            assert key not in table, f"drawn twice: {line!r}"
            table[key] = DispatchState(target)
    assert table == TRANSITIONS
    assert starts == [DispatchState.PREPARED]
    assert set(ends) == TERMINAL


def test_doc_renders_as_one_mermaid_block() -> None:
    text = render_document()
    assert text.count("```mermaid\n") == 1
    assert text.rstrip().endswith("```")
    assert render_mermaid() in text
