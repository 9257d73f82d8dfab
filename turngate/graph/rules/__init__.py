"""API-specific sequence rules, named in each adapter's ``Capabilities.extra_rules``.

A rule takes the sequence and returns its violations. Each module here registers its
rules with ``@rule("name")``; ``run_rules`` runs those a capabilities record names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cache

from turngate.graph.model import MessageSequence
from turngate.graph.validator import Violation

Rule = Callable[[MessageSequence], list[Violation]]
_RULES: dict[str, Rule] = {}


def rule(name: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        if name in _RULES:
            raise ValueError(f"rule {name!r} is registered twice")
        _RULES[name] = fn
        return fn

    return register


def run_rules(names: Iterable[str], seq: MessageSequence) -> list[Violation]:
    _load()
    out: list[Violation] = []
    for name in names:
        out.extend(_RULES[name](seq))
    return out


@cache
def _load() -> None:
    """Import every rule module once so their ``@rule`` decorators have run."""
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
