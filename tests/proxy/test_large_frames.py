"""Image output arrives as one SSE event: a generated image is one frame of several MB.

Gemini's image models stream each image whole, base64 in ``inlineData`` (a 1K image of
``gemini-3.1-flash-image-preview`` was 3.5 MB of JPEG in the field, 4.7 MB as base64; a 4K
image 7.8 MB, 10.4 MB as base64); OpenAI Responses' ``image_generation`` tool sends partial
and final images the same way. Each must reach the application whole, through the SDK.
"""

from __future__ import annotations

import base64
import os

import orjson
import pytest
from google.genai import types

from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import genai_sdk
from tests.proxy.sdk_support import GENAI_AIOHTTP_WARNING
from tests.proxy.stack import Stack

pytestmark = [GENAI_AIOHTTP_WARNING]

MB = 1024 * 1024


def image_stream(image: bytes) -> bytes:
    chunks = [
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "Here it is."}]}}]},
        {
            "candidates": [
                {
                    "content": {
                        "role": "model",
                        "parts": [
                            {
                                "inlineData": {
                                    "mimeType": "image/jpeg",
                                    "data": base64.b64encode(image).decode(),
                                }
                            }
                        ],
                    },
                    "finishReason": "STOP",
                }
            ],
            "modelVersion": "gemini-3.1-flash-image-preview",
            "responseId": "img-1",
        },
    ]
    return b"".join(b"data: " + orjson.dumps(c) + b"\r\n\r\n" for c in chunks)


@pytest.mark.parametrize("size_mb", [3.5, 7.8], ids=["1K", "4K"])
async def test_a_generated_image_reaches_the_application_whole(stack: Stack, size_mb: float):
    image = os.urandom(int(size_mb * MB))
    stack.upstream.reply(Reply(body=image_stream(image), content_type="text/event-stream"))
    sdk = genai_sdk(stack)
    stream = await sdk.aio.models.generate_content_stream(
        model="gemini-3.1-flash-image-preview",
        contents="A lighthouse at dusk.",
        config=types.GenerateContentConfig(response_modalities=["TEXT", "IMAGE"]),
    )
    chunks = [chunk async for chunk in stream]
    await sdk.aio.aclose()
    contents = [c.candidates[0].content for c in chunks if c.candidates]
    parts = [part for content in contents if content for part in content.parts or []]
    images = [p.inline_data.data for p in parts if p.inline_data is not None]
    assert images == [image]
