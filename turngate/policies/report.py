"""Aggregating shadow records into the report ``turngate shadow report`` prints.

Counts are of records (requests): how many would have been refused under each rule, and how
many show each change, by the change's kind and its path with list indexes folded
(``changed messages[*].tool_call_id``). Each count keeps a few examples (``examples`` per
key, 3 by default) naming the record's operation and the concrete path. ``format_report`` is
the text ``turngate shadow report`` prints, ``report_json`` the JSON of ``GET
/turngate/v1/shadow``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from turngate.policies.diff import PathChange, ShadowRecord

_INDEX = re.compile(r"\[\d+\]")


@dataclass(frozen=True)
class Example:
    operation_id: str | None
    api: str
    model: str | None
    # The concrete path and values for a path key; the validator's rules for a rule key.
    detail: str


@dataclass
class ShadowReport:
    records: int = 0
    bytes_equal: int = 0
    bytes_changed: int = 0
    semantic_changed: int = 0
    would_refuse: int = 0
    render_failed: int = 0
    truncated: int = 0
    by_rule: Counter[str] = field(default_factory=Counter)
    by_path: Counter[str] = field(default_factory=Counter)
    # Occurrences of each path key over all records (a record may repeat a folded path).
    path_occurrences: Counter[str] = field(default_factory=Counter)
    rule_examples: dict[str, list[Example]] = field(default_factory=dict)
    path_examples: dict[str, list[Example]] = field(default_factory=dict)


def path_key(change: PathChange) -> str:
    return f"{change.kind} {_INDEX.sub('[*]', change.path)}"


def aggregate(records: Iterable[ShadowRecord], *, examples: int = 3) -> ShadowReport:
    report = ShadowReport()
    for record in records:
        report.records += 1
        if record.render_error is not None:
            report.render_failed += 1
        elif record.bytes.equal:
            report.bytes_equal += 1
        else:
            report.bytes_changed += 1
        if not record.semantic.equal:
            report.semantic_changed += 1
        if record.semantic.truncated:
            report.truncated += 1
        rules = dict.fromkeys((*record.rules, *record.findings))
        if record.rules:
            report.would_refuse += 1
        for rule in rules:
            report.by_rule[rule] += 1
            _keep(report.rule_examples, rule, _example(record, ", ".join(rules)), examples)
        seen: set[str] = set()
        for change in record.semantic.changes:
            key = path_key(change)
            report.path_occurrences[key] += 1
            if key in seen:
                continue
            seen.add(key)
            report.by_path[key] += 1
            detail = f"{change.path}: {change.sent} -> {change.would_send}"
            _keep(report.path_examples, key, _example(record, detail), examples)
    return report


def _example(record: ShadowRecord, detail: str) -> Example:
    return Example(record.operation_id, record.api, record.model, detail)


def _keep(into: dict[str, list[Example]], key: str, example: Example, limit: int) -> None:
    kept = into.setdefault(key, [])
    if len(kept) < limit:
        kept.append(example)


def report_json(report: ShadowReport) -> dict[str, Any]:
    """The report as ``GET /turngate/v1/shadow`` and ``turngate shadow report --json`` give it:
    the totals, then rules and diff paths, most frequent first, each with its examples."""
    return {
        "records": report.records,
        "bytesUnchanged": report.bytes_equal,
        "bytesChanged": report.bytes_changed,
        "semanticChanges": report.semantic_changed,
        "wouldRefuse": report.would_refuse,
        "couldNotRender": report.render_failed,
        "truncated": report.truncated,
        "byRule": [
            {"rule": rule, "count": count, "examples": _examples_json(report.rule_examples, rule)}
            for rule, count in _most_frequent(report.by_rule)
        ],
        "byPath": [
            {
                "path": key,
                "count": count,
                "occurrences": report.path_occurrences[key],
                "examples": _examples_json(report.path_examples, key),
            }
            for key, count in _most_frequent(report.by_path)
        ],
    }


def _most_frequent(counts: Counter[str]) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _examples_json(examples: dict[str, list[Example]], key: str) -> list[dict[str, Any]]:
    return [
        {"operationId": e.operation_id, "api": e.api, "model": e.model, "detail": e.detail}
        for e in examples.get(key, [])
    ]


def format_report(report: ShadowReport) -> str:
    lines = [
        f"shadow records: {report.records}",
        f"  bytes unchanged: {report.bytes_equal}",
        f"  bytes changed: {report.bytes_changed}",
        f"  semantic changes: {report.semantic_changed}"
        + (f" ({report.truncated} with more paths than kept)" if report.truncated else ""),
        f"  would refuse: {report.would_refuse}",
        f"  could not render: {report.render_failed}",
    ]
    lines.append("by rule:" if report.by_rule else "by rule: none")
    for rule, count in _most_frequent(report.by_rule):
        lines.append(f"  {rule}: {count}")
        lines.extend(_examples(report.rule_examples.get(rule, [])))
    lines.append("by diff path:" if report.by_path else "by diff path: none")
    for key, count in _most_frequent(report.by_path):
        occurrences = report.path_occurrences[key]
        extra = f" ({occurrences} occurrences)" if occurrences != count else ""
        lines.append(f"  {key}: {count}{extra}")
        lines.extend(_examples(report.path_examples.get(key, [])))
    return "\n".join(lines)


def _examples(examples: list[Example]) -> list[str]:
    out = []
    for example in examples:
        operation = example.operation_id or "-"
        model = f" {example.model}" if example.model else ""
        out.append(f"    e.g. {operation} {example.api}{model}: {example.detail}")
    return out
