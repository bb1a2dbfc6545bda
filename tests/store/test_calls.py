"""The call log (router/store/calls.py) in every store — memory, SQLite, Redis: a session's calls
newest first, sessions by their latest call, bounded per session, in sessions and by age; and a
session's totals added up from its calls."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from router.store.calls import CallRecord, summarize
from tests.store.conftest import StoreFactory

pytestmark = pytest.mark.redis


def record(session: str, i: int, ts: float, **data: object) -> CallRecord:
    base = {"tier": "fast", "route": "r", "mistakes": [], "cost_usd": 0.001, "baseline_cost_usd": 0.01,
            "tokens": {"prompt": 100, "cached": 50, "output": 10}, "seconds": 0.5}  # fmt: skip
    return CallRecord(f"{session}-{i}", session, ts, {**base, **data})


async def test_a_sessions_calls_come_back_newest_first_and_sessions_by_their_latest(make_store: StoreFactory) -> None:
    store = await make_store()
    now = time.time()
    await store.calls_put([record("a", 0, now - 30), record("b", 0, now - 20)])
    await store.calls_put([record("a", 1, now - 10, tier="full", escalated=True)])
    got = await store.calls_get("a", 10)
    assert [r.id for r in got] == ["a-1", "a-0"] and got[0].data["tier"] == "full" and got[0].ts == now - 10
    assert await store.call_sessions(10) == ["a", "b"]
    assert await store.calls_get("a", 1) == got[:1] and await store.calls_get("nobody", 5) == []


async def test_the_log_is_bounded_per_session_in_sessions_and_by_age(make_store: StoreFactory) -> None:
    store = await make_store(max_calls_per_session=3, max_call_sessions=2, call_max_age=3600.0)
    now = time.time()
    await store.calls_put([record("a", i, now - 50 + i) for i in range(6)])
    assert [r.id for r in await store.calls_get("a", 10)] == ["a-5", "a-4", "a-3"]
    await store.calls_put([record("old", 0, now - 7200)])  # older than call_max_age
    assert await store.calls_get("old", 10) == []
    await store.calls_put([record("b", 0, now - 5)])
    await store.calls_put([record("c", 0, now)])
    assert await store.call_sessions(10) == ["c", "b"]  # "a", least recently active, let go


def test_a_sessions_totals_add_up_its_calls() -> None:
    calls = [
        record("s", 0, 100.0),
        record("s", 1, 101.0, tier="full", escalated=True, mistakes=["schema_violation"], cost_usd=0.011),
        record("s", 2, 102.0, route="sticky", tier="full", cost_usd=None, reported=1),
    ]
    total = summarize("s", calls)
    assert total["calls"] == 3 and total["tiers"] == {"fast": 1, "full": 2}
    assert total["escalated"] == 1 and total["sticky"] == 1 and total["mistakes"] == {"schema_violation": 1}
    assert total["reported"] == 1  # reached the agent: the call it said failed
    assert total["cost_usd"] == pytest.approx(0.012) and total["baseline_cost_usd"] == pytest.approx(0.02)
    assert total["saved_usd"] == pytest.approx(0.008) and total["unpriced"] == 1  # the unknown is left out
    assert total["tokens"] == {"prompt": 300, "cached": 150, "output": 30} and (total["first"], total["last"]) == (
        100.0,
        102.0,
    )


async def test_every_replica_hears_the_others_calls_and_not_its_own(make_store: StoreFactory) -> None:
    """Redis publishes each batch as it keeps it; the other stores have no other process to hear."""
    this, other = await make_store(), await make_store()  # two replicas: one backend
    heard: list[CallRecord] = []
    got = asyncio.Event()

    async def watch() -> None:
        async for record in other.calls_watch("replica-b"):
            heard.append(record)
            got.set()

    watching = asyncio.create_task(watch())
    try:
        await asyncio.sleep(0.3)  # subscribed
        await other.calls_put([record("b", 0, time.time())], "replica-b")  # its own: not relayed to it
        await this.calls_put([record("a", 0, time.time())], "replica-a")
        if this.backend == "redis":
            await asyncio.wait_for(got.wait(), 2)
            await asyncio.sleep(0.2)  # anything more would have come by now
            assert [r.id for r in heard] == ["a-0"] and heard[0].data["tier"] == "fast"
        else:
            await asyncio.wait_for(watching, 1)  # nothing to hear: the watch ends at once
            assert heard == []
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
