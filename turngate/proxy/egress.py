"""The forward proxy an upstream is reached through, read from the environment as the
official SDKs (httpx), curl and requests read it.

``HTTPS_PROXY`` for an https upstream, ``HTTP_PROXY`` for an http one, ``ALL_PROXY`` for
either when that one is unset; the lower-case name wins over the upper-case one. An upstream
whose host ``NO_PROXY`` names goes direct: ``*``, a host, a domain (``example.com`` and
``.example.com`` both cover its subdomains), ``host:port``, an address or a network
(``10.0.0.0/8``, as curl reads it). Chosen once per upstream at start, since the upstreams are
the configured ones, so a request pays nothing for it.

A user and password in the proxy's URL go to the proxy as ``Proxy-Authorization`` and are
never shown (``EgressProxy.shown``; the errors turngate answers with name no URL). Through
an https upstream's proxy the request travels in a CONNECT tunnel: the proxy sees the host,
never the credentials or the body. A proxy that inspects TLS presents its own certificate
authority: add it with ``SSL_CERT_FILE``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from yarl import URL


class EgressConfigError(ValueError):
    """A proxy variable turngate cannot use; raised at start, never per request."""


@dataclass(frozen=True)
class EgressProxy:
    # With its user and password, if any: aiohttp sends them as Proxy-Authorization, on the
    # request to an http upstream and on the CONNECT to an https one. (Its proxy_headers
    # reach only a CONNECT, and proxy_auth is deprecated.)
    url: URL

    @property
    def shown(self) -> str:
        return str(self.url.with_user(None).with_password(None))


def proxy_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """``{"https": ..., "http": ..., "all": ..., "no": ...}`` as set, lower case first."""
    found: dict[str, str] = {}
    for name in ("https", "http", "all", "no"):
        value = environ.get(f"{name}_proxy") or environ.get(f"{name.upper()}_PROXY")
        if value and value.strip():
            found[name] = value.strip()
    return found


def proxy_for(upstream: URL, environ: Mapping[str, str]) -> EgressProxy | None:
    """The proxy ``upstream`` is reached through, or None to go direct."""
    variables = proxy_variables(environ)
    chosen = variables.get(upstream.scheme) or variables.get("all")
    if chosen is None or bypassed(upstream, variables.get("no", "")):
        return None
    return _parsed(chosen)


def bypassed(upstream: URL, no_proxy: str) -> bool:
    host = (upstream.host or "").lower().strip("[]")
    port = upstream.port
    address = _address(host)
    for raw in no_proxy.replace(" ", ",").split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        if address is not None and _within(address, entry):
            return True
        name, _, entry_port = entry.rpartition(":") if _has_port(entry) else (entry, "", "")
        if entry_port and entry_port != str(port):
            continue
        name = name.lstrip(".").strip("[]")
        if host == name or host.endswith("." + name):
            return True
    return False


def _has_port(entry: str) -> bool:
    head, sep, tail = entry.rpartition(":")
    return bool(sep) and tail.isdigit() and (head.endswith("]") or ":" not in head)


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _within(address: ipaddress.IPv4Address | ipaddress.IPv6Address, entry: str) -> bool:
    try:
        network = ipaddress.ip_network(entry.strip("[]"), strict=False)
    except ValueError:
        return False
    return address.version == network.version and address in network


def _parsed(value: str) -> EgressProxy:
    # "proxy:3128" without a scheme means http, as curl and httpx take it.
    url = URL(value if "://" in value else f"http://{value}")
    if url.scheme not in ("http", "https") or not url.host:
        shown = EgressProxy(url).shown if url.host else "it"
        raise EgressConfigError(
            f"proxy {shown} is not an http:// or https:// URL with a host; turngate reaches "
            "upstreams through HTTP proxies only (set NO_PROXY for hosts to reach directly)"
        )
    return EgressProxy(url)
