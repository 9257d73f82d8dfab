"""The HTTP server's own limits, the same for ``turngate serve`` and the tests' servers.

aiohttp answers 400 (and closes) when the request line exceeds ``max_line_size``, one header
line ``max_field_size``, or the header count ``max_headers``. Its keep-alive timer starts
when a connection opens and again after each response, and closes a connection still
waiting for a complete request line and headers when it fires: ``keepalive_timeout`` is
therefore the header deadline too (a slowloris client trickling headers byte by byte is
cut off after ``Settings.header_timeout`` seconds). The body deadline is in body.py; after
an answer sent before the body was read in full (408, 413), aiohttp reads and drops the rest
for at most ``LINGERING_TIME`` seconds (so the client can still read the answer), then closes.
"""

from __future__ import annotations

from typing import Any

from turngate.settings import Settings

MAX_LINE_SIZE = 8190
MAX_FIELD_SIZE = 16384
MAX_HEADERS = 128
LINGERING_TIME = 2.0


def server_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for ``web.run_app`` / ``AppRunner`` (passed to each RequestHandler)."""
    return {
        "max_line_size": MAX_LINE_SIZE,
        "max_field_size": MAX_FIELD_SIZE,
        "max_headers": MAX_HEADERS,
        "keepalive_timeout": settings.header_timeout,
        "lingering_time": LINGERING_TIME,
    }
