"""Consuming pydantic's lazy iterable validators, so the SDK request types really check
every nested part. Keep the TypeAdapter alive while draining: a ValidatorIterator dies
with it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def drain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: drain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | Iterator) or type(value).__name__ == "ValidatorIterator":
        return [drain(v) for v in value]
    return value
