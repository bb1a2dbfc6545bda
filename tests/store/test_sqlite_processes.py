"""One SQLite store file written by several processes at once (`serve --workers N`, or replicas on
one host): WAL and the busy timeout make them wait for each other; no counter is lost or doubled."""

from __future__ import annotations

import asyncio
import multiprocessing
from pathlib import Path

from router.store import Event, StoreOptions
from router.store.sqlite import SqliteStore

PROCESSES = 4
ROUNDS = 60
PER_ROUND = 50  # events per round: an answer on one of two routes, and every fifth a mistake


async def _write(path: str, worker: int) -> None:
    store = SqliteStore(path, StoreOptions(flush_interval=0.02, flush_events=40))
    await store.start()
    try:
        for i in range(ROUNDS):
            route = f"r{(worker + i) % 2}"
            events = [Event("fast", route, session=f"w{worker}")] * PER_ROUND
            events += [Event("fast", route, tool="t", kind="invalid_json")] * (PER_ROUND // 5)
            store.record(events)
            await asyncio.sleep(0.005)  # interleave with the other writers' flushes
    finally:
        await store.close()


def _writer(path: str, worker: int) -> None:
    asyncio.run(_write(path, worker))


async def test_several_writer_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w)) for w in range(PROCESSES)]
    for p in procs:
        p.start()
    for p in procs:
        await asyncio.to_thread(p.join, 120)
    assert [p.exitcode for p in procs] == [0] * PROCESSES
    store = SqliteStore(path)
    await store.start()
    try:
        stats = await store.stats()
    finally:
        await store.close()
    fast = stats["tiers"]["fast"]
    assert fast["calls"] == PROCESSES * ROUNDS * PER_ROUND
    assert fast["mistakes"] == {"invalid_json": PROCESSES * ROUNDS * PER_ROUND // 5}
    assert {name: r["calls"] for name, r in stats["routes"].items()} == {
        "r0": PROCESSES * ROUNDS * PER_ROUND // 2,
        "r1": PROCESSES * ROUNDS * PER_ROUND // 2,
    }
