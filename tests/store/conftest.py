"""Fixtures for the store tests: real SQLite files, real Redis servers (shared or our own)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from router.store import Store, StoreOptions, open_store


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_answers(host: str, port: int, timeout: float = 0.3) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """A redis-server process of our own, on a fixed port, that tests may kill and restart.

    Persistence is on (AOF, fsync always) so that a SIGKILL loses nothing that was acknowledged
    — like a production Redis — and totals can be checked exactly across a crash."""

    def __init__(self, binary: str, port: int, workdir: Path) -> None:
        self.binary, self.port, self.workdir = binary, port, workdir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--dir",
                str(self.workdir),
                "--enable-debug-command",
                "local",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if redis_answers("127.0.0.1", self.port):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # SIGKILL
            self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture
def redis_server_factory(tmp_path: Path) -> Iterator[Callable[[int], RedisServer]]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (needed to simulate a Redis outage)")
    servers: list[RedisServer] = []

    def make(port: int) -> RedisServer:
        server = RedisServer(binary, port, tmp_path / f"redis-{port}")
        servers.append(server)
        return server

    yield make
    for s in servers:
        s.kill()


@pytest.fixture(scope="session")
def redis_base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of our own on a free port for the whole session (the machine's Redis may be
    shared: the tests never write to it), else skip."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (scripts/install installs it)")
    server = RedisServer(binary, free_port(), tmp_path_factory.mktemp("redis"))
    server.start()
    yield server.url
    server.kill()


async def delete_prefix(url: str, prefix: str) -> None:
    client = Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        cursor: int = 0
        for _ in range(10_000):  # bounded SCAN walk
            cursor, keys = await client.scan(cursor, match=f"{prefix}*", count=1000)
            if keys:
                await client.delete(*keys)
            if cursor == 0:
                break
    finally:
        await client.aclose()


StoreFactory = Callable[..., Awaitable[Store]]


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """`await make_store(**StoreOptions fields)` → a started store of the parametrized backend.
    Stores made by the same test share their backend (file / key prefix), like a restart."""
    kind: str = request.param
    made: list[Store] = []
    prefix = f"agent-router-test:{uuid.uuid4().hex}:"
    redis_url = request.getfixturevalue("redis_base_url") if kind == "redis" else ""

    async def make(**opts: float) -> Store:
        options = StoreOptions(**{"flush_interval": 0.05, **opts})  # type: ignore[arg-type]
        if kind == "memory":
            store = open_store("memory://", options)
        elif kind == "sqlite":
            store = open_store(f"sqlite:///{tmp_path}/state/db.sqlite", options)
        else:
            store = open_store(redis_url, options, prefix=prefix)
        await store.start()
        made.append(store)
        return store

    yield make
    for store in made:
        await store.close()
    if kind == "redis":
        await delete_prefix(redis_url, prefix)
