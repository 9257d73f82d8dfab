"""Shadow diffs: what turngate would send against what was sent, in bytes and in JSON paths.

In shadow mode the client's bytes go upstream unchanged; turngate still parses, validates
and renders, and records one ``ShadowRecord``:

- a byte diff: equal, or the offset of the first differing byte and both lengths;
- a semantic diff: the JSON paths added, removed or changed, at most ``max_paths`` of them
  (the total is kept), each with example values clipped to ``max_example_chars`` characters
  (or replaced by their digest when ``values: hashed``);
- the rules the validator would have refused the request under, and its findings.

So one record stays under ``max_paths × (2 × max_example_chars + 200)`` characters of diff,
about 30 KB at the defaults (50 paths, 200 characters). Pure functions: the proxy stores the
records and ``policies/report.py`` aggregates them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from turngate.graph.codec import canonical_json, digest_bytes
from turngate.graph.validator import Verdict
from turngate.policies.config import ShadowPolicy

ChangeKind = Literal["added", "removed", "changed"]
MAX_PATH_CHARS = 200


@dataclass(frozen=True)
class ByteDiff:
    equal: bool
    sent_length: int
    would_send_length: int
    # Offset of the first byte that differs (the shorter length when one is a prefix).
    first_difference: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "equal": self.equal,
            "sentLength": self.sent_length,
            "wouldSendLength": self.would_send_length,
            "firstDifference": self.first_difference,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ByteDiff:
        return cls(
            equal=data["equal"],
            sent_length=data["sentLength"],
            would_send_length=data["wouldSendLength"],
            first_difference=data.get("firstDifference"),
        )


def byte_diff(sent: bytes, would_send: bytes) -> ByteDiff:
    if sent == would_send:
        return ByteDiff(True, len(sent), len(would_send))
    shorter = min(len(sent), len(would_send))
    first = next((i for i in range(shorter) if sent[i] != would_send[i]), shorter)
    return ByteDiff(False, len(sent), len(would_send), first)


@dataclass(frozen=True)
class PathChange:
    kind: ChangeKind
    path: str
    # Example values as canonical JSON (clipped or hashed); None where the path is absent.
    sent: str | None
    would_send: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": self.path,
            "sent": self.sent,
            "wouldSend": self.would_send,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PathChange:
        return cls(data["kind"], data["path"], data.get("sent"), data.get("wouldSend"))


@dataclass(frozen=True)
class SemanticDiff:
    changes: tuple[PathChange, ...] = ()
    # Every change found, including those past the cap.
    total: int = 0

    @property
    def equal(self) -> bool:
        return self.total == 0

    @property
    def truncated(self) -> bool:
        return self.total > len(self.changes)

    def to_json(self) -> dict[str, Any]:
        return {"total": self.total, "changes": [c.to_json() for c in self.changes]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SemanticDiff:
        return cls(tuple(PathChange.from_json(c) for c in data["changes"]), data["total"])


def semantic_diff(sent: Any, would_send: Any, policy: ShadowPolicy) -> SemanticDiff:
    """JSON paths where ``would_send`` differs from ``sent``: added, removed or changed."""
    walk = _DiffWalk(policy)
    walk.compare(sent, would_send, "")
    return SemanticDiff(tuple(walk.changes), walk.total)


class _DiffWalk:
    def __init__(self, policy: ShadowPolicy) -> None:
        self.policy = policy
        self.changes: list[PathChange] = []
        self.total = 0

    def compare(self, sent: Any, would: Any, path: str) -> None:
        if isinstance(sent, dict) and isinstance(would, dict):
            for key, value in sent.items():
                child = _child(path, key)
                if key in would:
                    self.compare(value, would[key], child)
                else:
                    self.note("removed", child, value, None)
            for key, value in would.items():
                if key not in sent:
                    self.note("added", _child(path, key), None, value)
        elif isinstance(sent, list) and isinstance(would, list):
            for index in range(max(len(sent), len(would))):
                child = f"{path}[{index}]"
                if index >= len(would):
                    self.note("removed", child, sent[index], None)
                elif index >= len(sent):
                    self.note("added", child, None, would[index])
                else:
                    self.compare(sent[index], would[index], child)
        elif not same_json(sent, would):
            self.note("changed", path, sent, would)

    def note(self, kind: ChangeKind, path: str, sent: Any, would: Any) -> None:
        self.total += 1
        if len(self.changes) < self.policy.max_paths:
            self.changes.append(
                PathChange(
                    kind,
                    clip(path or "$", MAX_PATH_CHARS),
                    None if kind == "added" else self.example(sent),
                    None if kind == "removed" else self.example(would),
                )
            )

    def example(self, value: Any) -> str:
        text = canonical_json(value)
        if self.policy.values == "hashed":
            return f"{digest_bytes(text)} ({len(text)} bytes)"
        return clip(text.decode(), self.policy.max_example_chars)


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values: ``true`` is not ``1``, but ``1`` is ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def outbound_bytes(raw: bytes, body: Any, rendered: Any) -> bytes:
    """What turngate sends when it enforces: the client's own bytes whenever the rendered
    JSON value equals the body (the proxy's rule), else the rendered JSON."""
    return raw if rendered == body else orjson.dumps(rendered)


@dataclass(frozen=True)
class ShadowRecord:
    api: str
    model: str | None
    bytes: ByteDiff
    semantic: SemanticDiff
    # What the validator would have refused the request under (empty: it would have sent it).
    rules: tuple[str, ...] = ()
    findings: tuple[str, ...] = ()
    # A rendering that failed (e.g. unsupported_in_target): no diff, just its rule.
    render_error: str | None = None
    operation_id: str | None = None
    recorded_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "api": self.api,
            "model": self.model,
            "bytes": self.bytes.to_json(),
            "semantic": self.semantic.to_json(),
            "rules": list(self.rules),
            "findings": list(self.findings),
            "renderError": self.render_error,
            "operationId": self.operation_id,
            "recordedAt": self.recorded_at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ShadowRecord:
        return cls(
            api=data["api"],
            model=data.get("model"),
            bytes=ByteDiff.from_json(data["bytes"]),
            semantic=SemanticDiff.from_json(data["semantic"]),
            rules=tuple(data.get("rules", ())),
            findings=tuple(data.get("findings", ())),
            render_error=data.get("renderError"),
            operation_id=data.get("operationId"),
            recorded_at=data.get("recordedAt"),
        )


def shadow_record(
    *,
    api: str,
    model: str | None,
    raw: bytes,
    body: Any,
    rendered: Any,
    verdict: Verdict | None,
    policy: ShadowPolicy,
    operation_id: str | None = None,
    now: float | None = None,
) -> ShadowRecord:
    """The record of one shadowed request: ``raw``/``body`` as sent, ``rendered`` as turngate
    would have rendered it."""
    would_send = outbound_bytes(raw, body, rendered)
    return ShadowRecord(
        api=api,
        model=model,
        bytes=byte_diff(raw, would_send),
        semantic=semantic_diff(body, rendered, policy),
        rules=_rules(verdict),
        findings=tuple(f.rule for f in verdict.findings) if verdict else (),
        operation_id=operation_id,
        recorded_at=now,
    )


def failed_render_record(
    *,
    api: str,
    model: str | None,
    raw: bytes,
    rule: str,
    verdict: Verdict | None,
    operation_id: str | None = None,
    now: float | None = None,
) -> ShadowRecord:
    """The record of a shadowed request turngate could not render (it would have refused)."""
    return ShadowRecord(
        api=api,
        model=model,
        bytes=ByteDiff(False, len(raw), 0, 0),
        semantic=SemanticDiff(),
        rules=(*_rules(verdict), rule),
        findings=tuple(f.rule for f in verdict.findings) if verdict else (),
        render_error=rule,
        operation_id=operation_id,
        recorded_at=now,
    )


def _rules(verdict: Verdict | None) -> tuple[str, ...]:
    if verdict is None or verdict.ready:
        return ()
    return tuple(dict.fromkeys(v.rule for v in verdict.violations))
