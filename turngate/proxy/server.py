"""Entry point of `turngate serve`."""

from __future__ import annotations

from turngate.settings import Settings


def serve(settings: Settings) -> None:
    raise SystemExit("turngate serve: the proxy is not in this build yet (see issue 4)")
