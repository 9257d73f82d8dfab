"""Addresses the provider hands the client come back through turngate.

Two answers name an address on the provider's own host that an SDK then calls as given:

    Gemini's upload start      X-Goog-Upload-URL: where to send the file's bytes
    an Anthropic message batch "results_url": where to read its results (the anthropic SDK's
                               ``messages.batches.results`` reads it, not the base URL)

Called as given, they would leave the pod beside the sidecar: past its egress proxy and
network policy, unseen by its telemetry, and past the check of a batch input file
(proxy/gemini_uploads.py). turngate answers each below its own prefix instead; what is sent
there is relayed to the provider's address unchanged.
"""

from __future__ import annotations

import re

from multidict import CIMultiDict
from yarl import URL

from turngate.adapters.batches import ANTHROPIC_BATCHES
from turngate.proxy.routes import Prefix, RouteMatch

UPLOAD_URL = "X-Goog-Upload-URL"
# A batch object, or a page of them, is a few hundred bytes each; past this, relayed as is.
ADDRESSED_BODY_LIMIT = 4 * 1024 * 1024


def back_through(headers: CIMultiDict[str], prefix: Prefix, client_origin: str) -> None:
    """Point an upload address of ``prefix``'s upstream in ``headers`` at the same address
    below ``prefix``'s mount at ``client_origin`` (``scheme://host[:port]``, as the client
    reached turngate). An address elsewhere is left as the provider wrote it."""
    value = headers.get(UPLOAD_URL)
    if value is None:
        return
    below = _below(URL(value, encoded=True), prefix)
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


def names_results(route: RouteMatch) -> bool:
    """Whether ``route`` answers Anthropic message batches (created, retrieved, listed,
    cancelled), whose ``results_url`` names the provider's host."""
    path = route.upstream_path
    return (
        route.provider == "anthropic"
        and (path == ANTHROPIC_BATCHES or path.startswith(ANTHROPIC_BATCHES + "/"))
        and not path.endswith("/results")
    )


def results_back_through(body: bytes, prefix: Prefix, client_origin: str) -> bytes:
    """``body`` with each ``results_url`` below ``prefix``'s upstream root pointed at the
    same address below ``prefix``'s mount at ``client_origin``."""
    root = str(prefix.upstream).rstrip("/") + prefix.upstream_root
    pattern = re.compile(rb'("results_url"\s*:\s*")' + re.escape(root.encode()) + rb"(?=/)")
    client_root = (client_origin + prefix.mount).encode()
    return pattern.sub(lambda found: found[1] + client_root, body)
