"""One contract, three stores: memory, SQLite (tmp file) and Redis (real server, own key prefix)."""

from __future__ import annotations

import asyncio
import time

import pytest

from router.constants import BUCKET_SECONDS
from router.store import Event, RoutedCall
from router.store.base import CANCELLED, ESCALATED, MISTAKEN, SALVAGED, bucket_of
from tests.store.conftest import StoreFactory

pytestmark = pytest.mark.redis


def events() -> list[Event]:
    """The events the stats are checked against, stamped now (not when the module was collected)."""
    return [
        *[Event("fast", "simple")] * 4,
        *[Event("fast", "simple", tool="read_file")] * 2,
        Event("fast", "simple", tool="read_file", kind="invalid_json"),
        Event("fast", "simple", kind=MISTAKEN),
        Event("fast", "simple", tool="read_file", kind=MISTAKEN),
        Event("fast", "simple", kind="missing_tool_call"),
        Event("fast", "simple", kind=MISTAKEN),
        *[Event("full", "default")] * 2,
        Event("full", "default", tool="write_file"),
    ]


MISTAKES = {"invalid_json": 1, "missing_tool_call": 1}


async def test_stats_shape_and_numbers(make_store: StoreFactory) -> None:
    store = await make_store()
    store.record(events())
    await store.flush()
    stats = await store.stats()
    assert stats == {
        "tiers": {
            "fast": {"calls": 4, "mistakes": MISTAKES, "mistake_rate": 0.5, "escalations": 0, "salvaged": 0},
            "full": {"calls": 2, "mistakes": {}, "mistake_rate": 0.0, "escalations": 0, "salvaged": 0},
        },
        "routes": {
            "default": {"calls": 2, "mistakes": {}, "mistake_rate": 0.0, "escalations": 0, "salvaged": 0},
            "simple": {"calls": 4, "mistakes": MISTAKES, "mistake_rate": 0.5, "escalations": 0, "salvaged": 0},
        },
        "tools": {
            "fast": {
                "read_file": {
                    "calls": 2,
                    "mistakes": {"invalid_json": 1},
                    "mistake_rate": 0.5,
                    "escalations": 0,
                    "salvaged": 0,
                }
            },
            "full": {"write_file": {"calls": 1, "mistakes": {}, "mistake_rate": 0.0, "escalations": 0, "salvaged": 0}},
        },
        "shadow": {},
        "lanes": {},
        "store": stats["store"],
    }
    info = stats["store"]
    assert (info["backend"], info["pending"], info["dropped"], info["healthy"]) == (
        store.backend,
        0,
        0,
        True,
    )
    assert store.dropped == 0
    assert await store.stats(window_seconds=600) == stats  # everything is recent


async def test_escalations_are_counted_apart_from_mistakes(make_store: StoreFactory) -> None:
    store = await make_store()
    store.record([Event("fast", "r"), Event("fast", "r", kind=ESCALATED), Event("full", "r")])
    store.record([Event("full", "r", tool="t"), Event("full", "r", tool="t", kind=SALVAGED)])
    await store.flush()
    stats = await store.stats()
    assert stats["tiers"]["fast"] == {"calls": 1, "mistakes": {}, "mistake_rate": 0.0, "escalations": 1, "salvaged": 0}
    assert stats["routes"]["r"] == {"calls": 2, "mistakes": {}, "mistake_rate": 0.0, "escalations": 1, "salvaged": 1}
    assert stats["tools"]["full"]["t"]["salvaged"] == 1 and stats["tiers"]["full"]["salvaged"] == 1


async def test_cancelled_calls_are_counted_apart_from_calls(make_store: StoreFactory) -> None:
    store = await make_store()
    store.record([Event("fast", "r"), Event("fast", "r", kind=CANCELLED), Event("fast", "r", kind=CANCELLED)])
    await store.flush()
    stats = await store.stats()
    assert stats["tiers"]["fast"]["calls"] == 1 and stats["tiers"]["fast"]["cancelled"] == 2
    assert stats["tiers"]["fast"]["mistake_rate"] == 0.0 and "cancelled" in stats["routes"]["r"]


async def test_mistake_rate_is_the_share_of_calls_with_a_mistake(make_store: StoreFactory) -> None:
    """One call with two kinds of mistake counts once in the rate, under each kind in `mistakes`."""
    store = await make_store()
    store.record(
        [
            Event("fast", "r"),
            Event("fast", "r", tool="t"),
            Event("fast", "r", tool="t", kind="invalid_json"),
            Event("fast", "r", tool="t", kind="schema_violation"),
            Event("fast", "r", kind=MISTAKEN),
            Event("fast", "r", tool="t", kind=MISTAKEN),
            Event("fast", "r"),
        ]
    )
    await store.flush()
    stats = await store.stats()
    both = {"invalid_json": 1, "schema_violation": 1}
    assert stats["tiers"]["fast"] == {
        "calls": 2,
        "mistakes": both,
        "mistake_rate": 0.5,
        "escalations": 0,
        "salvaged": 0,
    }
    assert stats["tools"]["fast"]["t"] == {
        "calls": 1,
        "mistakes": both,
        "mistake_rate": 1.0,
        "escalations": 0,
        "salvaged": 0,
    }


