"""`agent-router serve --workers N`: real processes on one port, the store rule, shutdown and reload.

Each test runs `python -m router serve` as a subprocess (uvicorn's supervisor and its workers) in
front of a fake upstream, and talks to it over loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson
import pytest
from pydantic import SecretStr

from router.serve import export, store_notice
from router.settings import Settings
from tests.conftest import free_socket, policy_text

ROOT = Path(__file__).resolve().parents[1]
BODY = orjson.dumps({"model": "auto", "messages": [{"role": "user", "content": "hello"}]})


@dataclass
class Served:
    proc: asyncio.subprocess.Process
    base: str
    log: Path

    def workers(self) -> set[int]:
        """Pids of the supervisor's worker processes (multiprocessing spawn children)."""
        found = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            if ppid == self.proc.pid and b"spawn_main" in cmdline:
                found.add(int(entry.name))
        return found


def established(pid: int, port: int, state: str = "01") -> int:
    """Connections accepted on `port` that process `pid` holds (its socket fds, matched in /proc/net/tcp);
    `state` "0A": its listening sockets on `port` instead."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] == state and fields[9] in inodes:  # 01: ESTABLISHED, 0A: LISTEN
                count += 1
    return count


def _port() -> int:
    sock = free_socket()
    port = int(sock.getsockname()[1])
    sock.close()
    return port


@contextlib.asynccontextmanager
async def serve(tmp_path: Path, policy: str, *args: str) -> AsyncIterator[Served]:
    path = tmp_path / "policy.yaml"
    path.write_text(policy)
    port = _port()
    log_path = tmp_path / "serve.log"
    log = log_path.open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "router", "serve", "--policy", str(path), "--port", str(port), *args,
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
    )  # fmt: skip
    served = Served(proc, f"http://127.0.0.1:{port}", log_path)
    workers = int(args[args.index("--workers") + 1]) if "--workers" in args else 1
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as probe:
            for _ in range(300):  # bounded: 30 s for imports and every worker's start-up
                if proc.returncode is not None:
                    break
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with probe.get(served.base + "/healthz") as resp:
                        pids = served.workers() or {proc.pid}
                        if resp.status == 200 and sum(established(p, port, "0A") for p in pids) == workers:
                            break  # every worker listens
                await asyncio.sleep(0.1)
        assert proc.returncode is None, log_path.read_text()
        yield served
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        log.close()


async def _calls(base: str, n: int, concurrency: int = 8) -> list[int]:
    """`n` chat calls, each on a fresh connection (so the kernel spreads them over the workers)."""
    statuses: list[int] = []
    todo = iter(range(n))

    async def worker() -> None:
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as s:
            for _ in todo:
                async with s.post(base + "/v1/chat/completions", data=BODY,
                                  headers={"content-type": "application/json"}) as resp:  # fmt: skip
                    await resp.read()
                    statuses.append(resp.status)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statuses


async def _counted(base: str, expect: int, limit: float = 15.0) -> int:
    """Calls the store counted (all tiers), polled until it reaches `expect` or `limit` seconds pass
    (each worker flushes its counters every half second)."""
    deadline = time.monotonic() + limit
    total = -1
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s:
        while time.monotonic() < deadline:
            async with s.get(base + "/v1/router/stats") as resp:
                stats = await resp.json()
            total = sum(t["calls"] for t in stats["tiers"].values())
            if total >= expect:
                return total
            await asyncio.sleep(0.2)
    return total


def test_store_rule() -> None:
    with pytest.raises(ValueError, match="memory://"):
        store_notice("memory://", 2)
    sqlite = store_notice("sqlite:///./state.db", 4)
    assert "4 workers" in sqlite and "sticky sessions" in sqlite and "Per worker" in sqlite
    redis = store_notice("redis://127.0.0.1:6379/0", 2)
    assert "sessions" in redis and "sticky" not in redis


def test_settings_reach_the_workers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What the flags set is what a worker's `Settings()` reads back from the environment."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_ROUTER_")}
    environ["AGENT_ROUTER_STORE"] = "sqlite:///from-env.db"  # the flag's None wins over the environment
    monkeypatch.setattr(os, "environ", environ)  # export() writes os.environ: this copy, for this test only
    given = Settings(
        policy=tmp_path / "p.yaml", port=9999, store=None, log_level="warning", reload_policy=False,
        client_keys=[SecretStr("sk-one"), SecretStr("sk-two")], ws_idle_timeout=12.5,
    )  # fmt: skip
    assert Settings() != given
    export(given)
    read = Settings()
    assert "AGENT_ROUTER_STORE" not in environ
    assert read == given
    assert [k.get_secret_value() for k in read.client_keys] == ["sk-one", "sk-two"]


async def test_memory_store_refused_with_workers(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(policy_text("http://127.0.0.1:9/v1"))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "router", "serve", "--policy", str(path), "--port", str(_port()), "--workers", "2",
        cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1, (out, err)
    assert b"--workers 2 needs a store the workers share" in err


async def test_two_workers_share_sqlite_counters(fake, tmp_path: Path) -> None:
    """Two worker processes write one SQLite file: every call is counted once, none lost."""
    db = tmp_path / "state.db"
    async with serve(tmp_path, policy_text(fake.url), "--workers", "2", "--store", f"sqlite:///{db}",
                     "--log-level", "warning") as served:  # fmt: skip
        assert len(served.workers()) == 2
        statuses = await _calls(served.base, 300)
        assert statuses == [200] * 300
        assert await _counted(served.base, 300) == 300
        assert "Per worker: sticky sessions" in served.log.read_text()


async def test_sigterm_finishes_calls_in_flight(start_fake_, tmp_path: Path) -> None:
    slow = await start_fake_(delay_ms=1500)
    async with serve(tmp_path, policy_text(slow.url), "--workers", "2", "--store", f"sqlite:///{tmp_path}/s.db",
                     "--log-level", "info") as served:  # fmt: skip
        workers = served.workers()
        assert len(workers) == 2
        calls = asyncio.create_task(_calls(served.base, 4, concurrency=4))
        await asyncio.sleep(0.7)  # the four calls are waiting on the slow upstream
        served.proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(calls, 30) == [200] * 4
        assert await asyncio.wait_for(served.proc.wait(), 30) == 0
        alive = [pid for pid in workers if os.path.exists(f"/proc/{pid}")]  # noqa: ASYNC240
        assert alive == []
        log = served.log.read_text()
        assert "received SIGTERM: stopping every worker" in log and log.count("Application shutdown complete") == 2


async def test_sighup_replaces_every_worker(fake, tmp_path: Path) -> None:
    """SIGHUP: a rolling restart (uvicorn's), calls answered throughout."""
    async with serve(tmp_path, policy_text(fake.url), "--workers", "2", "--store", f"sqlite:///{tmp_path}/h.db",
                     "--log-level", "info") as served:  # fmt: skip
        before = served.workers()
        assert len(before) == 2
        served.proc.send_signal(signal.SIGHUP)
        statuses: list[int] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            statuses += await _calls(served.base, 4, concurrency=2)
            now = served.workers()
            if len(now) == 2 and not now & before:
                break
            await asyncio.sleep(0.2)
        assert len(now) == 2 and not now & before, (before, now)
        assert statuses and set(statuses) == {200}
        assert set(await _calls(served.base, 8)) == {200}


async def test_connections_spread_over_the_workers(fake, tmp_path: Path) -> None:
    """A burst of keep-alive connections lands on every worker (each listens with SO_REUSEPORT),
    not mostly on the one that woke first, as with one shared socket."""
    async with serve(tmp_path, policy_text(fake.url), "--workers", "2", "--store", f"sqlite:///{tmp_path}/b.db",
                     "--log-level", "warning") as served:  # fmt: skip
        port = int(served.base.rsplit(":", 1)[1])
        connector = aiohttp.TCPConnector(limit=48)
        async with aiohttp.ClientSession(connector=connector) as s:
            async def call() -> int:
                async with s.post(served.base + "/v1/chat/completions", data=BODY,
                                  headers={"content-type": "application/json"}) as resp:  # fmt: skip
                    await resp.read()
                    return resp.status

            assert await asyncio.gather(*(call() for _ in range(48))) == [200] * 48
            held = [established(pid, port) for pid in served.workers()]
        assert sum(held) == 48, held
        assert min(held) >= 12, held  # about 24 each; fewer than 12 of 48 by chance: p < 0.001


async def test_a_dead_worker_is_replaced(fake, tmp_path: Path) -> None:
    async with serve(tmp_path, policy_text(fake.url), "--workers", "2", "--store", f"sqlite:///{tmp_path}/d.db",
                     "--log-level", "info") as served:  # fmt: skip
        before = served.workers()
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            now = served.workers()
            if len(now) == 2 and victim not in now:
                break
            await asyncio.sleep(0.2)
        assert len(now) == 2 and victim not in now, now
        assert set(await _calls(served.base, 16)) == {200}
        assert f"worker {victim} exited with -9; starting another" in served.log.read_text()


async def test_port_taken(fake, tmp_path: Path) -> None:
    taken = free_socket()
    taken.listen()
    port = taken.getsockname()[1]
    try:
        path = tmp_path / "policy.yaml"
        path.write_text(policy_text(fake.url))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "router", "serve", "--policy", str(path), "--port", str(port), "--workers", "2",
            "--store", f"sqlite:///{tmp_path}/t.db", cwd=ROOT, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        taken.close()
    assert proc.returncode == 1, (out, err)
    assert b"cannot listen on 127.0.0.1:" in err and b"Address already in use" in err


async def test_metrics_sum_every_worker(fake, tmp_path: Path) -> None:
    """Whichever worker answers a scrape, /metrics counts the calls of all of them."""
    async with serve(tmp_path, policy_text(fake.url), "--workers", "2", "--store", f"sqlite:///{tmp_path}/m.db",
                     "--log-level", "warning") as served:  # fmt: skip
        assert await _calls(served.base, 40) == [200] * 40
        seen = []
        for _ in range(8):  # fresh connections: the scrapes land on both workers
            connector = aiohttp.TCPConnector(force_close=True)
            async with aiohttp.ClientSession(connector=connector) as s, s.get(served.base + "/metrics") as resp:
                text = await resp.text()
            calls = [line for line in text.splitlines() if line.startswith("router_calls_total{")]
            seen.append(sum(float(line.rsplit(" ", 1)[1]) for line in calls))
        assert seen == [40.0] * 8


GC_PROBE = """
import asyncio, gc, sys
from pathlib import Path
from router.app import create_app
from router.settings import Settings

async def main():
    app = create_app(Settings(policy=Path(sys.argv[1]), reload_policy=False, warm_up=False))
    async with app.router.lifespan_context(app):
        print(gc.get_threshold()[0], gc.get_freeze_count() > 0)

asyncio.run(main())
"""


def test_the_app_alone_leaves_the_garbage_collector_alone(tmp_path: Path) -> None:
    """A host application that mounts the router keeps its own collector settings: `serve`'s server
    tunes them (router/connections.py `Server`), not the app's start-up."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(policy_text("http://127.0.0.1:9/v1"))
    out = subprocess.run(
        [sys.executable, "-c", GC_PROBE, str(policy)], capture_output=True, text=True, timeout=60, cwd=ROOT, check=True
    )
    assert out.stdout.split() == ["700", "False"], out.stderr[-2000:]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's TCP_DEFER_ACCEPT")
@pytest.mark.parametrize("workers", [1, 2])
async def test_silent_connections_never_reach_a_worker(
    fake, tmp_path: Path, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`serve`'s listening sockets defer connections that send nothing (defer_accept): in one process
    and in every worker, 20 silent connections are held by the kernel, not by the server (not even
    for the 0.5 s header timeout); the moment one sends a request, it is served."""
    args = ["--workers", str(workers), "--store", f"sqlite:///{tmp_path}/s.db"] if workers > 1 else []
    monkeypatch.setenv("AGENT_ROUTER_HEADER_TIMEOUT", "0.5")
    async with serve(tmp_path, policy_text(fake.url), *args, "--log-level", "warning") as served:
        port = int(served.base.rsplit(":", 1)[1])
        pids = served.workers() or {served.proc.pid}
        silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(20)]
        try:
            await asyncio.sleep(1.5)  # three header timeouts
            assert sum(established(pid, port) for pid in pids) == 0
            for reader, _ in silent:
                with pytest.raises(TimeoutError):  # nothing was answered (no 408): never accepted
                    await asyncio.wait_for(reader.read(1), 0.01)
            reader, writer = silent[0]
            writer.write(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            assert (await asyncio.wait_for(reader.readuntil(b"}"), 5)).startswith(b"HTTP/1.1 200")
        finally:
            for _, writer in silent:
                writer.close()


async def test_the_store_variable_holds_when_no_option_is_given(tmp_path: Path) -> None:
    """AGENT_ROUTER_STORE decides over the policy's `store` unless `--store` is given: here memory://,
    which two workers cannot share, over the policy's SQLite file."""
    path = tmp_path / "policy.yaml"
    text = policy_text("http://127.0.0.1:9/v1")
    path.write_text(text.replace("store: memory://", f"store: sqlite:///{tmp_path / 'state.db'}"))  # shareable
    env = {**os.environ, "AGENT_ROUTER_STORE": "memory://"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "router", "serve", "--policy", str(path), "--port", str(_port()), "--workers", "2",
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1, (out, err)
    assert b"--workers 2 needs a store the workers share" in err
