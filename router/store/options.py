"""`StoreOptions`: the bounds every store shares (its own module: store/base.py and
store/responses.py both read it, and neither imports the other at run time)."""

from __future__ import annotations

from dataclasses import dataclass

from router.settings import default


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """Bounds shared by every store; each one is a memory (or disk) ceiling, not a tuning knob."""

    session_ttl: float = 24 * 3600.0  # sticky / routed state of a session expires after this idle time
    max_routed_per_session: int = 256  # most recent routed tool calls remembered per session
    retention: float = 8 * 24 * 3600.0  # time buckets older than this are dropped (all-time totals stay)
    max_sessions: int = 100_000  # MemoryStore only: least recently used sessions are evicted beyond it
    max_pending: int = 100_000  # distinct buffered counter keys before new ones are dropped (and counted)
    flush_interval: float = 0.5  # seconds between background flushes
    flush_events: int = 5_000  # a flush starts early once this many events are queued
    # an answer's routed tool calls: seconds its end waits for them to reach a shared store (Redis)
    write_wait: float = default("store_write_wait")
    # -- shadow samples (router/store/samples.py) --
    max_samples_per_route: int = 500  # newest shadow/QA samples kept per route; older ones are deleted
    sample_max_age: float = 7 * 24 * 3600.0  # samples older than this (seconds) are deleted
    # -- the call log (router/store/calls.py) --
    max_calls_per_session: int = 500  # newest calls kept per session
    max_call_sessions: int = 1_000  # sessions whose calls are kept (the least recently active dropped)
    call_max_age: float = 7 * 24 * 3600.0  # calls older than this (seconds) are deleted
    # -- response state (router/store/responses.py) --
    responses_ttl: float = default("responses_store_ttl")  # resolves this long after its chain's last write
    responses_max_entry_bytes: int = default("responses_store_max_entry_bytes")  # bigger, as stored: not stored
    responses_max_rows: int = default("responses_store_max_rows")  # SQLite and memory: entries kept
    responses_checkpoint_every: int = 32  # every N-th entry of a chain holds its whole history: reads per lookup

    def __post_init__(self) -> None:
        for name in ("session_ttl", "retention", "flush_interval"):
            if getattr(self, name) <= 0:
                raise ValueError(f"store option {name} must be > 0")
        if self.write_wait < 0:
            raise ValueError("store option write_wait must be >= 0")
        for name in ("max_routed_per_session", "max_sessions", "max_pending", "flush_events"):
            if getattr(self, name) < 1:
                raise ValueError(f"store option {name} must be >= 1")
        if self.max_samples_per_route < 1 or self.sample_max_age <= 0:  # shadow samples
            raise ValueError("store options max_samples_per_route must be >= 1 and sample_max_age > 0")
        if min(self.max_calls_per_session, self.max_call_sessions) < 1 or self.call_max_age <= 0:  # calls
            raise ValueError("store options max_calls_per_session, max_call_sessions must be >= 1, call_max_age > 0")
        if self.responses_ttl <= 0 or min(self.responses_max_entry_bytes, self.responses_max_rows) < 1:
            raise ValueError("store options responses_ttl must be > 0, responses_max_* >= 1")  # response state
        if self.responses_checkpoint_every < 1:
            raise ValueError("store option responses_checkpoint_every must be >= 1")
