"""Egress through a forward proxy: turngate reads HTTPS_PROXY, HTTP_PROXY, ALL_PROXY and
NO_PROXY as the official SDKs do, so an agent pod whose traffic must leave through the
cluster's proxy keeps working once its SDK points at turngate."""

from __future__ import annotations

import base64
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
import trustme
from yarl import URL

from tests.proxy.conftest import StackFactory
from tests.proxy.fake_upstream import FakeUpstream
from tests.proxy.forward_proxy import ForwardProxy
from tests.proxy.helpers import CHAT_ANSWER
from tests.proxy.helpers import operation as operation_of
from tests.proxy.serve_process import ServeProcess
from tests.proxy.stack import OPENAI_KEY
from tests.state.redis_server import free_port
from turngate.proxy.egress import EgressConfigError, proxy_for

HI = [{"role": "user", "content": "Hi"}]
PASSWORD = "pr0xy-s3cret-9f1e"


def local() -> openai.DefaultAsyncHttpxClient:
    """The SDK's client to turngate on 127.0.0.1, which the proxy variables set here for
    turngate would otherwise send through the proxy too (NO_PROXY=127.0.0.1 in a pod)."""
    return openai.DefaultAsyncHttpxClient(trust_env=False)


def chosen(upstream: str, **environ: str) -> str | None:
    found = proxy_for(URL(upstream), environ)
    return None if found is None else found.shown


def test_each_scheme_takes_its_own_variable_and_all_proxy_otherwise() -> None:
    env = {"HTTPS_PROXY": "http://secure:3128", "HTTP_PROXY": "http://plain:3128"}
    assert chosen("https://api.openai.com", **env) == "http://secure:3128"
    assert chosen("http://gateway.internal", **env) == "http://plain:3128"
    assert chosen("https://api.openai.com", ALL_PROXY="http://any:8080") == "http://any:8080"
    assert chosen("https://api.openai.com", HTTP_PROXY="http://plain:3128") is None
    assert chosen("https://api.openai.com") is None
    # Lower case wins, as in urllib and curl; no scheme means http.
    both = {"https_proxy": "low:3128", "HTTPS_PROXY": "http://UP:3128"}
    assert chosen("https://api.openai.com", **both) == "http://low:3128"


@pytest.mark.parametrize(
    ("no_proxy", "upstream", "direct"),
    [
        ("*", "https://api.openai.com", True),
        ("api.openai.com", "https://api.openai.com", True),
        ("openai.com", "https://api.openai.com", True),
        (".openai.com", "https://api.openai.com", True),
        ("nopenai.com", "https://api.openai.com", False),
        ("localhost, .svc,.cluster.local", "http://llm-gw.ml.svc:8080", True),
        ("llm-gw.ml.svc:8080", "http://llm-gw.ml.svc:8080", True),
        ("llm-gw.ml.svc:9090", "http://llm-gw.ml.svc:8080", False),
        ("10.0.0.0/8", "http://10.12.0.7:4000", True),
        ("10.0.0.0/8", "http://192.168.1.7:4000", False),
        ("10.12.0.7", "http://10.12.0.7:4000", True),
        ("::1", "http://[::1]:4000", True),
        ("fd00::/8", "http://[fd00::5]:4000", True),
        ("", "https://api.openai.com", False),
    ],
)
def test_no_proxy_sends_its_hosts_direct(no_proxy: str, upstream: str, direct: bool) -> None:
    env = {"HTTPS_PROXY": "http://egress:3128", "HTTP_PROXY": "http://egress:3128"}
    assert (chosen(upstream, NO_PROXY=no_proxy, **env) is None) is direct


def test_the_proxy_password_is_kept_for_aiohttp_and_never_shown() -> None:
    found = proxy_for(URL("https://api.openai.com"), {"HTTPS_PROXY": f"http://ops:{PASSWORD}@p:1"})
    assert found is not None
    assert (found.url.user, found.url.password) == ("ops", PASSWORD)
    assert PASSWORD not in found.shown
    assert found.shown == "http://p:1"


def test_a_proxy_turngate_cannot_use_is_refused_at_start_without_its_password() -> None:
    with pytest.raises(EgressConfigError, match="http:// or https://") as refused:
        proxy_for(URL("https://api.openai.com"), {"HTTPS_PROXY": f"socks5://u:{PASSWORD}@p:1"})
    assert PASSWORD not in str(refused.value)


@pytest.fixture
async def egress() -> AsyncIterator[ForwardProxy]:
    proxy = await ForwardProxy(user="ops", password=PASSWORD).start()
    yield proxy
    await proxy.close()


