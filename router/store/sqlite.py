"""The embedded default store: one SQLite file in WAL mode (`sqlite:///./.agent-router/state.db`).

All SQLite work runs on one dedicated thread that owns the only connection, so the event loop
never blocks on disk and no connection is shared between threads. `record()` only touches the
in-memory buffer (see buffer.py); the flusher UPSERTs aggregated batches, each in one
transaction (atomic, so a failed batch is simply retried). Bucket rows older than `retention`
are pruned; all-time totals live in their own table. Several processes may share one file
(WAL + busy timeout); sessions then are shared too.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from router.store.base import (
    BUCKET_SECONDS,
    RoutedCall,
    SeriesRow,
    StoreOptions,
    aggregate,
    bucket_of,
    rebucket,
    window_start,
)
from router.store.buffer import Batch, BufferedStore

log = logging.getLogger("router.store")
T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS counters (
  bucket INTEGER NOT NULL, tier TEXT NOT NULL, route TEXT NOT NULL, tool TEXT NOT NULL,
  kind TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (bucket, tier, route, tool, kind)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS totals (
  tier TEXT NOT NULL, route TEXT NOT NULL, tool TEXT NOT NULL, kind TEXT NOT NULL,
  n INTEGER NOT NULL, PRIMARY KEY (tier, route, tool, kind)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sticky (
  session TEXT PRIMARY KEY, tier TEXT NOT NULL, calls_left INTEGER NOT NULL, expires REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS routed_sessions (session TEXT PRIMARY KEY, expires REAL NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS routed (
  id INTEGER PRIMARY KEY, session TEXT NOT NULL, call_id TEXT NOT NULL, tier TEXT NOT NULL,
  route TEXT NOT NULL, tool TEXT NOT NULL, arguments TEXT NOT NULL, UNIQUE (session, call_id)
);
CREATE INDEX IF NOT EXISTS routed_recent ON routed (session, id);
CREATE INDEX IF NOT EXISTS sticky_expiry ON sticky (expires);
CREATE INDEX IF NOT EXISTS routed_sessions_expiry ON routed_sessions (expires);
"""
UPSERT_BUCKET = (
    "INSERT INTO counters (bucket, tier, route, tool, kind, n) VALUES (?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (bucket, tier, route, tool, kind) DO UPDATE SET n = n + excluded.n"
)
UPSERT_TOTAL = (
    "INSERT INTO totals (tier, route, tool, kind, n) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (tier, route, tool, kind) DO UPDATE SET n = n + excluded.n"
)


