"""Logging for the proxy: an access log without credentials, and a scrubbing filter.

turngate never passes a header value or a raw query string to a logger. The access log
writes the method, the path with credential query values replaced, the status, the time
and the operation id. ``SecretFilter`` sits on the output handler as a second line of
defence: it rewrites anything that still looks like a key (a Bearer token, ``key=``,
``x-api-key: …``, ``sk-…``) before a record is written.
"""

from __future__ import annotations

import logging
import re
import sys

from aiohttp.abc import AbstractAccessLogger
from aiohttp.web import BaseRequest, StreamResponse

from turngate.proxy.credentials import CREDENTIAL_QUERY

log = logging.getLogger("turngate.proxy")
access_log = logging.getLogger("turngate.access")

REDACTED = "[REDACTED]"
_QUERY_SECRET = re.compile(
    r"(?i)([?&](?:" + "|".join(re.escape(n) for n in CREDENTIAL_QUERY) + r")=)[^&#\s\"']*"
)
_SECRET_PATTERNS = (
    _QUERY_SECRET,
    re.compile(r"(?i)(bearer\s+)[^\s\"',;]+"),
    re.compile(
        r"(?i)((?:authorization|x-api-key|x-goog-api-key|api[_-]?key)[\"']?\s*[:=]\s*[\"']?)"
        r"[^\s\"',;]+"
    ),
    re.compile(r"()\bsk-[A-Za-z0-9_\-]{8,}"),
)


def redact_path(path_qs: str) -> str:
    """A path with the values of credential query parameters replaced."""
    if "?" not in path_qs:
        return path_qs
    return _QUERY_SECRET.sub(r"\1" + REDACTED, path_qs)


def scrub(text: str) -> str:
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(r"\1" + REDACTED, text)
    return text


class SecretFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = scrub(message)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
        return True


class AccessLogger(AbstractAccessLogger):
    """One line per request; never headers, never a credential query value."""

    @property
    def enabled(self) -> bool:
        # aiohttp skips ``log`` entirely when this is False (e.g. --log-level warning).
        return self.logger.isEnabledFor(logging.INFO)

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        operation = response.headers.get("Turngate-Operation-Id", "-")
        rejection = response.headers.get("Turngate-Rejection")
        self.logger.info(
            "%s %s %d %.1fms op=%s%s",
            request.method,
            redact_path(request.raw_path),
            response.status,
            time * 1000,
            operation,
            f" rejected={rejection}" if rejection else "",
        )


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(SecretFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
