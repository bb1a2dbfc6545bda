"""An error the agent reports at once is never missed with a Redis store.

Two routers (replicas A and B, one process each, as `create_app` builds them) share one real Redis.
Six agents at once each get a tool call from A, and report it failed the moment the answer is in,
to A (the same replica) or to B (the other one). Every report must be attributed to the tier that
made the call and make its session sticky: the call A delivered is in Redis before its answer's end
leaves A, and A knows it in process before that. Before, the routed call was written to Redis in the
background after the answer had gone, and reports sent within a few milliseconds found nothing.
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
import orjson
import pytest
from redis.asyncio import Redis

from router.fake import FakeConfig, FakeServer
from router.store import RoutedCall, StoreOptions
from router.store.redis import RedisStore
from tests.api.helpers import TOOLS
from tests.conftest import Proxy, policy_text
from tests.store.conftest import RedisServer, delete_prefix, free_port

pytestmark = pytest.mark.redis

AGENTS = 6
CHAINS = 60  # Responses chains continued at once on the other replica
EXTRA = "escalation: {to: full, after_agent_error: {sticky_calls: 2}}\n"
OPENING: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a weather agent."},
    {"role": "user", "content": "What is the weather in Paris?"},
]


async def _post(
    http: aiohttp.ClientSession, url: str, body: dict[str, Any], session: str
) -> tuple[dict[str, str], Any]:
    """(headers, the assistant message): a JSON answer, or a stream's deltas put together."""
    async with http.post(url + "/chat/completions", json=body, headers={"x-session-id": session}) as r:
        assert r.status == 200, await r.text()
        headers = {k.lower(): v for k, v in r.headers.items()}
        if not body.get("stream"):
            return headers, (await r.json())["choices"][0]["message"]
        calls: dict[int, dict[str, Any]] = {}
        async for line in r.content:
            if not line.startswith(b"data: {"):
                continue
            for choice in orjson.loads(line[6:]).get("choices") or ():
                for d in (choice.get("delta") or {}).get("tool_calls") or ():
                    blank = {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                    c = calls.setdefault(d["index"], blank)
                    c["id"] = d.get("id") or c["id"]
                    c["function"]["name"] += (d.get("function") or {}).get("name") or ""
                    c["function"]["arguments"] += (d.get("function") or {}).get("arguments") or ""
        return headers, {"role": "assistant", "content": None, "tool_calls": [calls[i] for i in sorted(calls)]}


async def _stats(http: aiohttp.ClientSession, proxy: Proxy) -> dict[str, Any]:
    async with http.get(proxy.url + "/router/stats") as r:
        data: dict[str, Any] = await r.json()
        return data


@pytest.fixture
async def pair(
    start_fake_: Callable[..., Awaitable[FakeServer]],
    proxy_: Callable[..., Awaitable[Proxy]],
    redis_base_url: str,
) -> Any:
    fast = await start_fake_(FakeConfig(seed=1))
    full = await start_fake_(FakeConfig(seed=2))
    prefix = f"agent-router-test:{uuid.uuid4().hex}:"
    policy = policy_text(fast.url, full.url, extra=EXTRA)
    a = await proxy_(policy, store=redis_base_url, store_prefix=prefix)
    b = await proxy_(policy, store=redis_base_url, store_prefix=prefix)
    yield a, b
    await delete_prefix(redis_base_url, prefix)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("to", ["same", "other"])
async def test_an_error_reported_at_once_is_counted_and_sticky(
    pair: tuple[Proxy, Proxy], to: str, stream: bool
) -> None:
    a, b = pair
    reported_to = a if to == "same" else b
    run = uuid.uuid4().hex[:8]

    async def agent(i: int, http: aiohttp.ClientSession) -> tuple[str, str]:
        session = f"at-once-{run}-{i}"
        body = {"model": "auto", "messages": OPENING, "tools": TOOLS, "stream": stream}
        headers, message = await _post(http, a.url, body, session)
        assert headers["x-router-tier"] == "fast" and message["tool_calls"], (headers, message)
        call = message["tool_calls"][0]
        failed = {"role": "tool", "tool_call_id": call["id"], "content": "Error: the weather service is down"}
        report = {**body, "messages": [*OPENING, message, failed]}
        headers, _ = await _post(http, reported_to.url, report, session)  # at once: no pause at all
        return headers["x-router-tier"], headers["x-router-route"]

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        answers = await asyncio.gather(*(agent(i, http) for i in range(AGENTS)))
        assert answers == [("full", "sticky")] * AGENTS, answers  # every session made sticky by its report
        for proxy in (a, b):
            await proxy.runtime.store.flush()
        stats = await _stats(http, a)
    assert stats["tiers"]["fast"]["mistakes"].get("agent_reported_error") == AGENTS, stats["tiers"]
    assert stats["tools"]["fast"]["get_weather"]["mistakes"].get("agent_reported_error") == AGENTS


async def test_a_frozen_redis_holds_an_answer_write_wait_at_most(
    redis_server_factory: Callable[[int], RedisServer],
) -> None:
    """Redis frozen (SIGSTOP) as a call's tool calls are put: the put returns after `write_wait`, its
    write going on; the delivering process knows the call meanwhile. Once the write lands, a call is
    taken once across replicas — by B from Redis, and then not again by A from its own record."""
    server = redis_server_factory(free_port())
    server.start()
    assert server.proc is not None
    options = StoreOptions(flush_interval=0.05, write_wait=0.1)
    a, b = (RedisStore(server.url, prefix="frozen:", options=options) for _ in range(2))
    await a.start()
    await b.start()
    first, second = RoutedCall("c1", "fast", "r", "t"), RoutedCall("c2", "fast", "r", "t")
    try:
        os.kill(server.proc.pid, signal.SIGSTOP)
        try:
            t0 = time.perf_counter()
            await a.routed_put("s", [first])
            held = time.perf_counter() - t0
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)  # thawed within the socket timeout: the write lands
        assert 0.09 < held < 0.3, f"the answer's end was held {held * 1000:.0f} ms"
        admin = Redis.from_url(server.url, socket_timeout=2)
        try:
            for _ in range(100):  # the write goes on after the put returned: it lands within 2 s
                if await admin.hexists("frozen:r:s", "c1"):
                    break
                await asyncio.sleep(0.02)
        finally:
            await admin.aclose()
        assert await b.routed_take("s", "c1") == first  # landed in Redis: the other replica takes it
        assert await a.routed_take("s", "c1") is None  # taken there: not counted twice

        os.kill(server.proc.pid, signal.SIGSTOP)  # frozen for good: the write gives up
        try:
            await a.routed_put("s", [second])
            assert await a.routed_take("s", "c2") == second  # known here, though Redis never got it
            assert await a.routed_take("s", "c2") is None  # once
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
    finally:
        await a.close()
        await b.close()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_response_chain_is_continued_at_once_on_the_other_replica(
    pair: tuple[Proxy, Proxy], stream: bool
) -> None:
    """A Responses turn answered by A, its follow-up sent to B the moment A's answer ends, all at
    once: B finds every chain, since A's end waits for it to be in Redis (`store_write_wait`). (At
    this load it passed before too: B reads a miss once more 50 ms later, `MISS_GRACE`.)"""
    a, b = pair

    async def agent(i: int, http: aiohttp.ClientSession) -> int:
        first = {"model": "auto", "input": f"chain {i}: what is the weather in Paris?", "stream": stream}
        async with http.post(a.url + "/responses", json=first) as r:
            assert r.status == 200, await r.text()
            raw = await r.read()
        if stream:  # the response's id, from its first event
            created = next(line for line in raw.split(b"\n") if line.startswith(b"data: {"))
            response_id = orjson.loads(created[6:])["response"]["id"]
        else:
            response_id = orjson.loads(raw)["id"]
        follow = {"model": "auto", "input": "and tomorrow?", "previous_response_id": response_id}
        async with http.post(b.url + "/responses", json=follow) as r:  # at once, to the other replica
            return r.status

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        statuses = await asyncio.gather(*(agent(i, http) for i in range(CHAINS)))
    assert statuses == [200] * CHAINS
