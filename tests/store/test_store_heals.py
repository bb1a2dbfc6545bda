"""Two routers on one real Redis, its pool bounded to 3 connections, lose Redis under calls — killed
(SIGKILL, then started again on its AOF) or frozen (SIGSTOP, then SIGCONT) — and heal without a restart.

While Redis is gone every call is still answered, and `/readyz` (still 200: the replica serves) and
the stats say the store is degraded: since when, and why. Within `HEAL` seconds of Redis coming
back both replicas' stores work again: the stats say healthy, an error reported on one replica
makes a call the other delivered sticky, and a Responses chain started on one resolves on the
other; once the calls stop, every counter buffered meanwhile is flushed (none pending, none
dropped) and the calls add up exactly.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from router.fake import FakeConfig, FakeServer
from tests.api.helpers import TOOLS
from tests.conftest import Proxy, policy_text
from tests.store.conftest import RedisServer, free_port

pytestmark = pytest.mark.redis

HEAL = 3.0  # seconds from Redis back to both replicas' stores working again
EXTRA = "escalation: {to: full, after_agent_error: {sticky_calls: 2}}\n"
OPENING: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a weather agent."},
    {"role": "user", "content": "What is the weather in Paris?"},
]


async def _json(http: aiohttp.ClientSession, method: str, url: str, **kwargs: Any) -> tuple[int, Any]:
    async with http.request(method, url, **kwargs) as r:
        return r.status, await r.json()


async def _store(http: aiohttp.ClientSession, proxy: Proxy) -> dict[str, Any]:
    status, stats = await _json(http, "GET", proxy.url + "/router/stats")
    assert status == 200
    store: dict[str, Any] = stats["store"]
    return store


async def _within(seconds: float, ok: Callable[[], Awaitable[bool]]) -> float:
    """Poll `ok` every 0.05 s until it holds: the seconds it took; fails past `seconds`."""
    start = time.monotonic()
    while not await ok():
        assert time.monotonic() - start < seconds, f"not within {seconds} s"
        await asyncio.sleep(0.05)
    return time.monotonic() - start


async def _sticky_across(http: aiohttp.ClientSession, a: Proxy, b: Proxy) -> tuple[str, str]:
    """A delivers a tool call; the agent reports it failed to B at once: B's (tier, route)."""
    session = f"heal-{uuid.uuid4().hex[:8]}"
    body = {"model": "auto", "messages": OPENING, "tools": TOOLS}
    headers = {"x-session-id": session}
    status, answer = await _json(http, "POST", a.url + "/chat/completions", json=body, headers=headers)
    assert status == 200, answer
    message = answer["choices"][0]["message"]
    failed = {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "Error: no such city"}
    report = {**body, "messages": [*OPENING, message, failed]}
    async with http.post(b.url + "/chat/completions", json=report, headers=headers) as r:
        assert r.status == 200
        return r.headers["x-router-tier"], r.headers["x-router-route"]


async def _chain_across(http: aiohttp.ClientSession, a: Proxy, b: Proxy) -> int:
    """A Responses turn on A, the next one on B naming it: B's status."""
    status, first = await _json(http, "POST", a.url + "/responses", json={"model": "auto", "input": "hello"})
    assert status == 200, first
    follow = {"model": "auto", "input": "and then?", "previous_response_id": first["id"]}
    status, _ = await _json(http, "POST", b.url + "/responses", json=follow)
    return status


@pytest.mark.parametrize("how", ["killed", "frozen"])
async def test_a_replica_heals_within_seconds_of_redis_coming_back(
    how: str,
    start_fake_: Callable[..., Awaitable[FakeServer]],
    proxy_: Callable[..., Awaitable[Proxy]],
    redis_server_factory: Callable[[int], RedisServer],
) -> None:
    server = redis_server_factory(free_port())
    server.start()
    fast = await start_fake_(FakeConfig(seed=1))
    full = await start_fake_(FakeConfig(seed=2))
    policy = policy_text(fast.url, full.url, extra=EXTRA)
    url = server.url + "?max_connections=3"  # as the tester had it: a small pool
    a = await proxy_(policy, store=url, store_prefix="heal:")
    b = await proxy_(policy, store=url, store_prefix="heal:")
    sent, failures, stop = 0, [], asyncio.Event()

    async def agent(i: int, http: aiohttp.ClientSession) -> None:
        nonlocal sent
        for n in range(100_000):  # bounded; stopped by the test
            if stop.is_set():
                return
            body = {"model": "auto", "messages": [{"role": "user", "content": f"weather {i} {n}"}], "tools": TOOLS}
            async with http.post((a, b)[n % 2].url + "/chat/completions", json=body) as r:
                await r.read()
                sent += 1
                if r.status != 200:
                    failures.append(r.status)
            await asyncio.sleep(0.005)

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http:
        agents = [asyncio.create_task(agent(i, http)) for i in range(12)]
        try:
            await asyncio.sleep(1.0)
            assert all([(await _store(http, p))["healthy"] for p in (a, b)])
            assert server.proc is not None
            pid = server.proc.pid
            down_at = time.time()
            if how == "killed":
                server.kill()
            else:
                os.kill(pid, signal.SIGSTOP)
            try:

                async def degraded() -> bool:
                    return not any([(await _store(http, p))["healthy"] for p in (a, b)])

                await _within(5.0, degraded)
                for p in (a, b):
                    store = await _store(http, p)
                    assert down_at - 1 <= store["since"] <= time.time() and store["error"], store
                    status, ready = await _json(http, "GET", p.base + "/readyz")
                    assert status == 200 and ready["status"] == "ready", ready  # it serves: it stays in
                    assert ready["store"]["healthy"] is False and ready["store"]["since"] == store["since"]
                    assert ready["store"]["error"]
                await asyncio.sleep(1.0)  # calls go on meanwhile
            finally:
                if how == "killed":
                    server.start()  # same port, same AOF
                else:
                    os.kill(pid, signal.SIGCONT)
            back = time.monotonic()

            async def healed() -> bool:
                stores = [await _store(http, p) for p in (a, b)]
                return all(s["healthy"] and "since" not in s for s in stores)

            await _within(HEAL, healed)
            # shared again within HEAL of Redis' return, under the same calls
            assert await _sticky_across(http, a, b) == ("full", "sticky")
            assert await _sticky_across(http, b, a) == ("full", "sticky")
            assert await _chain_across(http, a, b) == 200
            assert await _chain_across(http, b, a) == 200
            assert time.monotonic() - back < HEAL + 2.0
            for p in (a, b):
                status, ready = await _json(http, "GET", p.base + "/readyz")
                assert status == 200 and ready == {"status": "ready"}, ready
        finally:
            stop.set()
            await asyncio.gather(*agents)
        assert not failures, f"{len(failures)} of {sent} calls failed: {sorted(set(failures))}"

        async def flushed() -> bool:
            stores = [await _store(http, p) for p in (a, b)]
            return all(s["pending"] == 0 and s["healthy"] for s in stores)

        await _within(HEAL, flushed)
        for p in (a, b):
            store = await _store(http, p)
            assert store["dropped"] == 0, store
        status, stats = await _json(http, "GET", a.url + "/router/stats")
    # every call counted once, the outage's too: the load's, the two sticky checks' and the two chains'
    answered = sent + 2 * 2 + 2 * 2
    assert sum(t["calls"] for t in stats["tiers"].values()) == answered, (stats["tiers"], answered)
