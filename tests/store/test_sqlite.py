"""SQLite-only behaviour: persistence across restarts, and an event loop that never waits on disk."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from router.store import Event, StoreOptions, open_store
from router.store.sqlite import SqliteStore


async def test_totals_persist_across_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "state.db"  # parent directories are created
    store = open_store(f"sqlite:///{path}")
    await store.start()
    store.record([Event("fast", "r", tool="t")] * 3 + [Event("fast", "r")] * 5)
    await store.close()  # close flushes
    assert path.exists()

    for expected in (5, 10):
        again = SqliteStore(path)
        await again.start()
        assert (await again.stats())["tiers"]["fast"]["calls"] == expected
        again.record([Event("fast", "r")] * 5)
        await again.close()

    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("SELECT n FROM totals WHERE tool = 't'").fetchone()[0] == 3
    finally:
        db.close()


async def test_relative_url_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store("sqlite:///./.agent-router/state.db")
    await store.start()
    store.record([Event("fast", "r")])
    await store.close()
    assert (tmp_path / ".agent-router" / "state.db").exists()


async def test_recording_10k_events_never_touches_disk_on_the_loop(tmp_path: Path) -> None:
    # Every SQL statement of 10k recorded events runs on the store's own writer thread, never on
    # the event loop's: checked by the thread that sqlite's trace callback sees for each statement
    # (deterministic, unlike timing the loop's stalls on a shared machine).
    path = tmp_path / "state.db"
    store = SqliteStore(path, StoreOptions(flush_interval=0.05, flush_events=500))
    await store.start()
    threads: list[str] = []

    def trace(_statement: str) -> None:
        threads.append(threading.current_thread().name)

    await store._run(lambda: store._conn().set_trace_callback(trace))
    now = time.time()
    for i in range(100):
        store.record(
            [Event("fast", f"r{j % 7}", tool=f"tool{i * 100 + j}", ts=now - 60 * (j % 30)) for j in range(100)]
        )
        await asyncio.sleep(0)
    await store.flush()
    await store.close()

    assert threads, "no statement was traced"
    assert {name.split("_")[0] for name in threads} == {"agent-router-sqlite"}, set(threads)
    assert threading.current_thread().name not in threads
    again = SqliteStore(path)
    await again.start()
    stats = await again.stats()
    await again.close()
    assert sum(t["calls"] for t in stats["tools"]["fast"].values()) == 10_000


async def test_store_errors_are_counted_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the database directory should be")
    store = SqliteStore(blocker / "state.db", StoreOptions(max_pending=2))
    await store.start()  # cannot open: serves on, unhealthy
    store.record([Event("fast", "a"), Event("fast", "b"), Event("fast", "c"), Event("fast", "a")])
    await store.flush()
    assert await store.sticky_take("s") is None
    stats = await store.stats()
    info = {k: stats["store"][k] for k in ("backend", "pending", "dropped", "healthy")}
    assert info == {"backend": "sqlite", "pending": 3, "dropped": 1, "healthy": False}
    assert stats["tiers"] == {}
    await store.close()
