"""A Gemini Files API upload: a batch input file is checked before the upload is finalized.

    start ("X-Goog-Upload-Command: start")          relayed; the answer's address points
                                                    back here (proxy/addresses.py)
    the bytes in one piece ("upload, finalize")     a batch input file: checked, then
                                                    relayed or refused
    the bytes in pieces ("upload" ... "upload, finalize")
        a first piece that may start a batch file   kept, and relayed
        each next piece of a kept upload            kept, and relayed
        the last piece                              the whole file checked: relayed, or
                                                    refused and never sent

google-genai sends a file over 8 MB in pieces, each answered before the next is sent. The
provider makes no file until the last piece finalizes the upload, so a refused last piece
leaves the earlier ones in an upload that is never finalized: no file, and no batch can
read it. The pieces kept are bounded by ``--max-body-bytes`` in all (one upload's and the
others' together); an upload that no longer fits is dropped, and relayed unchecked.
"""

from __future__ import annotations

import logging

from aiohttp import web

from turngate.adapters.batches import gemini_file
from turngate.proxy.batches import head_read, judged_batch, unchecked
from turngate.proxy.body import read_body
from turngate.proxy.observe import observe_dispatch
from turngate.proxy.routes import RouteMatch
from turngate.proxy.services import Services
from turngate.proxy.upstream import relay

log = logging.getLogger("turngate.proxy")
OUTGROWN = "the file is larger than --max-body-bytes, or its pieces no longer fit in it"


async def checked_gemini_upload(
    request: web.Request, route: RouteMatch, services: Services
) -> web.StreamResponse:
    said = request.headers.get("X-Goog-Upload-Command", "")
    command = {word.strip().lower() for word in said.split(",")}
    offset = _offset(request)
    if "upload" not in command or offset is None:
        return await relay(request, route, services.session)
    kept, key, final = services.kept_pieces, route.upstream_path_qs, "finalize" in command
    if offset == 0:
        kept.drop(key)  # the upload starts again
        head = await head_read(request, lambda read: b"\n" in read)
        if not (final or _may_start_a_batch_file(head)):
            return await relay(request, route, services.session, head=head)
    elif not kept.holds(key) or offset > kept.received(key):
        # A later piece of a file that is no batch input file; or of one whose pieces were
        # dropped (counted then), or one after a gap.
        if kept.drop(key):
            unchecked(request, "gemini", "a piece of the file came out of order")
        return await relay(request, route, services.session)
    else:
        # A piece sent again (its answer lost) replaces what was kept from its offset on.
        kept.cut(key, offset)
        head = b""
    room = services.settings.max_body_bytes - offset
    declared = request.content_length
    if declared is None or declared > room:
        if kept.drop(key) or _starts_a_batch_file(head):
            unchecked(request, "gemini", OUTGROWN)
        return await relay(request, route, services.session, head=head)
    raw = head + await read_body(request, room, only_json=False)
    if not final:
        for dropped in kept.add(key, raw):
            unchecked(request, "gemini", OUTGROWN)
            log.warning("the pieces of the upload %s are no longer kept", dropped.split("?")[0])
        return await relay(request, route, services.session, read=raw)
    entries = gemini_file(kept.take(key) + raw if offset else raw)
    if entries is None:
        return await relay(request, route, services.session, read=raw)
    with observe_dispatch(request, "gemini") as observer:
        try:
            response = await judged_batch(
                request, route, services, observer, raw=raw, entries=entries
            )
        finally:
            observer.log()
    if not response.prepared:
        # The upload is over: without the status, the SDK sends the bytes again thrice.
        response.headers.setdefault("X-Goog-Upload-Status", "final")
    return response


def _offset(request: web.Request) -> int | None:
    said = request.headers.get("X-Goog-Upload-Offset", "0").strip()
    return int(said) if said.isdigit() and said.isascii() else None


def _may_start_a_batch_file(head: bytes) -> bool:
    """Whether the file that starts with ``head`` may be a Gemini batch input file: nothing
    but white space yet, or a JSON object first (a piece may end anywhere, even one byte in,
    so what the first line holds cannot be waited for)."""
    start = head.lstrip()
    return not start or start.startswith(b"{")


def _starts_a_batch_file(head: bytes) -> bool:
    """Whether the file that starts with ``head`` looks like a Gemini batch input file: its
    first line is a batch request, or the start of one."""
    first = head.lstrip().partition(b"\n")[0]
    return bool(gemini_file(first)) or (first.lstrip().startswith(b"{") and b'"request"' in first)
