"""open_store(url): the scheme picks the store; anything else is a clear ValueError."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.store import open_store
from router.store.memory import MemoryStore
from router.store.redis import RedisStore, redact_url
from router.store.sqlite import SqliteStore


async def test_schemes(tmp_path: Path) -> None:
    assert isinstance(open_store("memory://"), MemoryStore)
    relative = open_store("sqlite:///./.agent-router/state.db")
    assert isinstance(relative, SqliteStore) and relative.path == Path(".agent-router/state.db")
    absolute = open_store(f"sqlite:///{tmp_path}/x.db")
    assert isinstance(absolute, SqliteStore) and absolute.path == tmp_path / "x.db"
    for url in ("redis://127.0.0.1:6379/0", "rediss://h:6380/1", "REDIS://h"):
        store = open_store(url, prefix="p:")
        assert isinstance(store, RedisStore) and store.prefix == "p:"
        await store.close()  # never started: nothing to flush, nothing to raise


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("", "no scheme"),
        ("/var/state.db", "no scheme"),
        ("memory://somewhere", "takes no path"),
        ("sqlite://relative.db", "needs a path"),
        ("sqlite:///", "needs a path"),
        ("postgres://u:pw@h/db", "unsupported store URL scheme 'postgres'"),
    ],
)
def test_bad_urls(url: str, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        open_store(url)
    assert "pw" not in str(info.value)


def test_redact_url() -> None:
    assert redact_url("redis://:s3cret@h:6379/0") == "redis://:***@h:6379/0"
    assert redact_url("rediss://user:s3cret@h/0") == "rediss://user:***@h/0"
    assert redact_url("redis://h:6379/0?password=s3cret&db=2") == "redis://h:6379/0?password=%2A%2A%2A&db=2"
    assert redact_url("redis://h:6379/0") == "redis://h:6379/0"
    assert "s3cret" not in redact_url("redis://u:s3cret@[::1/0")
