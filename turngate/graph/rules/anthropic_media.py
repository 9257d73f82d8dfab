"""Anthropic's rules for a base64 image (a message's or a tool result's), quoted from its 400s,
run as one rule (``anthropic_images``) in one walk:

``anthropic_image_media_type``: the ``media_type`` is one of the four Anthropic takes
("Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"), and the image's
own first bytes are of that format ("The image was specified using the image/jpeg media
type, but the image appears to be a image/png image"). An agent's tool that labels every
screenshot ``image/jpeg`` puts such an image in the history, and every later request of the
conversation is refused until it is edited out (claude-code #11918 / #12009, llxprt-code
#2130). Bytes of no format turngate knows are left to the provider.

``anthropic_image_size``: the base64 text is at most 10 MiB. The limit is on the encoded
text, so a photo under it is over it once encoded, and, once in the history, fails every
later request (openclaw PR #9598, lobehub PR #14711, langchain #21654). It was 5 MiB ("image
exceeds 5 MB maximum: 6405384 bytes > 5242880 bytes") until mid-2026; since, agents size
images against 10,485,760 characters (kolega-code PR #354, oh-my-pi PR #10633). The larger
limit is checked: an image between the two is left to Anthropic, not refused by turngate.

``anthropic_image_dimensions``: no side over 8000 pixels, and none over 2000 when the request
holds more than 20 images ("At least one of the image dimensions exceed max allowed size for
many-image requests: 2000 pixels"): a computer-use or coding agent's screenshots pile up in
the history until the 21st makes every earlier 2560x1440 one fail, on every later turn
(claude-code #9375 / #49537, opencode #12068, jcode #381). Read from each image's header.

``anthropic_image_count``: at most 600 images in a request, 100 on a model with a 200k-token
window ("Too much media: 0 document pages + 102 images > 100", claude-code #19822). The limit
was 100 for every model until the 1M-token window's general availability (2026-03-13); the
models of 200k (Claude 4.5 and earlier, the 3.x names) keep it, but Sonnet 4 and 4.5 given a
``context-1m`` beta, and a model turngate cannot place is held to 600. Document pages count
too; they are left to Anthropic.
"""

from __future__ import annotations

import binascii
from base64 import b64decode
from collections.abc import Iterator
from dataclasses import dataclass

from turngate.graph.image_header import image_dimensions
from turngate.graph.model import ImageBlock, Message, MessageSequence, ToolResultBlock
from turngate.graph.rules import rule
from turngate.graph.rules.anthropic import claude_3_name, claude_family
from turngate.graph.rules.anthropic_settings import betas_named
from turngate.graph.validator import Violation, violation

IMAGE_MEDIA_TYPE = "anthropic_image_media_type"
IMAGE_SIZE = "anthropic_image_size"
IMAGE_DIMENSIONS = "anthropic_image_dimensions"
IMAGE_COUNT = "anthropic_image_count"
# Anthropic's limit on one image's base64 text, in characters.
MAX_IMAGE_BASE64 = 10 * 1024 * 1024
# The longest side an image may have; over MANY_IMAGES images in a request, MANY_IMAGE_SIDE.
MAX_SIDE, MANY_IMAGE_SIDE, MANY_IMAGES = 8000, 2000, 20
# Images (and document pages) in a request: on a model of a 200k-token window, and on any other.
MAX_IMAGES_200K, MAX_IMAGES = 100, 600
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


@dataclass(frozen=True)
class _Placed:
    """An image, the message it sits in, and the call whose result holds it, if any."""

    message: Message
    image: ImageBlock
    call_id: str | None = None

    @property
    def where(self) -> str:
        return "an image" if self.call_id is None else f"an image in the result of '{self.call_id}'"

    def violation(self, rule: str, problem: str) -> Violation:
        text = f"{self.where} {problem}"
        return violation(rule, text, self.message, self.image, call_id=self.call_id)


def _images(seq: MessageSequence) -> Iterator[_Placed]:
    """Each image with where it sits: a message's own, or a tool result's."""
    for message in seq.messages:
        for block in message.blocks:
            if isinstance(block, ImageBlock):
                yield _Placed(message, block)
            elif isinstance(block, ToolResultBlock):
                for part in block.content:
                    if isinstance(part, ImageBlock):
                        yield _Placed(message, part, block.call_id)


@rule("anthropic_images")
def image_problems(seq: MessageSequence) -> list[Violation]:
    """The rules in one walk over the blocks: most requests hold no image at all."""
    images = list(_images(seq))
    out: list[Violation] = []
    limit = image_limit(seq) if len(images) > MAX_IMAGES_200K else MAX_IMAGES
    if len(images) > limit:
        past = images[limit]
        out.append(
            violation(
                IMAGE_COUNT,
                f'the request holds {len(images)} images; Anthropic: "Too much media: 0 '
                f'document pages + {len(images)} images > {limit}" (drop the oldest '
                "images from the history)",
                past.message,
                past.image,
                call_id=past.call_id,
            )
        )
    side = MANY_IMAGE_SIDE if len(images) > MANY_IMAGES else MAX_SIDE
    for placed in images:
        image = placed.image
        if image.source != "base64":
            continue
        problem = _label_problem(image)
        if problem is not None:
            out.append(placed.violation(IMAGE_MEDIA_TYPE, problem))
        if len(image.data) > MAX_IMAGE_BASE64:
            out.append(
                placed.violation(
                    IMAGE_SIZE,
                    f'is {len(image.data):,} characters of base64; Anthropic: "image exceeds '
                    f'10 MB maximum: {len(image.data)} bytes > {MAX_IMAGE_BASE64} bytes" (the '
                    "limit is on the encoded text: resize or re-encode the image to under "
                    "7.5 MB first)",
                )
            )
        dimensions = image_dimensions(image.data)
        if dimensions is not None and max(dimensions) > side:
            problem = _too_large(dimensions, side, len(images))
            out.append(placed.violation(IMAGE_DIMENSIONS, problem))
    return out


def image_limit(seq: MessageSequence) -> int:
    """The images ``seq``'s model takes: 100 on a 200k-token window, 600 on 1M."""
    if claude_3_name(seq.model) is not None:
        return MAX_IMAGES_200K
    found = claude_family(seq.model)
    if found is None or found[1:] >= (4, 6):
        return MAX_IMAGES
    if found[0] == "sonnet" and any(n.startswith("context-1m") for n in betas_named(seq)):
        return MAX_IMAGES
    return MAX_IMAGES_200K


def _too_large(dimensions: tuple[int, int], side: int, count: int) -> str:
    width, height = dimensions
    if side == MAX_SIDE:
        limit, fix = f"max allowed size: {side} pixels", "resize it"
    else:
        limit = f"max allowed size for many-image requests: {side} pixels"
        fix = (
            f"the request holds {count} images, and over {MANY_IMAGES} each side must be "
            f"within {side}: resize it, or send fewer images"
        )
    return (
        f'is {width}x{height} pixels; Anthropic: "At least one of the image dimensions exceed '
        f'{limit}" ({fix})'
    )


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
