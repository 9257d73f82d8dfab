"""An image's size read from the header inside its base64 text, each format Anthropic takes,
without decoding the rest."""

from __future__ import annotations

import base64
import struct

import pytest

from tests.adapters.anthropic_builders import png_bytes
from turngate.graph import image_header
from turngate.graph.image_header import image_dimensions


def jpeg(width: int, height: int, *, exif: int = 0) -> bytes:
    """A JPEG whose frame header (SOF0) follows an APP1 (Exif) segment of ``exif`` bytes, as a
    phone writes one: the size is found only by walking the segments."""
    app1 = b"\xff\xe1" + struct.pack(">H", exif + 2) + bytes(exif)
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, height, width, 3) + bytes(9)
    return b"\xff\xd8" + app1 + sof + b"\xff\xda" + bytes(64) + b"\xff\xd9"


def webp(width: int, height: int) -> bytes:
    extended = bytes(4) + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    chunk = b"VP8X" + struct.pack("<I", len(extended)) + extended
    return b"RIFF" + struct.pack("<I", 4 + len(chunk)) + b"WEBP" + chunk


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + bytes(16)


@pytest.mark.parametrize(
    ("data", "size"),
    [
        pytest.param(png_bytes(2560, 1440), (2560, 1440), id="png"),
        pytest.param(jpeg(1440, 8570), (1440, 8570), id="jpeg"),
        pytest.param(jpeg(4032, 3024, exif=60_000), (4032, 3024), id="jpeg after 60 KB of exif"),
        pytest.param(gif(300, 9000), (300, 9000), id="gif"),
        pytest.param(webp(9000, 100), (9000, 100), id="webp"),
    ],
)
def test_each_format_gives_its_size(data: bytes, size: tuple[int, int]):
    assert image_dimensions(base64.b64encode(data).decode()) == size


@pytest.mark.parametrize("text", ["", "not base64 at all!", base64.b64encode(b"hello").decode()])
def test_text_that_is_no_image_gives_none(text: str):
    assert image_dimensions(text) is None


def test_only_the_header_is_decoded(monkeypatch: pytest.MonkeyPatch):
    """A 4 MB photo: the windows decoded to find its size add up to a few hundred bytes."""
    decoded: list[int] = []
    real = image_header.b64decode

    def counting(text: str, validate: bool = False) -> bytes:
        out = real(text, validate=validate)
        decoded.append(len(out))
        return out

    monkeypatch.setattr(image_header, "b64decode", counting)
    photo = base64.b64encode(jpeg(4032, 3024, exif=2_000) + bytes(4_000_000)).decode()
    assert image_dimensions(photo) == (4032, 3024)
    assert 0 < sum(decoded) < 1_000
