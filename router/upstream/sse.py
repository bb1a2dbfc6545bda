"""Reading a tier's server-sent events, bounded: what router/upstream/http.py's streams are read with.

    sse_events(content, limit)   (`data:` payload, more already received) per SSE event
    Oversized                    a tier sent more than a bound allows
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import aiohttp

# of the events read at once, the reader yields to the event loop after every this many: a tier that
# sends as fast as it can (endless tool-call arguments: ~4 µs of work per event) holds the loop for
# ~30 µs at a time, not ~130 µs (32), so calls beside it wait less for each step (bench/abuse.py)
_FAIR_EVENTS = 8


class Oversized(Exception):
    """A tier sent more than a bound allows: `limit` names it (router_limits_tripped), `size` is the bound."""

    def __init__(self, limit: str, size: int) -> None:
        super().__init__(limit)
        self.limit = limit
        self.size = size


async def sse_events(content: aiohttp.StreamReader, limit: int) -> AsyncGenerator[tuple[bytes, bool], None]:
    """(`data:` payload, more already received) per SSE event, reading whatever has arrived at once.
    An event (or a line) over `limit` bytes raises `Oversized`; a long one is joined once, not per block."""
    lines: list[bytes] = []  # data lines of the event being read
    partial: list[bytes] = []  # blocks of the line being read
    size = 0  # bytes of the event being read
    while True:
        block = await content.readany()
        if not block:
            break
        partial.append(block)
        if b"\n" not in block:  # the line being read grows
            size += len(block)
            if size > limit:
                raise Oversized("upstream_body", limit)
            continue
        parts = b"".join(partial).split(b"\n")
        rest = parts.pop()
        partial = [rest] if rest else []
        ready: list[bytes] = []
        for line in parts:
            line = line.rstrip(b"\r")
            if not line:
                if lines:
                    event = b"\n".join(lines)
                    if len(event) > limit:  # a whole event in one block is bounded too
                        raise Oversized("upstream_body", limit)
                    ready.append(event)
                    lines = []
            elif line.startswith(b"data:"):
                lines.append(line[5:].lstrip(b" "))
        size = sum(map(len, lines)) + len(rest)  # of the event still being read: a block of many is fine
        if size > limit:
            raise Oversized("upstream_body", limit)
        last = len(ready) - 1
        for i, event in enumerate(ready):
            yield event, i < last
            if i % _FAIR_EVENTS == _FAIR_EVENTS - 1:  # a tier sending as fast as it can: others run too
                await asyncio.sleep(0)
    rest = b"".join(partial)
    if rest.startswith(b"data:"):
        lines.append(rest[5:].lstrip(b" "))
    if lines:
        yield b"\n".join(lines), False