async def test_window_vs_all_time_and_series(make_store: StoreFactory) -> None:
    store = await make_store()
    now = time.time()
    recent = bucket_of(now)
    hour_ago = bucket_of(now - 3600)
    store.record([Event("fast", "r", ts=now)] * 3)
    store.record([Event("fast", "r", kind="timeout", ts=hour_ago + 5)] * 2)
    store.record([Event("fast", "r", kind=MISTAKEN, ts=hour_ago + 5)] * 2)
    store.record([Event("full", "r", ts=now - 9 * 24 * 3600)])  # older than retention: totals only
    await store.flush()

    all_time = await store.stats()
    assert all_time["tiers"]["fast"] == {
        "calls": 3,
        "mistakes": {"timeout": 2},
        "mistake_rate": 0.6667,
        "escalations": 0,
        "salvaged": 0,
    }
    assert all_time["tiers"]["full"]["calls"] == 1
    last_10_min = await store.stats(window_seconds=600)
    assert last_10_min["tiers"] == {
        "fast": {"calls": 3, "mistakes": {}, "mistake_rate": 0.0, "escalations": 0, "salvaged": 0}
    }
    last_2_h = await store.stats(window_seconds=7200)
    assert last_2_h["tiers"] == {
        "fast": {"calls": 3, "mistakes": {"timeout": 2}, "mistake_rate": 0.6667, "escalations": 0, "salvaged": 0}
    }
    assert last_2_h["routes"] == {"r": last_2_h["tiers"]["fast"]}

    assert await store.series(now - 7200) == [
        (float(hour_ago), "fast", "r", "", MISTAKEN, 2),
        (float(hour_ago), "fast", "r", "", "timeout", 2),
        (float(recent), "fast", "r", "", "", 3),
    ]
    assert await store.series(now - 600) == [(float(recent), "fast", "r", "", "", 3)]
    day = 24 * 3600
    assert await store.series(now - 2 * 3600, bucket=day) == sorted(
        [
            (float(bucket_of(hour_ago, day)), "fast", "r", "", MISTAKEN, 2),
            (float(bucket_of(hour_ago, day)), "fast", "r", "", "timeout", 2),
            (float(bucket_of(recent, day)), "fast", "r", "", "", 3),
        ]
    )
    assert await store.series(now - 600, bucket=BUCKET_SECONDS + 59) == await store.series(now - 600)
    assert await store.series(now - 600, bucket=1) == await store.series(now - 600)
    with pytest.raises(ValueError, match="> 0"):
        await store.series(now, bucket=0)


async def test_series_rebuckets(make_store: StoreFactory) -> None:
    store = await make_store()
    base = bucket_of(time.time() - 3600, 600)  # a 10-minute boundary an hour ago
    store.record([Event("fast", "r", tool="t", ts=base + 60 * i + 1) for i in range(12)])
    await store.flush()
    rows = await store.series(base)
    assert rows == [(float(base + 60 * i), "fast", "r", "t", "", 1) for i in range(12)]
    assert await store.series(base, bucket=600) == [
        (float(base), "fast", "r", "t", "", 10),
        (float(base + 600), "fast", "r", "t", "", 2),
    ]


async def test_sticky_take_decrements(make_store: StoreFactory) -> None:
    store = await make_store()
    assert await store.sticky_take("s1") is None
    await store.sticky_set("s1", "full", 2)
    assert [await store.sticky_take("s1") for _ in range(3)] == ["full", "full", None]
    await store.sticky_set("s1", "full", 5)
    await store.sticky_set("s1", "fast", 1)  # a new set replaces the old one
    assert [await store.sticky_take("s1") for _ in range(2)] == ["fast", None]
    await store.sticky_set("s2", "full", 3)
    await store.sticky_set("s2", "full", 0)  # 0 clears
    assert await store.sticky_take("s2") is None


async def test_sticky_take_is_atomic(make_store: StoreFactory) -> None:
    store = await make_store()
    await store.sticky_set("s", "full", 10)
    taken = await asyncio.gather(*[store.sticky_take("s") for _ in range(30)])
    assert taken.count("full") == 10 and taken.count(None) == 20


