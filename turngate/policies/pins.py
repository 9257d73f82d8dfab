"""Adapter version pins, and the pause when an adapter meets a block kind it does not know.

Each API's adapter has versions; the registry maps (api, version) to the package whose
``ADAPTER`` implements it and to the graph block kinds that version knows. Today every API
has version "1", the package in ``turngate/adapters/<api>/``. A second version is a second
package plus a registry row (``register``); the first stays where it is, so both run side by
side and a route's policy pins one (``adapter_versions``), e.g. to roll back.

A graph stored by a newer turngate may hold a block kind an older pinned adapter does not
know. Such a conversation is paused (409 ``conversation_paused``): the adapter never drops
the block nor joins it into text. The same holds for a stored graph that does not load, or
loads into something other than what was stored (its sequence digest differs).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pydantic

from turngate.adapters.base import Adapter
from turngate.errors import ConversationPaused
from turngate.graph.model import BLOCK_KINDS, ApiName, MessageSequence
from turngate.graph.serialize import from_json
from turngate.policies.config import Policy

# Every kind the v1 graph model can hold, ``unknown`` included (a native part the adapter
# could not map: refused by the validator as ``unknown_kind``, not a pause).
GRAPH_V1_KINDS: frozenset[str] = BLOCK_KINDS | {"unknown"}


@dataclass(frozen=True)
class AdapterVersion:
    api: ApiName
    version: str
    # The package whose module-level ``ADAPTER`` implements this version.
    module: str
    known_kinds: frozenset[str] = GRAPH_V1_KINDS

    @property
    def id(self) -> str:
        return f"{self.api}@{self.version}"

    def adapter(self) -> Adapter:
        found: Adapter = importlib.import_module(self.module).ADAPTER
        if found.version != self.version:
            raise LookupError(
                f"{self.module}.ADAPTER is version {found.version}, not {self.version}"
            )
        return found


BUILTIN_VERSIONS: tuple[AdapterVersion, ...] = (
    AdapterVersion("openai_chat", "1", "turngate.adapters.openai_chat"),
    AdapterVersion("openai_responses", "1", "turngate.adapters.openai_responses"),
    AdapterVersion("anthropic", "1", "turngate.adapters.anthropic"),
    AdapterVersion("gemini", "1", "turngate.adapters.gemini"),
)


class AdapterRegistry:
    def __init__(self, versions: Iterable[AdapterVersion] = BUILTIN_VERSIONS):
        self._versions: dict[tuple[str, str], AdapterVersion] = {}
        for version in versions:
            key = (version.api, version.version)
            if key in self._versions:
                raise ValueError(f"adapter {version.id} is registered twice")
            self._versions[key] = version

    def register(self, version: AdapterVersion) -> AdapterRegistry:
        """A registry that also holds ``version``."""
        return AdapterRegistry([*self._versions.values(), version])

    def versions(self, api: ApiName) -> list[AdapterVersion]:
        return sorted(
            (v for v in self._versions.values() if v.api == api),
            key=lambda v: _version_key(v.version),
        )

    def current(self, api: ApiName) -> AdapterVersion:
        versions = self.versions(api)
        if not versions:
            raise LookupError(f"no adapter is registered for {api}")
        return versions[-1]

    def get(self, api: ApiName, version: str) -> AdapterVersion:
        found = self._versions.get((api, version))
        if found is None:
            known = ", ".join(v.version for v in self.versions(api)) or "none"
            raise LookupError(f"{api} has no adapter version {version!r} (registered: {known})")
        return found

    def pinned(self, api: ApiName, policy: Policy) -> AdapterVersion:
        """The version ``policy`` pins for ``api``, else the current one."""
        version = policy.adapter_versions.get(api)
        return self.current(api) if version is None else self.get(api, version)

    def common_kinds(self, api: ApiName) -> frozenset[str]:
        """The kinds every registered version of ``api`` knows. A graph holding any other kind
        is one an older version must not render: the proxy stores it, so that a conversation
        rolled back to that version pauses instead of losing the block."""
        versions = self.versions(api)
        if not versions:
            return frozenset()
        return frozenset.intersection(*(v.known_kinds for v in versions))

    def unknown_pins(self, policies: Iterable[Policy]) -> list[str]:
        """Pins naming no registered version: checked at start, so a typo fails fast."""
        problems: list[str] = []
        for policy in policies:
            for api, version in policy.adapter_versions.items():
                try:
                    self.get(api, version)
                except LookupError as exc:
                    problems.append(str(exc))
        return sorted(set(problems))


def _version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in version.split("."))


def ensure_known(seq: MessageSequence, version: AdapterVersion) -> None:
    """Pause unless every block of ``seq`` is of a kind ``version`` knows."""
    if seq.outline is not None and seq.outline.kinds() <= version.known_kinds:
        return
    for message, block in seq.blocks():
        parts: tuple[Any, ...] = getattr(block, "content", ())
        for item in (block, *parts):
            if item.kind not in version.known_kinds:
                raise _paused(version, item.kind, message.location, item.id)


def kinds_in(seq: MessageSequence) -> set[str]:
    """Every block kind in ``seq``, the parts of tool results included."""
    if seq.outline is not None:
        return seq.outline.kinds()
    kinds: set[str] = set()
    for _message, block in seq.blocks():
        kinds.add(block.kind)
        kinds.update(part.kind for part in getattr(block, "content", ()))
    return kinds


def load_for(version: AdapterVersion, data: Mapping[str, Any]) -> MessageSequence:
    """A stored MessageSequence.v1 (its JSON form) loaded for ``version``, or a pause."""
    for kind, location, block_id in _stored_blocks(data):
        if kind not in version.known_kinds:
            raise _paused(version, kind, location, block_id)
    try:
        seq = from_json(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConversationPaused(
            f"turngate: conversation paused: its stored graph does not load for adapter "
            f"{version.id} ({where}: {first['msg']}); roll forward to the turngate that "
            "stored it, or start a new conversation"
        ) from None
    ensure_known(seq, version)
    stored = data.get("sequenceDigest")
    if stored is not None and stored != seq.sequence_digest:
        raise ConversationPaused(
            f"turngate: conversation paused: its stored graph holds content adapter "
            f"{version.id} cannot represent (sequence digest {stored} loads as "
            f"{seq.sequence_digest}); roll forward to the turngate that stored it, or start a "
            "new conversation"
        )
    return seq


def _paused(
    version: AdapterVersion, kind: str, location: str | None, block_id: str | None
) -> ConversationPaused:
    where = f" ({location})" if location else ""
    return ConversationPaused(
        f"turngate: conversation paused: block '{block_id}'{where} is of kind '{kind}', which "
        f"adapter {version.id} does not know; roll forward to a turngate that knows it, or "
        "start a new conversation"
    )


def _stored_blocks(data: Mapping[str, Any]) -> Iterator[tuple[str, str | None, str | None]]:
    """(kind, message location, block id) of every block and result part in a stored graph."""
    messages = data.get("messages")
    if not isinstance(messages, list):
        return
    for message in messages:
        if not isinstance(message, dict):
            continue
        location = f"{message.get('origin', 'messages')}[{message.get('index')}]"
        for block in message.get("blocks") or ():
            # A tool result's parts are blocks too.
            content = block.get("content") if isinstance(block, dict) else None
            for item in (block, *(content if isinstance(content, list) else ())):
                if isinstance(item, dict):
                    block_id = item.get("id")
                    yield (
                        str(item.get("kind")),
                        location,
                        (block_id if isinstance(block_id, str) else None),
                    )
