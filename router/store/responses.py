"""Response state in the store: what `previous_response_id` resolves to on a new connection, on
another replica, or after a restart. router/core/live/response_state.py keeps the caches in front of it.

    responses_put(records)   write in order (off the request path); an outcome per record, never raises
    responses_get(id)        the chain's messages and session; None when unknown or expired;
                             raises StoreUnreachable when the backend cannot answer in time

Entries are deltas, with checkpoints
  A history is a chain: storing every response's whole history costs O(n²) bytes for n turns.
  Measured (bench/response_state.py: a tool loop whose turns add 3 KB tool results): whole histories,
  compressed, cost 8.0 to 9.5 KiB per turn over 20 turns and 42 to 51 KiB over 100; this format 1.3 and
  3.3 KiB. So an entry holds the messages its response added and its parent's id, and a lookup
  walks the parents. Every `responses_checkpoint_every`-th entry of a chain holds the whole
  history instead (a checkpoint), and so does any entry whose parent the store does not hold
  (store=false, too big, expired, a failed write, or a child whose write overtook its parent's).
  So a lookup reads at most that many entries however long the chain, all in one round trip (a
  Lua script on Redis, one hop to the writer thread on SQLite), and a chain's bytes grow as
  n + n²/(2 every) instead of n²/2. Payload: JSON (orjson), zlib level 1 from 512 bytes on
  (level 6 saved 5 % more for twice the CPU).

Lifetime and bounds
  An entry resolves for `responses_ttl` after the last write to its segment: writing an entry
  extends its ancestors back to the checkpoint, so a chain in use never loses its middle. An entry
  whose stored form is over `responses_max_entry_bytes` is not stored (its children become
  checkpoints, over the bound too: such a chain stays in the process caches only). SQLite and
  memory keep at most `responses_max_rows` entries, pruned soonest-to-expire first, which never
  takes an ancestor before its descendants (ancestors expire no earlier). Redis relies on the TTL
  (and on its own `maxmemory` policy).

What is stored is what the process cache holds: the client's messages and the session id; never a
header or a key. Redis: one string per entry, `<prefix>rs:<id>` =
b"<hops> <parent id or -> <session bytes>\\n" + session + data — 300 bytes smaller than a hash of
the same fields (MEMORY USAGE, 1.2 KB entry).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sqlite3
import time
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import orjson

from router.constants import COMPRESS_FROM, DECODE_INLINE, MAX_ID_CHARS
from router.store.options import StoreOptions

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.commands.core import AsyncScript

log = logging.getLogger("router.store")

Outcome = Literal["stored", "too_big", "failed"]


class StoreUnreachable(Exception):
    """The store could not answer (down, or too slow): the caller decides what the client hears."""


@dataclass(frozen=True, slots=True)
class ResponseRecord:
    """One response to keep: the whole history through it, and which of it is its own."""

    id: str
    parent: str | None  # the previous_response_id it continued
    session: str
    messages: tuple[dict[str, Any], ...]  # the history through this response
    added: int  # the last `added` messages are this response's own


@dataclass(frozen=True, slots=True)
class ResponseChain:
    messages: list[dict[str, Any]]
    session: str
    size: int  # bytes of the messages as JSON


@dataclass(frozen=True, slots=True)
class Row:
    hops: int  # entries back to its checkpoint (0: it is one)
    parent: str  # "" for a checkpoint
    session: str
    data: bytes


def encode(messages: Sequence[dict[str, Any]]) -> bytes:
    raw = orjson.dumps(list(messages))
    return b"z" + zlib.compress(raw, 1) if len(raw) >= COMPRESS_FROM else b"j" + raw


def decode(data: bytes) -> tuple[list[dict[str, Any]], int]:
    raw = zlib.decompress(data[1:]) if data[:1] == b"z" else data[1:]
    return orjson.loads(raw), len(raw)


def payload(record: ResponseRecord, *, whole: bool) -> bytes:
    n = len(record.messages)
    return encode(record.messages if whole else record.messages[n - record.added :])


def stored_size(row: Row) -> int:
    return len(header(row)) + len(row.data)


def header(row: Row) -> bytes:
    session = row.session.encode()
    return b"%d %s %d\n" % (row.hops, (row.parent or "-").encode(), len(session)) + session


def chain_of(rows: Sequence[Row]) -> ResponseChain | None:
    """Rows newest first, ending at a checkpoint → the chain (None, logged, if unreadable)."""
    messages: list[dict[str, Any]] = []
    size = 0
    try:
        for row in reversed(rows):
            part, n = decode(row.data)
            messages += part
            size += n
    except (zlib.error, orjson.JSONDecodeError) as exc:
        log.warning("a stored response is unreadable and was ignored (%s)", type(exc).__name__)
        return None
    return ResponseChain(messages, rows[0].session, size)


def known_id(response_id: str) -> bool:
    return 0 < len(response_id) <= MAX_ID_CHARS


# -- memory and SQLite: one algorithm over a table ---------------------------------------------------
class Table(Protocol):
    def read(self, response_id: str, now: float, data: bool = True) -> Row | None:
        """The entry if present and not expired (`data=False`: its data may be left empty)."""

    def write(self, response_id: str, row: Row, expires: float, ancestors: Sequence[str]) -> None:
        """Write the entry, and make its ancestors (newest first) live at least as long."""


def walk(table: Table, response_id: str, now: float, limit: int, data: bool = True) -> list[tuple[str, Row]] | None:
    """The entry and its ancestors back to the checkpoint, newest first; None if one is missing."""
    out: list[tuple[str, Row]] = []
    current = response_id
    for _ in range(limit):
        row = table.read(current, now, data)
        if row is None:
            return None
        out.append((current, row))
        if not row.parent:
            return out
        current = row.parent
    return None  # longer than a checkpoint allows: not written by this code


def put(table: Table, record: ResponseRecord, options: StoreOptions, now: float) -> Outcome:
    every, expires = options.responses_checkpoint_every, now + options.responses_ttl
    back = walk(table, record.parent, now, every, data=False) if record.parent else None
    if back is not None and back[0][1].hops + 1 < every:
        row = Row(back[0][1].hops + 1, record.parent or "", record.session, payload(record, whole=False))
    else:
        back, row = None, Row(0, "", record.session, payload(record, whole=True))
    if stored_size(row) > options.responses_max_entry_bytes:
        return "too_big"
    table.write(record.id, row, expires, [rid for rid, _ in back] if back is not None else [])
    return "stored"


def get(table: Table, response_id: str, options: StoreOptions, now: float) -> ResponseChain | None:
    back = walk(table, response_id, now, options.responses_checkpoint_every) if known_id(response_id) else None
    return None if back is None else chain_of([row for _, row in back])


def put_all(table: Table, records: Sequence[ResponseRecord], options: StoreOptions, now: float) -> list[Outcome]:
    return [put(table, record, options, now) for record in records]


def sqlite_put(db: sqlite3.Connection, records: Sequence[ResponseRecord], options: StoreOptions) -> list[Outcome]:
    return put_all(SqliteTable(db), records, options, time.time())


def sqlite_get(db: sqlite3.Connection, response_id: str, options: StoreOptions) -> ResponseChain | None:
    return get(SqliteTable(db), response_id, options, time.time())


class MemoryTable:
    """`memory://`: at most `max_rows` entries; the front goes first. A write puts the entry, then its
    ancestors, at the back: within a chain the newest entries go before the ones they need."""

    def __init__(self, max_rows: int) -> None:
        self.max_rows = max_rows
        self._rows: OrderedDict[str, tuple[Row, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._rows)

    def read(self, response_id: str, now: float, data: bool = True) -> Row | None:
        found = self._rows.get(response_id)
        return found[0] if found is not None and found[1] > now else None

    def write(self, response_id: str, row: Row, expires: float, ancestors: Sequence[str]) -> None:
        rows = self._rows
        rows[response_id] = (row, expires)
        rows.move_to_end(response_id)
        for rid in ancestors:
            if (found := rows.get(rid)) is not None:
                rows[rid] = (found[0], max(found[1], expires))
                rows.move_to_end(rid)
        while len(rows) > self.max_rows:  # expired entries are skipped by read() and leave from the front
            rows.popitem(last=False)


SQLITE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS responses (id TEXT PRIMARY KEY, hops INTEGER NOT NULL, parent TEXT NOT NULL, "
    "session TEXT NOT NULL, data BLOB NOT NULL, expires REAL NOT NULL)",
    "CREATE INDEX IF NOT EXISTS responses_expires ON responses (expires)",
)


def sqlite_schema(db: sqlite3.Connection) -> None:
    for statement in SQLITE_SCHEMA:  # not executescript: that would commit an open transaction
        db.execute(statement)


class SqliteTable:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def read(self, response_id: str, now: float, data: bool = True) -> Row | None:
        column = "data" if data else "x''"
        sql = f"SELECT hops, parent, session, {column} FROM responses WHERE id = ? AND expires > ?"
        r = self.db.execute(sql, (response_id, now)).fetchone()
        return None if r is None else Row(int(r[0]), str(r[1]), str(r[2]), bytes(r[3]))

    def write(self, response_id: str, row: Row, expires: float, ancestors: Sequence[str]) -> None:
        sql = "INSERT OR REPLACE INTO responses (id, hops, parent, session, data, expires) VALUES (?, ?, ?, ?, ?, ?)"
        self.db.execute(sql, (response_id, row.hops, row.parent, row.session, row.data, expires))
        sql = "UPDATE responses SET expires = max(expires, ?) WHERE id = ?"
        self.db.executemany(sql, [(expires, rid) for rid in ancestors])


def sqlite_prune(db: sqlite3.Connection, options: StoreOptions, now: float) -> int:
    """Delete expired entries, then the soonest-to-expire beyond `responses_max_rows`; how many went."""
    sqlite_schema(db)
    gone = db.execute("DELETE FROM responses WHERE expires <= ?", (now,)).rowcount
    (count,) = db.execute("SELECT count(*) FROM responses").fetchone()
    if (over := int(count) - options.responses_max_rows) > 0:
        # equal expiry within a chain (one batch): the deeper entry, a descendant, goes first
        sql = "DELETE FROM responses WHERE id IN (SELECT id FROM responses ORDER BY expires, hops DESC LIMIT ?)"
        gone += db.execute(sql, (over,)).rowcount
    return int(gone)


# -- Redis: the same algorithm in Lua, one round trip per lookup ------------------------------------
# KEYS[1]: the new entry. ARGV: key prefix, parent id ('' = write a checkpoint), ttl ms, checkpoint
# every, session, data (the delta when a parent is given, else the whole history).
# Returns 1, or 0 when a delta cannot be written (parent or an ancestor missing, checkpoint due).
REDIS_PUT = """
local prefix, parent, ttl, every = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local hops = 0
if parent ~= '' then
  local id, done = parent, false
  for i = 1, every do
    local h, p = string.match(redis.call('GETRANGE', prefix .. id, 0, 199), '^(%d+) (%S+) ')
    if not h then return 0 end
    if i == 1 then
      hops = tonumber(h) + 1
      if hops >= every then return 0 end
    end
    redis.call('PEXPIRE', prefix .. id, ttl)
    if p == '-' then done = true break end
    id = p
  end
  if not done then return 0 end