class SqliteStore(BufferedStore):
    backend = "sqlite"

    def __init__(self, path: str | Path, options: StoreOptions | None = None, *, op_timeout: float = 1.0):
        super().__init__(options)
        self.path = Path(path)
        self.op_timeout = op_timeout  # a session call gives up (None) after this long
        self._db: sqlite3.Connection | None = None  # touched only on the writer thread
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agent-router-sqlite")

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r})"

    # -- the writer thread ------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            if str(self.path) != ":memory:":
                self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=2.0, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.executescript(SCHEMA)
            except BaseException:
                db.close()
                raise
            self._db = db
        return self._db

    def _txn(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        db = self._conn()
        db.execute("BEGIN IMMEDIATE")
        try:
            out = fn(db)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return out

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, functools.partial(fn, *args))

    async def _session_op(self, what: str, fn: Callable[..., T], *args: Any) -> T | None:
        """Run a session call on the writer thread; on error or timeout log and answer None."""
        if not self._session_ok():
            return None
        try:
            return await asyncio.wait_for(self._run(fn, *args), self.op_timeout)
        except (sqlite3.Error, OSError, TimeoutError) as exc:
            self._mark_down(exc, what)
        except Exception as exc:  # e.g. used after close(): still never break a call
            log.warning("sqlite store %s failed: %s", what, self._describe(exc))
        return None

    # -- BufferedStore hooks ----------------------------------------------------------------

    async def _open(self) -> None:
        await self._run(self._conn)

    async def _write(self, batch: Batch) -> None:
        def write(db: sqlite3.Connection) -> None:
            items = list(batch.counts.items())
            db.executemany(UPSERT_BUCKET, [(*k, n) for k, n in items])
            totals: dict[tuple[str, str, str, str], int] = {}
            for (_, tier, route, tool, kind), n in items:
                totals[(tier, route, tool, kind)] = totals.get((tier, route, tool, kind), 0) + n
            db.executemany(UPSERT_TOTAL, [(*k, n) for k, n in totals.items()])

        await self._run(self._txn, write)

    async def _probe(self) -> None:
        await self._run(lambda: self._conn().execute("SELECT 1").fetchone())

    async def _housekeep(self) -> None:
        def clean(db: sqlite3.Connection) -> None:
            now = time.time()
            db.execute("DELETE FROM counters WHERE bucket < ?", (bucket_of(now - self.options.retention),))
            db.execute("DELETE FROM sticky WHERE expires <= ? OR calls_left <= 0", (now,))
            db.execute(
                "DELETE FROM routed WHERE session IN (SELECT session FROM routed_sessions WHERE expires <= ?)",
                (now,),
            )
            db.execute("DELETE FROM routed_sessions WHERE expires <= ?", (now,))

        await self._run(self._txn, clean)

    async def _release(self) -> None:
        def close() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        try:
            await self._run(close)
        finally:
            self._thread.shutdown(wait=True)

    # -- counters ---------------------------------------------------------------------------

    async def stats(self, window_seconds: float | None = None) -> dict[str, Any]:
        args: tuple[int, ...] = ()
        if window_seconds is None:
            sql = "SELECT tier, route, tool, kind, n FROM totals"
        else:
            sql = "SELECT tier, route, tool, kind, SUM(n) FROM counters WHERE bucket >= ? GROUP BY 1, 2, 3, 4"
            args = (window_start(window_seconds),)
        try:
            rows = await self._run(lambda: self._conn().execute(sql, args).fetchall())
        except (sqlite3.Error, OSError) as exc:
            self._mark_down(exc, "stats")
            rows = []
        return {**aggregate(rows), "store": self.store_info()}

    async def series(self, since: float, bucket: int = BUCKET_SECONDS) -> list[SeriesRow]:
        sql = "SELECT bucket, tier, route, tool, kind, n FROM counters WHERE bucket >= ?"
        try:
            rows = await self._run(lambda: self._conn().execute(sql, (bucket_of(since),)).fetchall())
        except (sqlite3.Error, OSError) as exc:
            self._mark_down(exc, "series")
            rows = []
        return rebucket(rows, bucket)

    # -- sessions ---------------------------------------------------------------------------

    async def sticky_set(self, session: str, tier: str, calls: int) -> None:
        def put(db: sqlite3.Connection) -> None:
            if calls <= 0:
                db.execute("DELETE FROM sticky WHERE session = ?", (session,))
                return
            db.execute(
                "INSERT INTO sticky (session, tier, calls_left, expires) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (session) DO UPDATE SET tier = excluded.tier, "
                "calls_left = excluded.calls_left, expires = excluded.expires",
                (session, tier, calls, time.time() + self.options.session_ttl),
            )

        await self._session_op("sticky_set", self._txn, put)

    async def sticky_take(self, session: str) -> str | None:
        def take() -> str | None:
            row = (
                self._conn()
                .execute(
                    "UPDATE sticky SET calls_left = calls_left - 1 "
                    "WHERE session = ? AND calls_left > 0 AND expires > ? RETURNING tier",
                    (session, time.time()),
                )
                .fetchone()
            )
            return None if row is None else str(row[0])

        return await self._session_op("sticky_take", take)

    async def routed_put(self, session: str, calls: Sequence[RoutedCall]) -> None:
        if not calls:
            return
        keep = self.options.max_routed_per_session

        def put(db: sqlite3.Connection) -> None:
            now = time.time()
            db.execute(  # an expired session whose rows were not cleaned up yet starts afresh
                "DELETE FROM routed WHERE session = ? AND session IN "
                "(SELECT session FROM routed_sessions WHERE session = ? AND expires <= ?)",
                (session, session, now),
            )
            db.execute(
                "INSERT INTO routed_sessions (session, expires) VALUES (?, ?) "
                "ON CONFLICT (session) DO UPDATE SET expires = excluded.expires",
                (session, now + self.options.session_ttl),
            )
            db.executemany(
                "INSERT OR REPLACE INTO routed (session, call_id, tier, route, tool, arguments) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(session, c.call_id, c.tier, c.route, c.tool, c.arguments) for c in calls],
            )
            db.execute(
                "DELETE FROM routed WHERE session = ? AND id <= "
                "(SELECT id FROM routed WHERE session = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
                (session, session, keep),
            )

        await self._session_op("routed_put", self._txn, put)

    async def routed_get(self, session: str, call_id: str) -> RoutedCall | None:
        def get() -> RoutedCall | None:
            row = (
                self._conn()
                .execute(
                    "SELECT r.tier, r.route, r.tool, r.arguments FROM routed r "
                    "JOIN routed_sessions s ON s.session = r.session "
                    "WHERE r.session = ? AND r.call_id = ? AND s.expires > ?",
                    (session, call_id, time.time()),
                )
                .fetchone()
            )
            return None if row is None else RoutedCall(call_id, row[0], row[1], row[2], row[3])

        return await self._session_op("routed_get", get)