async def test_session_state_expires(make_store: StoreFactory) -> None:
    store = await make_store(session_ttl=0.3)
    await store.sticky_set("s", "full", 5)
    await store.routed_put("s", [RoutedCall("c1", "fast", "simple", "read_file")])
    assert await store.sticky_take("s") == "full"
    assert await store.routed_get("s", "c1") is not None
    await asyncio.sleep(0.5)
    assert await store.sticky_take("s") is None
    assert await store.routed_get("s", "c1") is None
    await store.routed_put("s", [RoutedCall("c2", "fast", "simple", "x")])  # a fresh start
    assert await store.routed_get("s", "c1") is None
    assert await store.routed_get("s", "c2") is not None


async def test_routed_put_get(make_store: StoreFactory) -> None:
    store = await make_store()
    c1 = RoutedCall("call_1", "fast", "simple", "read_file", '{"path": "a.py"}')
    c2 = RoutedCall("call_2", "full", "default", "write_file", "{}")
    await store.routed_put("s", [c1, c2])
    await store.routed_put("s", [])
    assert await store.routed_get("s", "call_1") == c1
    assert await store.routed_get("s", "call_2") == c2
    assert await store.routed_get("s", "call_3") is None
    assert await store.routed_get("other", "call_1") is None
    c1b = RoutedCall("call_1", "full", "default", "read_file", '{"path": "ü.py"}')
    await store.routed_put("s", [c1b])
    assert await store.routed_get("s", "call_1") == c1b


async def test_routed_take_forgets_the_call(make_store: StoreFactory) -> None:
    store = await make_store()
    c1 = RoutedCall("call_1", "fast", "simple", "read_file", "{}")
    c2 = RoutedCall("call_2", "fast", "simple", "read_file", "{}")
    await store.routed_put("s", [c1, c2])
    assert await store.routed_take("s", "call_1") == c1
    assert await store.routed_take("s", "call_1") is None  # once only
    assert await store.routed_get("s", "call_1") is None
    assert await store.routed_get("s", "call_2") == c2
    assert await store.routed_take("nobody", "call_2") is None
    await store.routed_put("s", [RoutedCall("call_3", "full", "default", "x", "{}")])  # the session goes on
    assert {c.call_id for c in [c1, c2] if await store.routed_get("s", c.call_id)} == {"call_2"}


@pytest.mark.parametrize("limit", [8, 256])
async def test_routed_calls_are_bounded_per_session(make_store: StoreFactory, limit: int) -> None:
    store = await make_store(max_routed_per_session=limit)
    total = limit + 44
    calls = [RoutedCall(f"c{i}", "fast", "r", "t") for i in range(total)]
    for i in range(0, total, 7):
        await store.routed_put("s", calls[i : i + 7])
    oldest = calls[total - limit]
    await store.routed_put("s", [oldest])  # a re-put call becomes the newest...
    new = RoutedCall("new", "fast", "r", "t")
    await store.routed_put("s", [new])  # ...so this evicts the one after it
    expected = {oldest.call_id, "new", *[f"c{i}" for i in range(total - limit + 2, total)]}
    kept = {c.call_id for c in [*calls, new] if await store.routed_get("s", c.call_id) is not None}
    assert len(expected) == limit
    assert kept == expected


async def test_concurrent_records_are_all_counted(make_store: StoreFactory) -> None:
    store = await make_store(flush_events=50)

    async def agent(i: int) -> None:
        for j in range(100):
            store.record([Event("fast", f"r{i % 3}"), Event("fast", f"r{i % 3}", tool=f"t{j % 5}")])
            if j % 10 == 0:
                await store.flush()
            await asyncio.sleep(0)

    await asyncio.gather(*[agent(i) for i in range(50)])
    await store.flush()
    stats = await store.stats()
    assert stats["tiers"]["fast"]["calls"] == 5000
    assert sum(r["calls"] for r in stats["routes"].values()) == 5000
    assert sum(t["calls"] for t in stats["tools"]["fast"].values()) == 5000
    assert stats["store"]["pending"] == 0


async def test_reopen_keeps_totals(make_store: StoreFactory, request: pytest.FixtureRequest) -> None:
    if "memory" in request.node.callspec.id:
        pytest.skip("memory:// keeps nothing across instances by design")
    store = await make_store()
    store.record(events())
    await store.sticky_set("s", "full", 2)
    await store.close()
    again = await make_store()
    assert (await again.stats())["tiers"]["fast"]["calls"] == 4
    if store.backend != "redis":  # embedded stores keep session state in process memory, by design
        assert await again.sticky_take("s") is None
        return
    assert await again.sticky_take("s") == "full"
    store2 = await make_store()  # two live instances share one backend, like two replicas
    assert await store2.sticky_take("s") == "full"
    assert await again.sticky_take("s") is None


async def test_record_never_raises(make_store: StoreFactory) -> None:
    store = await make_store()
    store.record([Event("fast", "r"), None, Event(None, "r")])  # type: ignore[list-item, arg-type]
    store.record([Event("fast", "r")])
    await store.flush()
    assert (await store.stats())["tiers"]["fast"]["calls"] == 2
    assert store.dropped == 2
