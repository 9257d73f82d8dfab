"""Provider addresses answered below turngate's prefix: only those below the configured
upstream's root, whatever its path, and byte for byte the rest of the answer."""

from __future__ import annotations

from multidict import CIMultiDict
from yarl import URL

from turngate.proxy.addresses import UPLOAD_URL, back_through, results_back_through
from turngate.proxy.routes import Prefix

TURNGATE = "http://127.0.0.1:8787"
GATEWAY = Prefix("/anthropic", "", "anthropic", URL("https://gw.example.com/llm/anthropic"))
GEMINI = Prefix("/gemini", "", "gemini", URL("https://generativelanguage.googleapis.com"))


def test_a_results_url_below_an_upstream_with_a_path_is_answered_below_the_prefix():
    body = (
        b'{"id":"msgbatch_1","results_url":"https://gw.example.com/llm/anthropic/v1/messages/'
        b'batches/msgbatch_1/results","note":"https://gw.example.com/llm/anthropic/x"}'
    )
    assert results_back_through(body, GATEWAY, TURNGATE) == body.replace(
        b"https://gw.example.com/llm/anthropic/v1",
        b"http://127.0.0.1:8787/anthropic/v1",
        1,
    )


def test_a_results_url_beside_the_upstreams_root_is_left_alone():
    body = b'{"results_url":"https://gw.example.com/llm/anthropic-other/v1/results"}'
    assert results_back_through(body, GATEWAY, TURNGATE) == body


def test_an_upload_address_keeps_its_query_and_leaves_other_headers_alone():
    headers = CIMultiDict(
        {
            UPLOAD_URL: "https://generativelanguage.googleapis.com/upload/v1beta/files"
            "?upload_id=A%2FB&upload_protocol=resumable",
            "X-Goog-Upload-Status": "active",
        }
    )
    back_through(headers, GEMINI, TURNGATE)
    assert headers[UPLOAD_URL] == (
        "http://127.0.0.1:8787/gemini/upload/v1beta/files?upload_id=A%2FB&upload_protocol=resumable"
    )
    assert headers["X-Goog-Upload-Status"] == "active"


def test_an_upload_address_on_http_instead_of_https_is_not_the_upstreams():
    address = "http://generativelanguage.googleapis.com/upload/v1beta/files?upload_id=A"
    headers = CIMultiDict({UPLOAD_URL: address})
    back_through(headers, GEMINI, TURNGATE)
    assert headers[UPLOAD_URL] == address
