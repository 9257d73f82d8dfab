"""docs/state-machine.md, generated from ``TRANSITIONS`` so the picture cannot drift.

python -m turngate.state.diagram > docs/state-machine.md
"""

from __future__ import annotations

from turngate.state.machine import IN_FLIGHT, TERMINAL, TRANSITIONS, DispatchState

INTRO = """\
# The dispatch state machine

Every dispatch attempt is an operation in the state store. A claim (the compare-and-swap
on conversation, revision and cancel generation) records PREPARED and moves it to
DISPATCHING before any byte leaves; after that only the transitions drawn below are
allowed, and any other raises `IllegalTransition`.

In flight (a crash here leaves the outcome unknown): {in_flight}.
At start, operations left in these states become UNKNOWN.
Terminal: {terminal}.

Generated from `TRANSITIONS` in `turngate/state/machine.py` by
`python -m turngate.state.diagram > docs/state-machine.md`; a test fails when this file
and the table disagree.
"""


def render_mermaid() -> str:
    """A Mermaid stateDiagram-v2: one arrow per table entry, labelled with its transition."""
    lines = ["stateDiagram-v2", f"    [*] --> {DispatchState.PREPARED}"]
    lines += [
        f"    {source} --> {target}: {transition}"
        for (source, transition), target in TRANSITIONS.items()
    ]
    lines += [f"    {state} --> [*]" for state in DispatchState if state in TERMINAL]
    return "\n".join(lines) + "\n"


def render_document() -> str:
    intro = INTRO.format(
        in_flight=_names(IN_FLIGHT),
        terminal=_names(TERMINAL),
    )
    return f"{intro}\n```mermaid\n{render_mermaid()}```\n"


def _names(states: frozenset[DispatchState]) -> str:
    # Declaration order, not set order, so the text is stable from run to run.
    return ", ".join(str(s) for s in DispatchState if s in states)


if __name__ == "__main__":
    print(render_document(), end="")
