"""Coalesced writes: a lone write goes at once, writes that queue behind it share the next round trip;
nothing is lost when the leading caller is cancelled. And the Redis store's routed calls, put by
many calls ending together, all readable after fewer round trips than calls."""

from __future__ import annotations

import asyncio

import pytest

from router.store import RoutedCall, StoreOptions
from router.store.coalesce import Coalescer
from router.store.redis import RedisStore
from tests.store.conftest import free_port


class Slow:
    """A write that takes `delay` seconds and records each batch it was given."""

    def __init__(self, delay: float = 0.01) -> None:
        self.delay = delay
        self.batches: list[list[int]] = []

    async def __call__(self, batch: list[int]) -> None:
        await asyncio.sleep(self.delay)
        self.batches.append(batch)


async def test_lone_write_goes_at_once() -> None:
    write = Slow(0)
    c = Coalescer(write)
    await c.put(1)
    await c.put(2)
    assert write.batches == [[1], [2]]


async def test_writes_behind_one_in_flight_share_a_round_trip() -> None:
    write = Slow(0.02)
    c = Coalescer(write, max_items=10)
    done: list[int] = []

    async def put(i: int) -> None:
        await c.put(i)
        assert any(i in b for b in write.batches)  # returned only once written
        done.append(i)

    await asyncio.gather(*(put(i) for i in range(25)))
    assert sorted(done) == list(range(25))
    assert sorted(x for b in write.batches for x in b) == list(range(25))
    assert write.batches[0] == [0]  # the first went alone, at once
    assert [len(b) for b in write.batches[1:]] == [10, 10, 4]  # the rest queued behind it, bounded
    assert (c.writes, c.items) == (4, 25)


async def test_writes_within_the_delay_share_a_round_trip() -> None:
    write = Slow(0)
    c = Coalescer(write, delay=0.05)

    async def later(i: int) -> None:
        await asyncio.sleep(0.01 * i)
        await c.put(i)

    await asyncio.gather(*(later(i) for i in range(3)))
    assert write.batches == [[0, 1, 2]]


async def test_cancelled_leader_leaves_nothing_behind() -> None:
    write = Slow(0.05)
    c = Coalescer(write)
    leader = asyncio.create_task(c.put(0))
    await asyncio.sleep(0.01)  # the leader's write is in flight
    waiters = [asyncio.create_task(c.put(i)) for i in range(1, 6)]
    await asyncio.sleep(0.01)
    leader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader
    await asyncio.wait_for(asyncio.gather(*waiters), 5)
    assert sorted(x for b in write.batches for x in b) == [1, 2, 3, 4, 5]  # 0 was cancelled with its caller


@pytest.mark.redis
async def test_redis_routed_puts_coalesce(redis_server_factory) -> None:
    server = redis_server_factory(free_port())  # our own: this test flushes the server's scripts
    server.start()
    # generous deadlines: this test is about how many writes 200 puts take, and on a loaded machine
    # opening a burst of pooled connections can take longer than the production 0.25 s
    store = RedisStore(server.url, "t:", StoreOptions(), connect_timeout=5.0, socket_timeout=5.0, op_timeout=10.0)
    await store.start()
    try:
        calls = [RoutedCall(f"call_{i}", "fast", "tools", "read_file", f'{{"i": {i}}}') for i in range(200)]
        await asyncio.gather(*(store.routed_put(f"s{i % 20}", [c]) for i, c in enumerate(calls)))
        got = await asyncio.gather(*(store.routed_get(f"s{i % 20}", c.call_id) for i, c in enumerate(calls)))
        assert got == calls
        assert store._routed.items == 200 and store._routed.writes < 50, (store._routed.writes, store._routed.items)
        await store._redis.script_flush()  # as after a restart without persistence: the script is gone
        late = RoutedCall("call_late", "full", "tools", "write_file")
        await store.routed_put("s0", [late])
        assert await store.routed_get("s0", "call_late") == late
    finally:
        await store.close()
