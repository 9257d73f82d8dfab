"""One structured JSON line per dispatch, and a redaction filter for every record.

    logger = configure_dispatch_log(settings.log_level, secrets=[credential_secret])
    log_dispatch(DispatchLine(operation_id=..., route=..., api=..., verdict="READY", ...))

    {"ts":"2025-01-01T00:00:00.000Z","level":"info","logger":"turngate.dispatch","msg":"dispatch",
     "operation_id":"op_…","route":"/openai/v1/chat/completions","api":"openai_chat",
     "verdict":"READY","rule_codes":[],"state":"COMMITTED","attempt":1,"upstream_status":200,
     "duration_ms":812.4,"ttfb_ms":301.2,"upstream_ms":790.0,"mode":"enforce"}

A line is WARNING when the outcome is UNKNOWN, the upstream answered 5xx, or the dispatch
failed without an upstream status (a transport failure); INFO otherwise, refusals included.
The logger's level comes from the settings (``--log-level``), so ``warning`` keeps only the
lines an operator must look at. ``RedactionFilter`` masks credentials (redaction.py) in
the message, its arguments, the dispatch fields and the traceback of every record that
passes the handler it sits on; put it on any handler that writes turngate's records.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

import orjson

from turngate.telemetry.redaction import DEFAULT_REDACTOR, Redactor

DISPATCH_LOGGER = "turngate.dispatch"
# The LogRecord attribute that carries a dispatch line's fields.
FIELDS = "dispatch"


@dataclass(frozen=True, slots=True)
class DispatchLine:
    route: str
    api: str | None
    # READY | WAITING | REJECTED, or SHADOWED when a shadow route let a refusal through.
    verdict: str
    duration_ms: float
    operation_id: str | None = None
    rule_codes: Sequence[str] = ()
    # The dispatch state at the end of the request; None when nothing was claimed.
    state: str | None = None
    attempt: int | None = None
    upstream_status: int | None = None
    ttfb_ms: float | None = None
    upstream_ms: float | None = None
    mode: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "operation_id": self.operation_id,
            "route": self.route,
            "api": self.api,
            "verdict": self.verdict,
            "rule_codes": list(dict.fromkeys(self.rule_codes)),
            "state": self.state,
            "attempt": self.attempt,
            "upstream_status": self.upstream_status,
            "duration_ms": _ms(self.duration_ms),
            "ttfb_ms": _ms(self.ttfb_ms),
            "upstream_ms": _ms(self.upstream_ms),
            "mode": self.mode,
        }

    @property
    def level(self) -> int:
        if self.state == "UNKNOWN":
            return logging.WARNING
        if self.upstream_status is not None and self.upstream_status >= 500:
            return logging.WARNING
        if self.state == "FAILED" and (self.upstream_status is None or self.upstream_status < 300):
            # No answer at all, or a 2xx that ended without one: a stream cut short, an
            # answer refused, a client gone.
            return logging.WARNING
        return logging.INFO


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def log_dispatch(line: DispatchLine, logger: logging.Logger | None = None) -> None:
    chosen = logger if logger is not None else logging.getLogger(DISPATCH_LOGGER)
    level = line.level
    if chosen.isEnabledFor(level):
        chosen.log(level, "dispatch", extra={FIELDS: line.to_json()})


class JsonFormatter(logging.Formatter):
    """Every record as one JSON object on one line; a dispatch record's fields inline."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = record.__dict__.get(FIELDS)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            out["exc"] = record.exc_text
        return orjson.dumps(out, default=str).decode()


def _timestamp(created: float) -> str:
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{whole}.{int(created % 1 * 1000):03d}Z"


class RedactionFilter(logging.Filter):
    def __init__(self, redactor: Redactor = DEFAULT_REDACTOR) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        scrub = self.redactor.scrub
        message = record.getMessage()
        cleaned = scrub(message)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        fields = record.__dict__.get(FIELDS)
        if fields is not None:
            record.__dict__[FIELDS] = self.redactor.scrub_value(fields)
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = scrub(record.stack_info)
        return True


def dispatch_log_handler(
    *, stream: IO[str] | None = None, secrets: Sequence[str] = ()
) -> logging.Handler:
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RedactionFilter(Redactor(secrets)))
    return handler


def configure_dispatch_log(
    level: str, *, stream: IO[str] | None = None, secrets: Sequence[str] = ()
) -> logging.Logger:
    """The ``turngate.dispatch`` logger with its own JSON handler at ``level``; its records
    do not also go to the root logger's text handler."""
    logger = logging.getLogger(DISPATCH_LOGGER)
    logger.handlers[:] = [dispatch_log_handler(stream=stream, secrets=secrets)]
    logger.propagate = False
    logger.setLevel(level.upper())
    return logger
