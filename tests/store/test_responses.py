"""Response state in the three stores (router/store/responses.py): chains of deltas with checkpoints,
lifetimes, bounds, and a store that cannot answer. Real SQLite files and a real Redis."""

from __future__ import annotations

import asyncio
import base64
import os
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis

from router.store import Store, StoreOptions, open_store
from router.store.memory import MemoryStore
from router.store.redis import RedisStore
from router.store.responses import ResponseRecord, Row, StoreUnreachable, decode, parse_value, redis_prefix
from router.store.sqlite import SqliteStore
from tests.store.conftest import StoreFactory, free_port

pytestmark = pytest.mark.redis


def turn(i: int, size: int = 40) -> list[dict[str, Any]]:
    """The messages one turn adds: a tool result and the next call."""
    return [
        {"role": "tool", "tool_call_id": f"call_{i - 1}", "content": f"result {i} " + "x" * size},
        {"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{i}", "type": "function"}]},
    ]


def chain(n: int, prefix: str = "resp_", session: str = "s1") -> list[ResponseRecord]:
    """n records of one conversation, each continuing the one before."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    out: list[ResponseRecord] = []
    for i in range(n):
        history = [*history, *turn(i)]
        added = 2 if i else 3  # the first response also holds the opening user message
        parent = out[-1].id if out else None
        out.append(ResponseRecord(f"{prefix}{i}", parent, session, tuple(history), added))
    return out


async def raw_row(store: Store, response_id: str) -> Row | None:
    """The entry as the backend holds it, read behind the store's back."""
    if isinstance(store, MemoryStore):
        return store._responses.read(response_id, 0.0)
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as db:
            r = db.execute("SELECT hops, parent, session, data FROM responses WHERE id = ?", (response_id,)).fetchone()
        return None if r is None else Row(r[0], r[1], r[2], bytes(r[3]))
    assert isinstance(store, RedisStore)
    client = Redis.from_url(store.url)
    try:
        value = await client.get(redis_prefix(store.prefix) + response_id)
    finally:
        await client.aclose()
    return None if value is None else parse_value(value)


async def test_chain_round_trip_with_checkpoints(make_store: StoreFactory) -> None:
    store = await make_store(responses_checkpoint_every=4)
    records = chain(10)
    assert await store.responses_put(records[:3]) == ["stored"] * 3  # one batch, parents first
    for r in records[3:]:
        assert await store.responses_put([r]) == ["stored"]
    for r in records:
        found = await store.responses_get(r.id)
        assert found is not None and found.messages == list(r.messages) and found.session == "s1"
        whole = len(orjson.dumps(list(r.messages)))  # size: the JSON of each entry's part, summed
        assert whole <= found.size <= whole + 2 * 4
    rows = [await raw_row(store, r.id) for r in records]
    assert [row.hops if row else None for row in rows] == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert [row.parent if row else None for row in rows] == [
        "",
        "resp_0",
        "resp_1",
        "resp_2",
        "",
        *[f"resp_{i}" for i in (4, 5, 6)],
        "",
        "resp_8",
    ]
    # a delta holds only what its response added; a checkpoint the whole history
    delta, checkpoint = rows[5], rows[4]
    assert delta is not None and decode(delta.data)[0] == list(records[5].messages[-2:])
    assert checkpoint is not None and decode(checkpoint.data)[0] == list(records[4].messages)
    assert await store.responses_get("resp_unknown") is None
    assert await store.responses_get("resp_" + "x" * 500) is None


async def test_an_entry_without_its_parent_is_a_checkpoint(make_store: StoreFactory) -> None:
    store = await make_store()
    orphan = chain(3)[2]  # its parent was never stored (store=false, a failed write, another process)
    assert await store.responses_put([orphan]) == ["stored"]
    row = await raw_row(store, orphan.id)
    assert row is not None and (row.hops, row.parent) == (0, "")
    found = await store.responses_get(orphan.id)
    assert found is not None and found.messages == list(orphan.messages)


