"""The Redis server the tests use, servers a test starts itself, and a key prefix per test.

The URL: ``$TURNGATE_TEST_REDIS_URL`` if set, else 127.0.0.1:6379 if it answers, else a
``redis-server`` started here (free port, no persistence) and stopped at exit. It is
chosen when the test session first imports this module and put in the environment, so
child processes (tests/state/race_child.py) reach the same server, and build the same key
prefixes from the session id put there too. With no server to reach and no redis-server
binary, every Redis test FAILS with a message naming what to install.

Tests share a server by key prefix (``turngate-test:{session}:…``), never by FLUSHDB; the
process that started the session deletes its keys at exit.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from redis import Redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from turngate.state.redis import RedisStore

URL_ENV = "TURNGATE_TEST_REDIS_URL"
SESSION_ENV = "TURNGATE_TEST_REDIS_SESSION"
DEFAULT_URL = "redis://127.0.0.1:6379/0"
INSTALL = (
    "no Redis server for the tests: nothing answers at 127.0.0.1:6379, $TURNGATE_TEST_REDIS_URL "
    "is not set and there is no redis-server binary on PATH to start one. Install it "
    "(Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) or set "
    "TURNGATE_TEST_REDIS_URL=redis://HOST:PORT/DB."
)


def answers(url: str, timeout: float = 0.5) -> bool:
    client = Redis.from_url(
        url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0)
    )
    try:
        return bool(client.ping())
    except (RedisError, OSError):
        return False
    finally:
        client.close()


# Ports for the servers a test starts as subprocesses (turngate serve, redis-server) come
# from below the kernel's ephemeral range: a socket bound to port 0 (every in-process test
# server, every client connection) in another pytest worker can never be given one between
# the pick here and the subprocess's own bind. Picked at random, checked free.
_LOWEST = 20_000


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port() -> int:
    top = max(_ephemeral_start(), _LOWEST + 1_000)
    for _ in range(1_000):
        port = random.randrange(_LOWEST, top)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port between {_LOWEST} and {top}")


class RedisServer:
    """A redis-server subprocess on 127.0.0.1 with its files in ``folder``.

    Stop it and start it again to restart it on the same port and files; ``options`` are
    extra redis-server arguments (``"--appendonly", "yes"``).
    """

    def __init__(self, folder: Path, *options: str, port: int | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail(INSTALL, pytrace=False)
        self.binary = binary
        self.folder = folder
        self.options = options
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        log = self.folder / "redis.log"
        self.process = subprocess.Popen(
            [
                *(self.binary, "--port", str(self.port), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "no"),
                *("--dir", str(self.folder), "--logfile", str(log)),
                *self.options,  # later arguments win
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not answers(self.url, timeout=0.2):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                told = log.read_text(errors="replace") if log.exists() else "(no log)"
                pytest.fail(f"redis-server on port {self.port} did not start:\n{told}")
            time.sleep(0.02)
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final save."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
            self.process = None


# --- the session's server: chosen once, at first import ---

_STARTS_SESSION = SESSION_ENV not in os.environ
SESSION = os.environ.setdefault(SESSION_ENV, uuid.uuid4().hex[:12])
SESSION_PREFIX = f"turngate-test:{SESSION}:"


def _choose_server() -> None:
    if os.environ.get(URL_ENV):
        return
    if answers(DEFAULT_URL, timeout=0.2):
        os.environ[URL_ENV] = DEFAULT_URL
        return
    if not _STARTS_SESSION or shutil.which("redis-server") is None:
        return  # redis_url() fails with the reason
    folder = Path(tempfile.mkdtemp(prefix="turngate-redis-"))
    server = RedisServer(folder).start()
    os.environ[URL_ENV] = server.url

    def stop() -> None:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)

    atexit.register(stop)


def _forget_session_keys() -> None:
    url = os.environ.get(URL_ENV)
    if not _STARTS_SESSION or not url:
        return
    client = Redis.from_url(url, socket_timeout=2, retry=Retry(NoBackoff(), 0))
    try:
        stale = list(client.scan_iter(match=f"{SESSION_PREFIX}*", count=1000))
        for start in range(0, len(stale), 500):
            client.delete(*stale[start : start + 500])
    except (RedisError, OSError):
        pass  # a server gone at exit: its keys went with it
    finally:
        client.close()


_choose_server()
atexit.register(_forget_session_keys)  # runs before stop(): registered after it


def redis_url() -> str:
    url = os.environ.get(URL_ENV)
    if not url:
        pytest.fail(INSTALL, pytrace=False)
    return url


def key_prefix(where: Path | str) -> str:
    """A prefix of this session's own, the same for the same ``where`` in every process."""
    return f"{SESSION_PREFIX}{hashlib.sha256(str(where).encode()).hexdigest()[:16]}:"


def contract_store(where: Path) -> RedisStore:
    """The contract suite's Redis store: the session's server, keys of its own per ``where``."""
    # The contract is about CAS semantics, not latency: generous timeouts keep a loaded
    # 2-core CI machine from turning a slow answer into a 503 mid-race.
    return RedisStore(
        redis_url(),
        key_prefix=key_prefix(where),
        operation_ttl=3600.0,
        connect_timeout=5.0,
        command_timeout=10.0,
    )
