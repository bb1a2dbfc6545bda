"""What `previous_response_id` resolves to: each response's chat history, in bounded LRU caches in
front of the router's store.

Where a lookup goes, first hit wins:

1. the WebSocket connection's own cache (`ws_max_responses` entries, `ws_max_state_bytes`), so a
   connection's chain never depends on what other clients do to the shared state, and responses
   sent with `store: false` resolve on their connection only;
2. the process cache (`responses_cache_entries` entries, `responses_cache_bytes` bytes), and the
   responses still queued for the store;
3. the store (router/store/responses.py): on a new connection, on another replica sharing a
   Redis store, or after a restart on the same SQLite file. Not with `memory://`, which would
   share and outlive nothing this cache does not.

Histories are tuples of the same message dicts: a follow-up's entry shares its predecessor's
messages and only adds its own, so an entry's `size` counts only the bytes it added and the byte
bound is close to the real memory held. Entries are never mutated once stored.

`ResponseState.put` (called before the final event is sent) fills the process cache and queues the
entry; one background task writes the queue in batches, in order, so a parent reaches the store
before its child. The transports then await `written` — the entry in the store, or `write_wait`
seconds (`store_write_wait`, 0.1 s), whichever is first — before the response's end leaves, so a
follow-up sent at once to another replica finds it; a slower store delays no response longer. A full queue
(`MAX_QUEUED`, the store is down or too slow) drops new entries, counted in
`router_response_state_total{op="write", outcome="dropped"}`; their children are then written as
checkpoints, whole.

When the store cannot answer a lookup (Redis down: at most `op_timeout`, then at once until it is
back) the client gets `previous_response_not_found` saying so, rather than a 503: clients (the
Codex CLI, for one) answer that error by sending the whole conversation again, which works without
the store, while a 503 would be retried against the same outage. A lookup that finds nothing is
tried once more after `MISS_GRACE` seconds, to cover a replica whose write has not landed yet when
its client already sent the next turn elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any

import orjson

from router.constants import MAX_QUEUED, MISS_GRACE, WRITE_BATCH
from router.store.responses import ResponseRecord, StoreUnreachable

if TYPE_CHECKING:
    from router.metrics import Metrics
    from router.store import Store

log = logging.getLogger("router.responses")



@dataclass(frozen=True, slots=True)
class Stored:
    messages: tuple[dict[str, Any], ...]  # the chat history through this response, without instructions
    session: str  # the session of the chain's first response
    size: int = 0  # bytes of the messages this response added
    parent: str | None = None  # the response it continued (previous_response_id)
    added: int = 0  # how many of `messages`, at the end, it added
    # (tier, the tier's own response id) when that tier's answer is this response unchanged: a tier keeping
    # a WebSocket continues its next turn from there (router/upstream/responses_ws.py). In this process only
    upstream: tuple[str, str] | None = None


def stored(
    history: Sequence[dict[str, Any]],
    added: Sequence[dict[str, Any]],
    session: str,
    parent: str | None = None,
    upstream: tuple[str, str] | None = None,
) -> Stored:
    size = len(orjson.dumps(list(added))) if added else 0
    return Stored((*history, *added), session, size, parent, len(added), upstream)


class ResponseCache:
    """Bounded LRU of `Stored` by response id: the least recently used go first."""

    def __init__(self, max_entries: int, max_bytes: int | None = None) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self.evicted = 0
        self._entries: OrderedDict[str, Stored] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, response_id: object) -> bool:
        return response_id in self._entries

    def get(self, response_id: str) -> Stored | None:
        entry = self._entries.get(response_id)
        if entry is not None:
            self._entries.move_to_end(response_id)
        return entry

    def put(self, response_id: str, entry: Stored) -> None:
        if self.max_entries <= 0:
            return
        old = self._entries.pop(response_id, None)
        if old is not None:
            self.bytes -= old.size
        self._entries[response_id] = entry
        self.bytes += entry.size
        while len(self._entries) > self.max_entries or (
            self.max_bytes is not None and self.bytes > self.max_bytes and len(self._entries) > 1
        ):
            _, gone = self._entries.popitem(last=False)
            self.bytes -= gone.size
            self.evicted += 1


class ResponseState:
    """The process cache, the queue to the store, and the store behind them (`store=None`: none)."""

    def __init__(
        self, cache: ResponseCache, store: Store | None, metrics: Metrics | None = None, write_wait: float = 0.0
    ) -> None:
        self.cache = cache
        self.store = store
        self.metrics = metrics
        self.write_wait = write_wait  # seconds a response's end waits for its entry to reach the store
        self._queued: dict[str, Stored] = {}  # insertion order = write order; left only once written
        self._wake = asyncio.Event()
        self._landed = asyncio.Event()  # set (and replaced) each time a batch has been written

    def put(self, response_id: str, entry: Stored) -> None:
        """Remember a response (`store` not false). Never waits: the store write runs later."""
        self.cache.put(response_id, entry)
        if self.store is None:
            return
        if len(self._queued) >= MAX_QUEUED:
            self.count("write", "dropped")
            return
        self._queued[response_id] = entry
        self._wake.set()

    async def written(self, response_id: str) -> bool:
        """Wait until the response queued as `response_id` has been written (or dropped), at most
        `write_wait` seconds; whether it has."""
        if response_id not in self._queued:
            return True
        try:
            async with asyncio.timeout(self.write_wait):
                while response_id in self._queued:
                    await self._landed.wait()
        except TimeoutError:
            return False
        return True

    async def get(self, response_id: str) -> Stored | None:
        """The entry, or None; raises StoreUnreachable when only the store could know and it cannot
        answer."""
        entry = self.cache.get(response_id) or self._queued.get(response_id)
        if entry is not None:
            self.count("lookup", "process")
            return entry
        if self.store is None:
            self.count("lookup", "not_found")
            return None
        try:
            chain = await self.store.responses_get(response_id)
            if chain is None:
                await asyncio.sleep(MISS_GRACE)
                chain = await self.store.responses_get(response_id)
        except StoreUnreachable:
            self.count("lookup", "unreachable")
            raise
        if chain is None:
            self.count("lookup", "not_found")
            return None
        self.count("lookup", "store")
        entry = Stored(tuple(chain.messages), chain.session, chain.size, None, len(chain.messages))
        self.cache.put(response_id, entry)  # already in the store: not queued again
        return entry

    @property
    def queued(self) -> int:
        return len(self._queued)

    async def run(self) -> None:
        """The writer: drains the queue whenever something is put (a background task)."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self.flush()

    async def flush(self, *, until_failure: bool = False) -> None:
        """Write everything queued now (the writer); at shutdown, stop at the first batch that fails."""
        store = self.store
        while store is not None and self._queued:
            batch = list(islice(self._queued.items(), WRITE_BATCH))
            records = [ResponseRecord(rid, e.parent, e.session, e.messages, e.added) for rid, e in batch]
            try:
                outcomes: Sequence[str] = await store.responses_put(records)
            except Exception as exc:  # the store promises not to raise; a bug must not stop the writer
                log.warning("storing %d responses failed: %s", len(records), type(exc).__name__)
                outcomes = ["failed"] * len(records)
            for (rid, _), outcome in zip(batch, outcomes, strict=True):
                self._queued.pop(rid, None)
                self.count("write", outcome)
            landed, self._landed = self._landed, asyncio.Event()
            landed.set()
            if until_failure and all(o == "failed" for o in outcomes) and self._queued:
                log.warning("the store is failing: %d responses were not stored at shutdown", len(self._queued))
                return

    async def close(self) -> None:
        """Write what is still queued (once the writer task is cancelled)."""
        with contextlib.suppress(Exception):
            await self.flush(until_failure=True)

    def count(self, op: str, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.response_state.labels(op, outcome).inc()
