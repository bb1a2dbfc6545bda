"""The sessions and their calls, as the console and `GET /v1/router/sessions` show them: read from
the store's call log (router/store/calls.py), so every replica answers alike."""

from __future__ import annotations

import statistics
from typing import Any

from router.store import Store
from router.store.calls import summarize

MAX_SESSIONS = 200  # listed at most
MAX_CALLS = 500  # of one session at most (the store keeps no more: `max_calls_per_session`)


async def sessions(store: Store, limit: int = 50) -> list[dict[str, Any]]:
    """The most recently active sessions, newest first, each with its totals."""
    names = await store.call_sessions(min(max(0, limit), MAX_SESSIONS))
    return [summarize(name, await store.calls_get(name, MAX_CALLS)) for name in names]


async def session(store: Store, session_id: str, limit: int = MAX_CALLS) -> dict[str, Any] | None:
    """One session: `session`, its totals, and `calls`, newest first, each with its decision chain
    (None: no calls of it are kept)."""
    records = await store.calls_get(session_id, min(max(1, limit), MAX_CALLS))
    if not records:
        return None
    calls = [{"id": r.id, "session": r.session, "ts": r.ts, **r.data} for r in records]
    return {"session": summarize(session_id, records), "calls": calls}


async def recent(store: Store, limit: int = 100) -> list[dict[str, Any]]:
    """The newest calls of the most recently active sessions, newest first."""
    limit = min(max(1, limit), MAX_CALLS)
    found = [r for name in await store.call_sessions(50) for r in await store.calls_get(name, limit)]
    found.sort(key=lambda r: r.ts, reverse=True)
    return [{"id": r.id, "session": r.session, "ts": r.ts, **r.data} for r in found[:limit]]


def first_tokens(calls: list[dict[str, Any]]) -> dict[str, float]:
    """Per tier, the median milliseconds from an answered attempt's start to its first token."""
    waits: dict[str, list[float]] = {}
    for call in calls:
        for a in call.get("attempts") or ():
            if a.get("how") == "answered" and a.get("first_token") is not None and a.get("started") is not None:
                waits.setdefault(a["tier"], []).append(a["first_token"] - a["started"])
    return {tier: round(statistics.median(ms), 1) for tier, ms in waits.items()}
