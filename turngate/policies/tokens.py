"""Counting the tokens of a final rendered request body, offline.

What is counted is the body as it will be sent, whatever the API:

- every string value and every object key, with the model's encoding (toktok-rs, exact
  o200k_base / cl100k_base); the provider's own chat template replaces the JSON keys with its
  role markers, which cost about as much;
- 1 token per object and per number, boolean or null (structure; independent of the value, so
  changing ``max_tokens`` does not change the count);
- media by estimate (``MediaEstimates``): a fixed charge per image, and for audio, video and
  files the larger of a fixed charge and the decoded size of inline data divided by a rate;
- opaque payloads: Anthropic's thinking ``signature`` only vouches for the thinking text beside
  it and costs 0; encrypted reasoning carried back (Responses ``encrypted_content``, Anthropic
  ``redacted_thinking.data``, Gemini ``thoughtSignature``, which Gemini does bill as input) is
  charged by decoded size;
- once per request that defines tools, the model entry's ``tool_overhead_tokens``.

For an estimate (``counting: estimate``) the text and structure tokens are multiplied by the
entry's ``factor`` (rounded up).
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson
import toktok  # type: ignore[import-untyped]

from turngate.graph.codec import right_sized
from turngate.policies.config import Encoding, MediaEstimates, ModelEntry

MediaKind = Literal["image", "audio", "video", "file"]

_IMAGE_TYPES = frozenset({"image_url", "input_image", "image"})
_AUDIO_TYPES = frozenset({"input_audio"})
_FILE_TYPES = frozenset({"file", "input_file", "container_upload", "document"})
# Anthropic documents whose source is text are counted as text.
_TEXT_SOURCES = frozenset({"text", "content"})
_GEMINI_MEDIA_KEYS = frozenset({"inlineData", "inline_data", "fileData", "file_data"})
_MEDIA_TYPES = _IMAGE_TYPES | _AUDIO_TYPES | _FILE_TYPES
# Opaque payloads that stand for model input (reasoning) and are charged by decoded size.
_ENCRYPTED_KEYS = frozenset({"encrypted_content", "thoughtSignature", "thought_signature"})
# Field names whose string values may be opaque rather than text (see _is_signature/_encrypted).
_OPAQUE_NAMES = _ENCRYPTED_KEYS | {"signature", "data"}
# A long run of base64 (or a data: URL) where no known field says what it is: binary, not text.
_BINARY = re.compile(r"(?:data:[\w.+-]+/[\w.+-]+;base64,)?[A-Za-z0-9+/_-]{1024,}={0,2}")


@dataclass(frozen=True)
class TokenCount:
    text: int
    structure: int
    media: int
    encrypted: int
    tool_overhead: int
    factor: float
    counting: Literal["exact", "estimate"]

    @property
    def total(self) -> int:
        scaled = math.ceil((self.text + self.structure) * self.factor - 1e-9)
        return scaled + self.media + self.encrypted + self.tool_overhead

    @property
    def estimated(self) -> bool:
        return self.counting == "estimate"


def count_request(
    body: Mapping[str, Any],
    entry: ModelEntry,
    media: MediaEstimates,
    cache: TokenCache | None = None,
) -> TokenCount:
    """The tokens of ``body`` (the final rendered request) for the model ``entry`` describes."""
    walk = _Walk(media)
    tools = body.get("tools")
    if cache is None:
        walk.visit(body, None)
        text = sum(count_texts(walk.texts, entry.encoding))
    else:
        text = cache.count_body(walk, body, entry.encoding)
    return TokenCount(
        text=text,
        structure=walk.structure,
        media=walk.media,
        encrypted=walk.encrypted,
        tool_overhead=entry.tool_overhead_tokens if isinstance(tools, list) and tools else 0,
        factor=entry.factor if entry.counting == "estimate" else 1.0,
        counting=entry.counting,
    )


def count_texts(texts: list[str], encoding: Encoding) -> list[int]:
    """Exact token counts of ``texts`` in an OpenAI encoding (special tokens count as text)."""
    if not texts:
        return []
    counts: list[int] = toktok.batch_count(texts, encoding)
    return counts


# The encodings load_encodings has loaded in this process.
_LOADED: set[Encoding] = set()


def load_encodings(encodings: tuple[Encoding, ...] = ("o200k_base",)) -> None:
    """Load the vocabularies now, not in a request's count. o200k (about 0.3 s, 63 MiB) is
    what every model but the older GPT-4 and GPT-3.5 ones counts with, so it is loaded at
    start; cl100k (0.1 s, 46 MiB) waits for a model that needs it (``encoding_loaded``)."""
    for encoding in encodings:
        count_texts(["turngate"], encoding)
        _LOADED.add(encoding)


def encoding_loaded(encoding: Encoding) -> bool:
    """Whether ``load_encodings`` loaded ``encoding``; a count without it loads it on the spot."""
    return encoding in _LOADED


# An item's cached count: its text tokens, structure, media and encrypted tokens.
_ItemCount = tuple[int, int, int, int]


class TokenCache:
    """Token counts of strings counted before, per encoding, up to ``max_chars`` characters.

    A conversation sends its whole history again with every turn, so most strings of a
    request (and every JSON key) were counted on an earlier one; only the new ones are
    tokenized. The oldest entries are dropped first. Not thread-safe: one per event loop.

    ``count_body`` also keeps each item of the body's top-level arrays (a message, a tool)
    by its JSON bytes, up to ``max_chars`` bytes of them: an item sent before is not walked
    again. Its count is what the walk would find, so a request's count never depends on
    what the cache holds.
    """

    def __init__(self, max_chars: int = 16_000_000, max_string: int = 1_000_000) -> None:
        self.max_chars = max_chars
        self.max_string = max_string
        self.chars = 0
        self._counts: dict[Encoding, dict[str, int]] = {}
        # (encoding, the array's key, the item's JSON) -> its count, under ``_media``.
        self._items: dict[tuple[Encoding, str | None, bytes], _ItemCount] = {}
        self.item_chars = 0
        self._media: MediaEstimates | None = None

    def count_body(self, walk: _Walk, body: Mapping[str, Any], encoding: Encoding) -> int:
        """Walk ``body`` into ``walk`` (structure, media, encrypted) and return its text
        tokens; the items of its top-level arrays come from the cache when seen before."""
        if walk.estimates is not self._media:
            # Other estimates (a policy reload) count media differently.
            self._items.clear()
            self.item_chars = 0
            self._media = walk.estimates
        cached_text = 0

        def items(values: list[Any], key: str | None) -> None:
            nonlocal cached_text
            for item in values:
                if type(item) is not dict:
                    walk._array([item], key)
                    continue
                try:
                    dumped = orjson.dumps(item)
                except TypeError:  # orjson.JSONEncodeError; not from a parsed body
                    walk._object(item, key)
                    continue
                found = self._items.get((encoding, key, dumped))
                if found is None:
                    found = self._item(walk.estimates, item, key, encoding)
                    if len(dumped) <= self.max_string:
                        self._items[(encoding, key, right_sized(dumped))] = found
                        self.item_chars += len(dumped)
                cached_text += found[0]
                walk.structure += found[1]
                walk.media += found[2]
                walk.encrypted += found[3]

        if isinstance(body, dict):
            walk._object(body, None, items)
        else:
            walk.visit(body, None)
        text = self.total(walk.texts, encoding) + cached_text
        while self.item_chars > self.max_chars and self._items:
            oldest = next(iter(self._items))
            del self._items[oldest]
            self.item_chars -= len(oldest[2])
        return text

    def _item(
        self, media: MediaEstimates, item: dict[str, Any], key: str | None, encoding: Encoding
    ) -> _ItemCount:
        walk = _Walk(media)
        walk._object(item, key)
        return (self.total(walk.texts, encoding), walk.structure, walk.media, walk.encrypted)

    def total(self, texts: list[str], encoding: Encoding) -> int:
        counts = self._counts.setdefault(encoding, {})
        # Every string of a request is looked up, most of them found: one C-level pass.
        known: list[int | None] = list(map(counts.get, texts))
        if None not in known:
            return sum(known)  # type: ignore[arg-type]
        total = 0
        missing: dict[str, int] = {}
        for text, count in zip(texts, known, strict=True):
            if count is None:
                missing[text] = missing.get(text, 0) + 1
            else:
                total += count
        fresh = count_texts(list(missing), encoding)
        for (text, times), count in zip(missing.items(), fresh, strict=True):
            total += count * times
            if len(text) <= self.max_string:
                counts[text] = count
                self.chars += len(text)
        self._evict(counts)
        return total

    def _evict(self, counts: dict[str, int]) -> None:
        while self.chars > self.max_chars and counts:
            oldest = next(iter(counts))
            del counts[oldest]
            self.chars -= len(oldest)


class _Walk:
    def __init__(self, media: MediaEstimates) -> None:
        self.estimates = media
        self.texts: list[str] = []
        self.structure = 0
        self.media = 0
        self.encrypted = 0

    def visit(self, value: Any, key: str | None) -> None:
        if isinstance(value, dict):
            self._object(value, key)
        elif isinstance(value, list):
            self._array(value, key)
        elif isinstance(value, str):
            self._string(value)
        else:
            self.structure += 1

    def _string(self, value: str) -> None:
        if len(value) >= 1024 and _BINARY.fullmatch(value):
            self.media += self._media_tokens("file", value)
        else:
            self.texts.append(value)

    def _object(
        self,
        obj: dict[str, Any],
        key: str | None,
        arrays: Callable[[list[Any], str | None], None] | None = None,
    ) -> None:
        # The hot loop of admission: plain types are handled inline, the rest by ``visit``.
        # ``arrays`` walks this object's arrays instead (TokenCache.count_body).
        self.structure += 1
        block_type = obj.get("type")
        if type(block_type) is not str:
            block_type = None
        if block_type in _MEDIA_TYPES or key in _GEMINI_MEDIA_KEYS:
            kind = media_kind(obj, key)
            if kind is not None:
                self.media += self._media_tokens(kind, obj)
                return
        texts = self.texts
        texts.extend(obj)
        for name, value in obj.items():
            kind_of = type(value)
            if kind_of is str:
                if name in _OPAQUE_NAMES:
                    if _is_signature(name, block_type):
                        continue
                    if _is_encrypted(name, block_type):
                        self.encrypted += math.ceil(
                            decoded_size(value) / self.estimates.encrypted_bytes_per_token
                        )
                        continue
                if len(value) < 1024:
                    texts.append(value)
                else:
                    self._string(value)
            elif kind_of is dict:
                self._object(value, name)
            elif kind_of is list:
                if arrays is None:
                    self._array(value, name)
                else:
                    arrays(value, name)
            else:
                self.visit(value, name)

    def _array(self, items: list[Any], key: str | None) -> None:
        # Messages, content parts, tool calls: objects and short strings inline, as above.
        texts = self.texts
        for item in items:
            kind_of = type(item)
            if kind_of is dict:
                self._object(item, key)
            elif kind_of is str and len(item) < 1024:
                texts.append(item)
            else:
                self.visit(item, key)

    def _media_tokens(self, kind: MediaKind, item: Any) -> int:
        estimates = self.estimates
        if kind == "image":
            return estimates.image_tokens
        data = _longest_string(item)
        inline = decoded_size(data)
        if kind == "audio":
            return max(estimates.audio_tokens, inline // estimates.audio_bytes_per_token)
        if kind == "video":
            return max(estimates.video_tokens, inline // estimates.video_bytes_per_token)
        pages = pdf_pages(data) if inline >= _PAGES_WORTH_COUNTING else 0
        if pages:
            return max(estimates.file_tokens, pages * estimates.file_page_tokens)
        return max(estimates.file_tokens, inline // estimates.file_bytes_per_token)


# A PDF's tokens are its pages' (Anthropic: 1,500-3,000 a page, text and page image; Gemini
# 258), not its size: a scanned page is a megabyte of image. Counted where the size alone
# would charge more than a few pages.
_PAGES_WORTH_COUNTING = 256 * 1024
_PDF_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")


def pdf_pages(value: str) -> int:
    """The page objects of an inline base64 PDF, 0 when none can be read (not a PDF, or its
    pages inside compressed object streams)."""
    if value.startswith("data:"):
        value = value.partition(",")[2]
    try:
        data = base64.b64decode(value, validate=False)
    except (ValueError, binascii.Error):
        return 0
    if not data.startswith(b"%PDF"):
        return 0
    return len(_PDF_PAGE.findall(data))


def media_kind(obj: Mapping[str, Any], key: str | None) -> MediaKind | None:
    """What kind of media an object of the rendered body is, if it is one."""
    block_type = obj.get("type")
    if not isinstance(block_type, str):
        # e.g. a JSON Schema's {"type": ["string", "null"]}: not a content block.
        block_type = None
    if block_type in _IMAGE_TYPES:
        return "image"
    if block_type in _AUDIO_TYPES:
        return "audio"
    if block_type in _FILE_TYPES:
        source = obj.get("source")
        if isinstance(source, dict) and source.get("type") in _TEXT_SOURCES:
            return None
        return "file"
    if key in _GEMINI_MEDIA_KEYS:
        mime = obj.get("mimeType", obj.get("mime_type"))
        if isinstance(mime, str):
            if mime.startswith("image/"):
                return "image"
            if mime.startswith("audio/"):
                return "audio"
            if mime.startswith("video/"):
                return "video"
            return "file"
    return None


def _is_signature(name: str, block_type: object) -> bool:
    # Anthropic's thinking signature only vouches for the thinking text beside it.
    return name == "signature" and block_type == "thinking"


def _is_encrypted(name: str, block_type: object) -> bool:
    return name in _ENCRYPTED_KEYS or (name == "data" and block_type == "redacted_thinking")


def decoded_size(value: str) -> int:
    """Bytes of base64 ``value`` (a data: URL's payload included) once decoded."""
    if value.startswith("data:"):
        value = value.partition(",")[2]
    return len(value) * 3 // 4


def _longest_string(value: Any) -> str:
    best = ""
    stack = [value]
    while stack:
        current = stack.pop()
        if isinstance(current, str):
            if len(current) > len(best):
                best = current
        elif isinstance(current, dict):
            stack.extend(current.values())
        elif isinstance(current, list):
            stack.extend(current)
    return best