async def test_an_http_upstream_is_reached_through_http_proxy(
    make_stack: StackFactory, egress: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", egress.url)
    stack = await make_stack()
    stack.upstream.reply(CHAT_ANSWER)
    async with openai.AsyncOpenAI(
        api_key=OPENAI_KEY, base_url=stack.base("/openai/v1"), max_retries=0, http_client=local()
    ) as sdk:
        answer = await sdk.chat.completions.create(model="gpt-4o", messages=HI)  # type: ignore[arg-type]
    assert answer.choices[0].message.content == "hello"
    (asked,) = egress.asked
    assert (asked.method, asked.target) == (
        "POST",
        f"http://{stack.upstream_host}/v1/chat/completions",
    )
    token = base64.b64encode(f"ops:{PASSWORD}".encode()).decode()
    assert asked.headers["proxy-authorization"] == f"Basic {token}"
    assert len(stack.upstream.received) == 1


async def test_no_proxy_reaches_the_upstream_directly(
    make_stack: StackFactory, egress: ForwardProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", egress.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.0/8")
    stack = await make_stack()
    stack.upstream.reply(CHAT_ANSWER)
    async with openai.AsyncOpenAI(
        api_key=OPENAI_KEY, base_url=stack.base("/openai/v1"), max_retries=0, http_client=local()
    ) as sdk:
        await sdk.chat.completions.create(model="gpt-4o", messages=HI)  # type: ignore[arg-type]
    assert egress.asked == []
    assert len(stack.upstream.received) == 1


async def test_a_proxy_that_refuses_the_tunnel_is_a_502_with_nothing_sent(
    make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = await ForwardProxy(user="ops", password="other").start()
    try:
        monkeypatch.setenv("HTTPS_PROXY", f"http://ops:{PASSWORD}@127.0.0.1:{wrong.port}")
        # No TLS is started before the proxy answers the CONNECT: any https upstream will do.
        stack = await make_stack(upstream_openai="https://127.0.0.1:9")
        async with openai.AsyncOpenAI(
            api_key=OPENAI_KEY,
            base_url=stack.base("/openai/v1"),
            max_retries=0,
            http_client=local(),
        ) as sdk:
            with pytest.raises(openai.InternalServerError) as raised:
                await sdk.chat.completions.create(model="gpt-4o", messages=HI)  # type: ignore[arg-type]
    finally:
        await wrong.close()
    assert raised.value.status_code == 502
    assert raised.value.response.headers["Turngate-Rejection"] == "upstream_unavailable"
    assert "egress proxy refused the connection (407" in raised.value.message
    (asked,) = wrong.asked
    assert (asked.method, asked.target) == ("CONNECT", "127.0.0.1:9")
    assert PASSWORD not in raised.value.message
    assert PASSWORD not in caplog.text
    # Nothing reached the provider: the attempt is over, its revision not held.
    operation = raised.value.response.headers["Turngate-Operation-Id"]
    assert (await operation_of(stack, operation))["state"] == "FAILED"


@pytest.fixture
def authority() -> trustme.CA:
    return trustme.CA()


async def test_turngate_serve_tunnels_to_an_https_upstream_through_https_proxy(
    aiohttp_server: Any, egress: ForwardProxy, authority: trustme.CA, tmp_path: Path
) -> None:
    upstream = FakeUpstream()
    upstream.reply(CHAT_ANSWER)
    served_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(served_tls)
    server = await aiohttp_server(upstream.app(), ssl=served_tls)
    bundle = tmp_path / "ca.pem"
    authority.cert_pem.write_to_path(str(bundle))
    serve = ServeProcess(
        free_port(),
        "memory://",
        f"https://127.0.0.1:{server.port}",
        tmp_path / "serve.log",
        HTTPS_PROXY=egress.url,
        # A proxy that inspects TLS, or a private upstream, brings its own authority.
        SSL_CERT_FILE=str(bundle),
    )
    await serve.start()
    try:
        async with openai.AsyncOpenAI(
            api_key=OPENAI_KEY, base_url=serve.url + "/openai/v1", max_retries=0
        ) as sdk:
            answer = await sdk.chat.completions.create(model="gpt-4o", messages=HI)  # type: ignore[arg-type]
    finally:
        serve.kill()
    assert answer.choices[0].message.content == "hello"
    (asked,) = egress.asked
    # The proxy saw where to, never the path, the API key or the body.
    assert (asked.method, asked.target) == ("CONNECT", f"127.0.0.1:{server.port}")
    assert "authorization" not in asked.headers
    assert len(upstream.received) == 1
    log = serve.output()
    assert f"openai upstream reached through proxy http://127.0.0.1:{egress.port}" in log
    assert PASSWORD not in log
    assert OPENAI_KEY not in log
