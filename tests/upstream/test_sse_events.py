"""router/upstream/http.py's SSE reader: events as they arrive, each bounded by the limit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp.base_protocol import BaseProtocol

from router.upstream.sse import Oversized, sse_events


async def events(*blocks: bytes, limit: int = 1024) -> list[bytes]:
    """The events read from `blocks`, each block arriving on its own (read before the next is fed)."""
    loop = asyncio.get_running_loop()
    protocol = BaseProtocol(loop)
    protocol.connection_made(asyncio.Transport())  # a connection that only delivers what is fed
    content = aiohttp.StreamReader(protocol, 2**16, loop=loop)
    reading = asyncio.ensure_future(_all(sse_events(content, limit)))
    for block in blocks:
        content.feed_data(block)
        await asyncio.sleep(0.01)  # read, alone
    content.feed_eof()
    return await reading


async def _all(events: AsyncIterator[tuple[bytes, bool]]) -> list[bytes]:
    return [event async for event, _ in events]


async def test_events_across_and_within_blocks() -> None:
    assert await events(b"data: a\n\ndata: b\n", b"\ndata: c\ndata: d\n\n") == [b"a", b"b", b"c\nd"]


@pytest.mark.parametrize(
    "blocks",
    [
        (b"data: " + b"x" * 4000 + b"\n\n",),  # a whole event in one block
        (b"data: " + b"x" * 2000, b"x" * 2000 + b"\n\n"),  # one line over blocks
        (b"data: " + b"x" * 600 + b"\n", b"data: " + b"x" * 600 + b"\n\n"),  # lines of one event over blocks
    ],
    ids=["one-block", "one-line", "many-lines"],
)
async def test_an_event_over_the_limit_is_refused(blocks: tuple[bytes, ...]) -> None:
    with pytest.raises(Oversized):
        await events(*blocks, limit=1024)
