"""Logging for the proxy: an access log without credentials, and a scrubbing filter.

turngate never passes a header value or a raw query string to a logger. The access log
writes the method, the path with credential query values replaced, the status, the time
and the operation id. ``SecretFilter`` sits on the output handler as a second line of
defence: it rewrites anything that still looks like a key (a Bearer token, ``key=``,
``x-api-key: …``, ``sk-…``, ``AIza…``, the configured secrets) before a record is written.
It is telemetry's ``RedactionFilter``: the text log, the dispatch JSON log, span details
and captured content share one redaction path (turngate/telemetry/redaction.py).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Sequence

from aiohttp.abc import AbstractAccessLogger
from aiohttp.web import BaseRequest, StreamResponse

from turngate.proxy.credentials import CREDENTIAL_QUERY
from turngate.telemetry.logs import RedactionFilter
from turngate.telemetry.redaction import DEFAULT_REDACTOR, REDACTED, Redactor

log = logging.getLogger("turngate.proxy")
access_log = logging.getLogger("turngate.access")

__all__ = ["REDACTED", "AccessLogger", "SecretFilter", "configure_logging", "redact_path", "scrub"]

# The credential parameters, and the names clients put other secrets under: the record itself
# must not hold them (a handler other than ours would write it unfiltered).
_SECRET_QUERY_NAMES = (*CREDENTIAL_QUERY, "api_key", "api-key", "apikey", "access_token", "token")
_QUERY_SECRET = re.compile(
    r"(?i)([?&](?:" + "|".join(re.escape(n) for n in _SECRET_QUERY_NAMES) + r")=)[^&#\s\"']*"
)


def redact_path(path_qs: str) -> str:
    """A path with the values of credential query parameters replaced."""
    if "?" not in path_qs:
        return path_qs
    return _QUERY_SECRET.sub(r"\1" + REDACTED, path_qs)


def scrub(text: str) -> str:
    return DEFAULT_REDACTOR.scrub(text)


SecretFilter = RedactionFilter


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


def configure_logging(level: str, *, secrets: Sequence[str] = ()) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactionFilter(Redactor(secrets)))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
