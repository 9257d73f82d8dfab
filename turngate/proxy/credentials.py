"""The caller's credential, reduced to a keyed hash: the only form turngate ever keeps.

Auth headers and Gemini's ``?key=`` pass to the configured upstream untouched; they are
never logged, traced or stored. Where an identity is needed (replays never cross
credentials) the manifest holds HMAC-SHA256 over them with a secret that is configured
(``TURNGATE_CREDENTIAL_SECRET``) or drawn per process.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping

from multidict import CIMultiDictProxy

# Request headers that carry a credential, lower-case (``api-key``: Azure OpenAI's).
CREDENTIAL_HEADERS: tuple[str, ...] = ("authorization", "x-api-key", "x-goog-api-key", "api-key")
# Query parameters that carry a credential (Gemini accepts ?key=).
CREDENTIAL_QUERY: tuple[str, ...] = ("key",)


def process_secret(configured: str | None) -> bytes:
    if configured:
        return configured.encode()
    return secrets.token_bytes(32)


def credential_hash(
    secret: bytes, headers: CIMultiDictProxy[str], query: Mapping[str, str]
) -> str | None:
    """``hmac-sha256:<hex>`` over every credential the request carries; None without any."""
    parts: list[str] = []
    for name in CREDENTIAL_HEADERS:
        value = headers.get(name)
        if value is not None:
            parts.append(f"{name}\x00{value}")
    for name in CREDENTIAL_QUERY:
        value = query.get(name)
        if value is not None:
            parts.append(f"?{name}\x00{value}")
    if not parts:
        return None
    mac = hmac.new(secret, "\x01".join(parts).encode(), hashlib.sha256)
    return "hmac-sha256:" + mac.hexdigest()
