"""Anthropic's rules for a base64 image (a message's or a tool result's), quoted from its 400s,
run as one rule (``anthropic_images``) in one walk:

``anthropic_image_media_type``: the ``media_type`` is one of the four Anthropic takes
("Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"), and the image's
own first bytes are of that format ("The image was specified using the image/jpeg media
type, but the image appears to be a image/png image"). An agent's tool that labels every
screenshot ``image/jpeg`` puts such an image in the history, and every later request of the
conversation is refused until it is edited out (claude-code #11918 / #12009, llxprt-code
#2130). Bytes of no format turngate knows are left to the provider.

``anthropic_image_size``: the base64 text is at most 5 MiB ("image exceeds 5 MB maximum:
6405384 bytes > 5242880 bytes"): the limit is on the encoded text, so a 4.6 MB photo is over
it once encoded, and, once in the history, fails every later request (openclaw PR #9598,
lobehub PR #14711, langchain #21654).
"""

from __future__ import annotations

import binascii
from base64 import b64decode
from collections.abc import Iterator

from turngate.graph.model import ImageBlock, Message, MessageSequence, ToolResultBlock
from turngate.graph.rules import rule
from turngate.graph.validator import Violation, violation

IMAGE_MEDIA_TYPE = "anthropic_image_media_type"
IMAGE_SIZE = "anthropic_image_size"
# Anthropic's limit on one image's base64 text, in characters.
MAX_IMAGE_BASE64 = 5 * 1024 * 1024
MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
_TAKEN = "Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"
# Base64 characters enough for the 12 bytes a WebP file opens with.
_HEAD = 16


def image_format(data: str) -> str | None:
    """The media type the first bytes of base64 ``data`` show, among Anthropic's four."""
    try:
        head = b64decode(data[:_HEAD], validate=True)
    except (binascii.Error, ValueError):
        return None
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def _images(seq: MessageSequence) -> Iterator[tuple[Message, ImageBlock, str]]:
    """Each base64 image with where it sits: a message's own, or a tool result's."""
    for message in seq.messages:
        for block in message.blocks:
            if isinstance(block, ImageBlock) and block.source == "base64":
                yield message, block, "an image"
            elif isinstance(block, ToolResultBlock):
                for part in block.content:
                    if isinstance(part, ImageBlock) and part.source == "base64":
                        yield message, part, f"an image in the result of '{block.call_id}'"


@rule("anthropic_images")
def image_problems(seq: MessageSequence) -> list[Violation]:
    """Both rules in one walk over the blocks: most requests hold no image at all."""
    out: list[Violation] = []
    for message, image, where in _images(seq):
        problem = _label_problem(image)
        if problem is not None:
            out.append(violation(IMAGE_MEDIA_TYPE, f"{where} {problem}", message, image))
        if len(image.data) > MAX_IMAGE_BASE64:
            out.append(
                violation(
                    IMAGE_SIZE,
                    f'{where} is {len(image.data):,} characters of base64; Anthropic: "image '
                    f"exceeds 5 MB maximum: {len(image.data)} bytes > {MAX_IMAGE_BASE64} "
                    'bytes" (the limit is on the encoded text: resize or re-encode the image '
                    "to under 3.75 MB first)",
                    message,
                    image,
                )
            )
    return out


def _label_problem(image: ImageBlock) -> str | None:
    declared = image.media_type
    if declared is None:
        return 'has no media_type; Anthropic: "media_type: Field required"'
    if declared not in MEDIA_TYPES:
        return f'is labelled {declared!r}; Anthropic: "media_type: {_TAKEN}"'
    found = image_format(image.data)
    if found is None or found == declared:
        return None
    return (
        f'is labelled {declared} but its bytes are {found}; Anthropic: "The image was '
        f"specified using the {declared} media type, but the image appears to be a "
        f'{found} image" (label it by its bytes, not its file name)'
    )
