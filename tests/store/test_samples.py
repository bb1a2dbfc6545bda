"""Shadow / QA samples (router/store/samples.py) in every store: memory, SQLite, Redis."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from router.store import Event
from router.store.base import SHADOW_AGREE, SHADOW_DISAGREE, SHADOW_ERROR, SHADOW_UNSURE, Sample
from tests.store.conftest import StoreFactory

pytestmark = pytest.mark.redis

REQUEST = {"model": "auto", "messages": [{"role": "user", "content": "weather in Paris ü"}], "tools": []}


def sample(route: str = "r", i: int = 0, **kw: object) -> Sample:
    answer = {"role": "assistant", "content": f"answer {i}"}
    return Sample(route=route, tier="fast", request=REQUEST, answer=answer, **kw)  # type: ignore[arg-type]


async def test_put_get_round_trip_newest_first(make_store: StoreFactory) -> None:
    store = await make_store()
    now = time.time()
    kept = [sample(i=i, ts=now - 10 + i) for i in range(5)]
    for s in reversed(kept):  # written out of order: read back by time, newest first
        await store.samples_put(s)
    await store.samples_put(sample("other", 9))
    got = await store.samples_get("r", 3)
    assert got == list(reversed(kept))[:3]
    assert got[0].request == REQUEST and got[0].answer == {"role": "assistant", "content": "answer 4"}
    assert await store.samples_get("r", 0) == []
    assert await store.samples_get("nobody", 10) == []
    assert await store.samples_routes() == ["other", "r"]


async def test_a_re_put_sample_is_replaced_in_place(make_store: StoreFactory) -> None:
    store = await make_store()
    first, second = sample(i=1, ts=time.time() - 5), sample(i=2)
    await store.samples_put(first)
    await store.samples_put(second)
    verdict = {"score": 80, "pass": True, "reason": "same call", "difference": "", "judge": "full", "unsure": False}
    judged = dataclasses.replace(first, reference_tier="full", reference={"role": "assistant"}, verdict=verdict)
    await store.samples_put(judged)
    got = await store.samples_get("r", 10)
    assert [s.id for s in got] == [second.id, first.id]  # still ordered by its first time
    assert got[1] == judged


@pytest.mark.parametrize("most", [1, 4])
async def test_samples_are_bounded_per_route(make_store: StoreFactory, most: int) -> None:
    store = await make_store(max_samples_per_route=most)
    now = time.time()
    written = [sample(i=i, ts=now - 100 + i) for i in range(most + 6)]
    for s in written:
        await store.samples_put(s)
    await store.samples_put(sample("other"))  # another route is trimmed on its own
    assert [s.id for s in await store.samples_get("r", 100)] == [s.id for s in reversed(written)][:most]
    assert len(await store.samples_get("other", 100)) == 1


async def test_samples_are_bounded_in_age(make_store: StoreFactory) -> None:
    store = await make_store(sample_max_age=60)
    old = sample(i=1, ts=time.time() - 120)
    await store.samples_put(old)  # already too old: never read back
    assert await store.samples_get("r", 10) == []
    fresh = sample(i=2)
    await store.samples_put(fresh)
    assert await store.samples_get("r", 10) == [fresh]
    aging = sample("aging", 3, ts=time.time() - 59.5)
    await store.samples_put(aging)
    assert await store.samples_get("aging", 10) == [aging]
    await asyncio.sleep(0.6)  # now it is older than the bound
    assert await store.samples_get("aging", 10) == []
    assert await store.samples_routes() == ["r"]


async def test_samples_survive_a_restart(make_store: StoreFactory, request: pytest.FixtureRequest) -> None:
    if "memory" in request.node.callspec.id:
        pytest.skip("memory:// keeps nothing across instances by design")
    store = await make_store()
    kept = sample(i=7)
    await store.samples_put(kept)
    await store.close()
    again = await make_store()  # e.g. `agent-router qa` reading what `serve` kept
    assert await again.samples_get("r", 10) == [kept]


async def test_shadow_counters_are_their_own_key(make_store: StoreFactory) -> None:
    store = await make_store()
    outcomes = [SHADOW_AGREE] * 3 + [SHADOW_DISAGREE, SHADOW_UNSURE, SHADOW_ERROR]
    store.record([Event("fast", "r"), *[Event("fast", "r", kind=k) for k in outcomes]])
    await store.flush()
    stats = await store.stats()
    assert stats["shadow"] == {
        "r": {"samples": 5, "agreed": 3, "disagreed": 1, "unsure": 1, "errors": 1, "agreement": 0.75}
    }
    # never a call, a mistake or an escalation
    assert stats["routes"]["r"] == {"calls": 1, "mistakes": {}, "mistake_rate": 0.0, "escalations": 0, "salvaged": 0}
    assert stats["tiers"]["fast"]["calls"] == 1
    assert (await store.stats(window_seconds=600))["shadow"] == stats["shadow"]


async def test_lane_counters_are_their_own_key(make_store: StoreFactory) -> None:
    store = await make_store()
    kinds = ["lane_served"] * 2 + ["lane_capped", "lane_busy"]
    store.record(
        [Event("full", "r"), *[Event("", "fast", kind=k) for k in kinds], Event("", "flex", kind="lane_refused")]
    )
    await store.flush()
    stats = await store.stats()
    assert stats["lanes"] == {
        "fast": {"served": 2, "standard": 0, "capped": 1, "refused": 0, "busy": 1},
        "flex": {"served": 0, "standard": 0, "capped": 0, "refused": 1, "busy": 0},
    }
    assert set(stats["routes"]) == {"r"} and set(stats["tiers"]) == {"full"}  # never a call or a mistake
    assert (await store.stats(window_seconds=600))["lanes"] == stats["lanes"]
