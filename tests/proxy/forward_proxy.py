"""A forward HTTP proxy for the egress tests, as an egress proxy in a cluster would be: CONNECT
tunnels for https upstreams, absolute-form requests for http ones, Basic proxy
authentication. It records what it was asked and what it could read."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Asked:
    method: str
    target: str
    # Every header the proxy could read (none of a tunnel's insides).
    headers: dict[str, str]


@dataclass
class ForwardProxy:
    user: str | None = None
    password: str | None = None
    asked: list[Asked] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        login = f"{self.user}:{self.password}@" if self.user else ""
        return f"http://{login}127.0.0.1:{self.port}"

    async def start(self) -> ForwardProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def _authorized(self, headers: dict[str, str]) -> bool:
        if self.user is None:
            return True
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        return headers.get("proxy-authorization") == f"Basic {token}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            first, *lines = head.decode("latin-1").split("\r\n")
            method, target, _version = first.split(" ", 2)
            headers = {
                k.strip().lower(): v.strip()
                for k, _, v in (line.partition(":") for line in lines if line)
            }
            self.asked.append(Asked(method, target, headers))
            if not self._authorized(headers):
                writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\n")
                writer.write(b"Proxy-Authenticate: Basic\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                return
            if method == "CONNECT":
                host, port = target.rsplit(":", 1)
                up_reader, up_writer = await asyncio.open_connection(host, int(port))
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
                await _pipe_both(reader, writer, up_reader, up_writer)
                return
            # Absolute form: pass the request on as it came, the connection closed after it.
            hostport = target.split("://", 1)[1].split("/", 1)[0]
            host, _, port = hostport.partition(":")
            up_reader, up_writer = await asyncio.open_connection(host, int(port or 80))
            up_writer.write(head)
            await _pipe_both(reader, writer, up_reader, up_writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _pipe_both(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
