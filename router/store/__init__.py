"""Stores: where counters and session state live. `open_store(url)` picks one by URL scheme."""

from __future__ import annotations

from typing import Any

from router.constants import BUCKET_SECONDS
from router.store.base import (
    Event,
    RoutedCall,
    SeriesRow,
    Store,
    aggregate,
)
from router.store.options import StoreOptions

__all__ = [
    "BUCKET_SECONDS",
    "Event",
    "RoutedCall",
    "SeriesRow",
    "Store",
    "StoreOptions",
    "aggregate",
    "open_store",
]

SCHEMES = "memory://, sqlite:///RELATIVE/PATH.db, sqlite:////ABSOLUTE/PATH.db, redis://HOST:PORT/DB, rediss://…"


def open_store(url: str, options: StoreOptions | None = None, **kwargs: Any) -> Store:
    """A store for `url` (not started: `await store.start()`).

    `kwargs` go to the store's constructor (e.g. `prefix=` for Redis). Error messages never
    contain the URL's password: only the scheme, or the URL with the password redacted.
    """
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep:
        raise ValueError(f"store URL has no scheme; expected one of: {SCHEMES}")
    if scheme == "memory":
        if rest.strip("/"):
            raise ValueError("memory:// store URL takes no path")
        from router.store.memory import MemoryStore

        return MemoryStore(options, **kwargs)
    if scheme == "sqlite":
        if not rest.startswith("/") or not rest[1:]:
            raise ValueError(f"sqlite store URL needs a path: {SCHEMES}")
        from router.store.sqlite import SqliteStore

        return SqliteStore(rest[1:], options, **kwargs)
    if scheme in ("redis", "rediss"):
        from router.store.redis import RedisStore

        return RedisStore(url, options=options, **kwargs)
    raise ValueError(f"unsupported store URL scheme {scheme!r}; expected one of: {SCHEMES}")