async def test_sessions_and_messages_are_kept_exactly(make_store: StoreFactory) -> None:
    store = await make_store()
    odd = "user:line one\nline two ünïcode 🙂 with spaces"
    history = (
        {"role": "user", "content": [{"type": "text", "text": "é\n\x00"}]},
        {"role": "assistant", "content": "ok"},
    )
    record = ResponseRecord("resp_odd", None, odd, history, 2)
    assert await store.responses_put([record]) == ["stored"]
    found = await store.responses_get("resp_odd")
    assert found is not None and found.session == odd and found.messages == list(history)


async def test_entries_over_the_size_bound_are_not_stored(make_store: StoreFactory) -> None:
    store = await make_store(responses_max_entry_bytes=4096)
    noise = base64.b64encode(os.urandom(6000)).decode()  # does not compress under the bound
    big = ResponseRecord("resp_big", None, "s", ({"role": "user", "content": noise},), 1)
    small = chain(1)[0]
    assert await store.responses_put([big, small]) == ["too_big", "stored"]
    assert await store.responses_get("resp_big") is None
    child = ResponseRecord("resp_child", "resp_big", "s", (*big.messages, {"role": "user", "content": "hi"}), 1)
    assert await store.responses_put([child]) == ["too_big"]  # a checkpoint would hold the big one too
    assert await store.responses_get("resp_0") is not None


async def test_a_chain_in_use_outlives_the_ttl_of_its_first_entry(make_store: StoreFactory) -> None:
    store = await make_store(responses_ttl=1.0)
    first, second, third = chain(3)
    await store.responses_put([first])
    await asyncio.sleep(0.7)
    await store.responses_put([second])  # extends `first` to now + 1 s
    await asyncio.sleep(0.6)  # `first` would have expired by now on its own
    found = await store.responses_get(second.id)
    assert found is not None and found.messages == list(second.messages)
    assert await store.responses_put([third]) == ["stored"]
    assert (await raw_row(store, third.id)) is not None
    await asyncio.sleep(1.2)
    assert await store.responses_get(third.id) is None
    assert await store.responses_get(first.id) is None


async def test_sqlite_prunes_expired_then_soonest_to_expire(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SqliteStore(path, StoreOptions(responses_max_rows=5, flush_interval=0.05))
    await store.start()
    try:
        old, new = chain(3, "resp_old_"), chain(4, "resp_new_")
        await store.responses_put(old)
        await asyncio.sleep(0.05)
        await store.responses_put(new)
        await store._housekeep()  # what the flusher runs every minute
        with sqlite3.connect(path) as db:
            kept = sorted(r[0] for r in db.execute("SELECT id FROM responses"))
        # the oldest chain's two newest entries went first; what is left still resolves
        assert kept == ["resp_new_0", "resp_new_1", "resp_new_2", "resp_new_3", "resp_old_0"]
        assert await store.responses_get("resp_new_3") is not None
        assert await store.responses_get("resp_old_0") is not None
    finally:
        await store.close()


async def test_sqlite_keeps_responses_across_a_restart(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    records = chain(5)
    first = open_store(url)
    await first.start()
    await first.responses_put(records)
    await first.close()
    again = open_store(url)
    await again.start()
    try:
        found = await again.responses_get(records[-1].id)
        assert found is not None and found.messages == list(records[-1].messages)
    finally:
        await again.close()


async def test_an_unreachable_redis_fails_fast_and_never_raises_on_write() -> None:
    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", prefix="nobody:", options=StoreOptions())
    await store.start()  # nothing listens: starts unhealthy
    try:
        assert await store.responses_put(chain(2)) == ["failed", "failed"]
        with pytest.raises(StoreUnreachable):
            await store.responses_get("resp_0")
    finally:
        await store.close()


async def test_an_unreadable_sqlite_store_is_unreachable_for_lookups(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the database directory should be")
    store = SqliteStore(blocker / "state.db")
    await store.start()
    try:
        assert await store.responses_put(chain(1)) == ["failed"]
        with pytest.raises(StoreUnreachable):
            await store.responses_get("resp_0")
    finally:
        await store.close()
