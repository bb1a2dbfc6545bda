"""previous_response_id through the store: a restarted SQLite proxy, two proxies sharing Redis, and a
Redis that goes away. Real uvicorn proxies, the fake upstream, the openai SDK, real SQLite and Redis."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import openai
import pytest

from router.fake import FakeServer
from tests.api.helpers import fake_requests
from tests.conftest import Proxy, policy_text
from tests.responses.conftest import TOOLS, recv_response
from tests.store.conftest import RedisServer, delete_prefix, free_port

ESCALATE = "escalation: {to: full}\n"
ProxyFactory = Callable[..., Awaitable[Proxy]]


def lookups(proxy: Proxy, outcome: str) -> float:
    labels = {"op": "lookup", "outcome": outcome}
    return proxy.runtime.metrics.registry.get_sample_value("router_response_state_total", labels) or 0.0


async def stored(proxy: Proxy, n: int) -> None:
    """Wait until the proxy's writer has stored `n` responses (the test then kills the backend)."""
    labels = {"op": "write", "outcome": "stored"}
    for _ in range(500):
        if (proxy.runtime.metrics.registry.get_sample_value("router_response_state_total", labels) or 0) >= n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{n} responses were not stored")


async def last_messages(fake: FakeServer) -> list[dict[str, Any]]:
    """The chat messages of the upstream's latest request."""
    return (await fake_requests(fake.url))[-1]["body"]["messages"]  # type: ignore[no-any-return]


@pytest.fixture
async def redis_prefix(redis_base_url: str) -> AsyncIterator[str]:
    prefix = f"agent-router-test:{uuid.uuid4().hex}:"
    yield prefix
    await delete_prefix(redis_base_url, prefix)


async def test_sqlite_proxy_resolves_ids_from_before_a_restart(
    fake: FakeServer, proxy_: ProxyFactory, sdk: Callable[..., openai.AsyncOpenAI], tmp_path: Path
) -> None:
    policy, store = policy_text(fake.url, extra=ESCALATE), f"sqlite:///{tmp_path}/state.db"
    before = await proxy_(policy, store=store)
    first = await sdk(before.url).responses.create(model="auto", input="Weather in Paris?", tools=TOOLS)
    async with sdk(before.url).responses.connect() as conn:
        call = first.output[0]
        assert call.type == "function_call"
        output = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
        await conn.response.create(model="auto", previous_response_id=first.id, input=[output])
        second = (await recv_response(conn))[-1].response
        await conn.response.create(model="auto", previous_response_id=second.id, input="secret", store=False)
        private = (await recv_response(conn))[-1].response
    history = await last_messages(fake)
    await before.stop()  # flushes what is queued, closes the store

    after = await proxy_(policy, store=store)
    client = sdk(after.url)
    third = await client.responses.create(model="auto", previous_response_id=second.id, input="thanks")
    assert third.status == "completed"
    sent = await last_messages(fake)
    assert sent[:3] == history[:3] and sent[3] == {"role": "assistant", "content": second.output_text}
    assert sent[4:] == [{"role": "user", "content": "thanks"}]
    assert lookups(after, "store") == 1
    async with client.responses.connect() as conn:  # WebSocket mode on a new connection: the same
        await conn.response.create(model="auto", previous_response_id=first.id, input=[output])
        assert (await recv_response(conn))[-1].type == "response.completed"
        await conn.response.create(model="auto", previous_response_id=private.id, input="x")
        [err] = await recv_response(conn)  # store=false was never written
        assert err.type == "error" and err.code == "previous_response_not_found"
        await conn.response.create(model="auto", previous_response_id=third.id, input="still open")
        assert (await recv_response(conn))[-1].type == "response.completed"
    with pytest.raises(openai.BadRequestError) as unknown:
        await client.responses.create(model="auto", previous_response_id="resp_never", input="x")
    assert unknown.value.code == "previous_response_not_found"


async def test_two_proxies_sharing_redis_resolve_each_others_ids(
    redis_base_url: str,
    redis_prefix: str,  # before proxy_: set up first, so its clean-up runs after the proxies have closed
    fake: FakeServer,
    proxy_: ProxyFactory,
    sdk: Callable[..., openai.AsyncOpenAI],
) -> None:
    policy = policy_text(fake.url, extra=ESCALATE)
    a = await proxy_(policy, store=redis_base_url, store_prefix=redis_prefix)
    b = await proxy_(policy, store=redis_base_url, store_prefix=redis_prefix)
    on_a, on_b = sdk(a.url), sdk(b.url)
    expected: list[dict[str, Any]] = [{"role": "user", "content": "one"}]

    one = await on_a.responses.create(model="auto", input="one")
    async with on_b.responses.connect() as conn:  # the next turn on the other replica, WebSocket mode
        await conn.response.create(model="auto", previous_response_id=one.id, input="two")
        two = (await recv_response(conn))[-1].response
    expected += [{"role": "assistant", "content": one.output_text}, {"role": "user", "content": "two"}]
    assert await last_messages(fake) == expected

    stream = await on_a.responses.create(model="auto", previous_response_id=two.id, input="three", stream=True)
    three = [e async for e in stream][-1].response  # back on A, streamed
    expected += [{"role": "assistant", "content": two.output_text}, {"role": "user", "content": "three"}]
    assert await last_messages(fake) == expected

    four = await on_b.responses.create(model="auto", previous_response_id=three.id, input="four")
    expected += [{"role": "assistant", "content": three.output_text}, {"role": "user", "content": "four"}]
    assert await last_messages(fake) == expected and four.status == "completed"
    assert lookups(a, "store") == 1 and lookups(b, "store") == 2

    private = await on_a.responses.create(model="auto", previous_response_id=four.id, input="x", store=False)
    for proxy, client in ((a, on_a), (b, on_b)):  # unknown ids and store=false: still a clear 400
        for rid in ("resp_never", private.id):
            with pytest.raises(openai.BadRequestError) as err:
                await client.responses.create(model="auto", previous_response_id=rid, input="x")
            assert err.value.code == "previous_response_not_found", proxy.url


