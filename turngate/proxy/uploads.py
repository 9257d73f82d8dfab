"""Resumable uploads come back through turngate.

Gemini's Files API uploads in two steps: the client starts an upload, the provider answers
with the address to send the file's bytes to (``X-Goog-Upload-URL``), and the client sends
them there. That address is the provider's own host, so the bytes would leave the pod
beside the sidecar: past its egress proxy and network policy, unseen by its telemetry,
and past the check of a batch input file (proxy/batches.py). turngate answers the address
below its own prefix instead; what is sent there is relayed to the provider's address
unchanged.
"""

from __future__ import annotations

from multidict import CIMultiDict
from yarl import URL

from turngate.proxy.routes import Prefix

UPLOAD_URL = "X-Goog-Upload-URL"


def back_through(headers: CIMultiDict[str], prefix: Prefix, client_origin: str) -> None:
    """Point an upload address of ``prefix``'s upstream in ``headers`` at the same address
    below ``prefix``'s mount at ``client_origin`` (``scheme://host[:port]``, as the client
    reached turngate). An address elsewhere is left as the provider wrote it."""
    value = headers.get(UPLOAD_URL)
    if value is None:
        return
    below = _below(URL(value), prefix)
    if below is not None:
        headers[UPLOAD_URL] = client_origin + prefix.mount + below


def _below(address: URL, prefix: Prefix) -> str | None:
    """``address`` (path and query, as encoded) below ``prefix``'s upstream root, or None
    when it is not there."""
    base = prefix.upstream
    if not address.is_absolute():
        return None
    if (address.scheme, address.host, address.port) != (base.scheme, base.host, base.port):
        return None
    root = base.raw_path.rstrip("/") + prefix.upstream_root
    path = address.raw_path
    if not path.startswith(root + "/"):
        return None
    query = f"?{address.raw_query_string}" if address.raw_query_string else ""
    return path[len(root) :] + query