else
  parent = '-'
end
local session = ARGV[5]
redis.call('SET', KEYS[1], hops .. ' ' .. parent .. ' ' .. #session .. '\\n' .. session .. ARGV[6], 'PX', ttl)
return 1
"""
# KEYS[1]: the entry. ARGV: key prefix, checkpoint every. Returns the entry's value and its ancestors'
# back to the checkpoint, newest first, or nil when one is missing.
REDIS_GET = """
local out, v = {}, redis.call('GET', KEYS[1])
for i = 1, tonumber(ARGV[2]) do
  if not v then return false end
  out[i] = v
  local p = string.match(v, '^%d+ (%S+) ')
  if not p then return false end
  if p == '-' then return out end
  v = redis.call('GET', ARGV[1] .. p)
end
return false
"""
REDIS_GET_SHA = hashlib.sha1(REDIS_GET.encode()).hexdigest()


def redis_prefix(prefix: str) -> str:
    return f"{prefix}rs:"


def parse_value(value: bytes) -> Row:
    head, _, rest = value.partition(b"\n")
    hops, parent, length = head.split(b" ")
    n = int(length)
    text = parent.decode()
    return Row(int(hops), "" if text == "-" else text, rest[:n].decode(), rest[n:])


async def redis_put(
    client: Redis, script: AsyncScript, prefix: str, records: Sequence[ResponseRecord], options: StoreOptions
) -> list[Outcome]:
    """Deltas first, in order, in one pipeline; those refused become checkpoints in a second one."""
    keys = redis_prefix(prefix)
    ttl_ms = max(1, int(options.responses_ttl * 1000))
    every, cap = options.responses_checkpoint_every, options.responses_max_entry_bytes
    outcomes: list[Outcome] = ["failed"] * len(records)
    todo = list(range(len(records)))
    for whole in (False, True):
        datas = await asyncio.to_thread(_payloads, records, todo, whole)
        sent: list[int] = []
        async with client.pipeline(transaction=False) as pipe:  # its connection back on any failure (a stall)
            for i, data in zip(todo, datas, strict=True):
                rec = records[i]
                parent = "" if whole or not rec.parent else rec.parent
                if stored_size(Row(every, parent, rec.session, data)) > cap:  # the longest header it can get
                    outcomes[i] = "too_big"
                    continue
                await script(keys=[keys + rec.id], args=[keys, parent, ttl_ms, every, rec.session, data], client=pipe)
                sent.append(i)
            results = await pipe.execute() if sent else []
        todo = []
        for i, ok in zip(sent, results, strict=True):
            if ok:
                outcomes[i] = "stored"
            else:
                todo.append(i)
        if not todo:
            break
    return outcomes


@dataclass(frozen=True, slots=True)
class Lookup:
    rows: list[Row] | None  # None: unknown, expired, or a broken chain


async def redis_rows(client: Redis, prefix: str, response_id: str, options: StoreOptions) -> Lookup:
    # private API: redis-never-decode, see docs/architecture.md
    from redis.client import NEVER_DECODE
    from redis.exceptions import NoScriptError

    keys = redis_prefix(prefix)
    args = (1, keys + response_id, keys, options.responses_checkpoint_every)
    raw = {NEVER_DECODE: True}  # values are bytes (zlib) whatever the client's decode_responses
    reply: list[bytes] | None
    try:
        reply = await client.execute_command("EVALSHA", REDIS_GET_SHA, *args, **raw)  # type: ignore[no-untyped-call]
    except NoScriptError:  # a restarted or flushed Redis: EVAL loads it again
        reply = await client.execute_command("EVAL", REDIS_GET, *args, **raw)  # type: ignore[no-untyped-call]
    try:
        return Lookup([parse_value(v) for v in reply] if reply else None)
    except (ValueError, UnicodeDecodeError):  # not written by this code: as good as absent
        log.warning("a stored response is unreadable and was ignored")
        return Lookup(None)


def _payloads(records: Sequence[ResponseRecord], todo: Sequence[int], whole: bool) -> list[bytes]:
    return [payload(records[i], whole=whole or not records[i].parent) for i in todo]


async def decoded(rows: list[Row]) -> ResponseChain | None:
    if sum(len(r.data) for r in rows) <= DECODE_INLINE:
        return chain_of(rows)
    return await asyncio.to_thread(chain_of, rows)