async def test_redis_outage_fails_only_lookups_that_need_the_store(
    fake: FakeServer,
    proxy_: ProxyFactory,
    sdk: Callable[..., openai.AsyncOpenAI],
    redis_server_factory: Callable[[int], RedisServer],
) -> None:
    server = redis_server_factory(free_port())
    server.start()
    policy = policy_text(fake.url, extra=ESCALATE)
    a = await proxy_(policy, store=server.url, store_prefix="outage:")
    on_a = sdk(a.url, timeout=10)  # a hang would fail the test instead of stalling it
    first = await on_a.responses.create(model="auto", input="one")
    await stored(a, 1)
    server.kill()

    # nothing here needs the store: a new chain, and a chain this process still holds
    assert (await on_a.responses.create(model="auto", input="fresh")).status == "completed"
    again = await on_a.responses.create(model="auto", previous_response_id=first.id, input="two")
    assert again.status == "completed"
    async with on_a.responses.connect() as conn:
        await conn.response.create(model="auto", previous_response_id=again.id, input="three")
        assert (await recv_response(conn))[-1].type == "response.completed"

    # starts while Redis is down: only when the policy says the store is not required
    b = await proxy_(policy + "store_required: false\n", store=server.url, store_prefix="outage:")
    on_b = sdk(b.url, timeout=10)
    with pytest.raises(openai.BadRequestError) as err:
        await on_b.responses.create(model="auto", previous_response_id=first.id, input="two")
    assert err.value.code == "previous_response_not_found" and "unreachable" in str(err.value)
    async with on_b.responses.connect() as conn:
        await conn.response.create(model="auto", previous_response_id=first.id, input="two")
        [event] = await recv_response(conn)
        assert event.type == "error" and event.code == "previous_response_not_found"
        await conn.response.create(model="auto", input="the socket stays open")
        assert (await recv_response(conn))[-1].type == "response.completed"
    assert lookups(b, "unreachable") >= 2

    server.start()  # the same data (AOF): B resolves A's response once it reconnects
    for _ in range(100):
        try:
            found = await on_b.responses.create(model="auto", previous_response_id=first.id, input="back")
            break
        except openai.BadRequestError:
            await asyncio.sleep(0.1)
    else:
        raise AssertionError("the response stayed unresolvable after Redis came back")
    assert found.status == "completed" and lookups(b, "store") == 1


async def test_a_locked_store_never_holds_back_an_answer(
    fake: FakeServer, proxy_: ProxyFactory, sdk: Callable[..., openai.AsyncOpenAI], tmp_path: Path
) -> None:
    path = tmp_path / "state.db"
    proxy = await proxy_(policy_text(fake.url, extra=ESCALATE), store=f"sqlite:///{path}")
    client = sdk(proxy.url, timeout=10)
    first = await client.responses.create(model="auto", input="one")
    await stored(proxy, 1)
    lock = sqlite3.connect(path, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")  # the store's writer now waits (up to its 2 s busy timeout)
    try:
        stream = await client.responses.create(model="auto", previous_response_id=first.id, input="two", stream=True)
        async for event in stream:
            if event.type == "response.completed":
                assert proxy.runtime.responses.queued == 1  # out, while its write waits for the lock
        async with client.responses.connect() as conn:
            await conn.response.create(model="auto", previous_response_id=event.response.id, input="three")
            done = (await recv_response(conn))[-1]
            assert done.type == "response.completed" and proxy.runtime.responses.queued >= 1
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    await stored(proxy, 3)


async def test_a_frozen_redis_fails_a_lookup_instead_of_hanging(
    fake: FakeServer,
    proxy_: ProxyFactory,
    sdk: Callable[..., openai.AsyncOpenAI],
    redis_server_factory: Callable[[int], RedisServer],
) -> None:
    server = redis_server_factory(free_port())
    server.start()
    assert server.proc is not None
    policy = policy_text(fake.url, extra=ESCALATE)
    a = await proxy_(policy, store=server.url, store_prefix="frozen:")
    b = await proxy_(policy, store=server.url, store_prefix="frozen:")
    first = await sdk(a.url).responses.create(model="auto", input="one")
    await stored(a, 1)
    server.proc.send_signal(signal.SIGSTOP)  # connections stay open and nothing answers: the worst case
    try:
        with pytest.raises(openai.BadRequestError) as err:  # B must ask the store: it gives up, as designed
            await sdk(b.url, timeout=10).responses.create(model="auto", previous_response_id=first.id, input="2")
        assert err.value.code == "previous_response_not_found" and "unreachable" in str(err.value)
    finally:
        server.proc.send_signal(signal.SIGCONT)
    assert lookups(b, "unreachable") == 1
