"""Keep-alives of a stream whose first chunk is slow (router/flow/pipeline.py's `stream`): a cold
prompt on a CPU server reads for minutes, and agents give up on a stream that sends nothing.

    settled(first)                      the first chunk or its failure, taken without raising
    beating(first, rest, every, empty)  `Chunk.beat` every `every` seconds until `first` is in, then the stream
    prepend(first, rest)                the stream, its first chunk already in hand

Closing either closes `rest` at once, and with it the attempt and its upstream call.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable

from router.upstream.base import Chunk


def settled(first: asyncio.Future[Chunk | None]) -> tuple[Chunk | None, BaseException | None]:
    """The first chunk (None: the stream was empty) or the failure, taken from its task without raising."""
    failure = first.exception()
    return (None, failure) if failure is not None else (first.result(), None)


async def beating(
    first: asyncio.Future[Chunk | None],
    rest: AsyncIterator[Chunk],
    every: float,
    empty: Callable[[], BaseException],
) -> AsyncIterator[Chunk]:
    """Keep-alives every `every` seconds until `first` is in, then the stream (`empty()`: the error
    of a stream that ended with nothing)."""
    try:
        try:
            yield Chunk({}, beat=True)
            while not (await asyncio.wait({first}, timeout=every))[0]:
                yield Chunk({}, beat=True)
        finally:
            if not first.done():  # the client left meanwhile: the attempt in flight ends with it
                first.cancel()
                with contextlib.suppress(BaseException):
                    await first
        chunk, failure = settled(first)
        del first
        if failure is not None or chunk is None:
            failure = failure or empty()
            try:
                raise failure
            finally:
                del failure  # no cycle through this frame (tests/test_cycles.py)
        yield chunk
        async for chunk in rest:
            yield chunk
    finally:
        await _close(rest)


async def prepend(first: Chunk, rest: AsyncIterator[Chunk]) -> AsyncIterator[Chunk]:
    try:
        yield first
        async for chunk in rest:
            yield chunk
    finally:
        await _close(rest)


async def _close(rest: AsyncIterator[Chunk]) -> None:
    """`rest` closed now, not when the garbage collector frees it (a frame in a failure's traceback
    can hold it): the attempt, and its upstream call, end with the stream that was left."""
    if isinstance(rest, AsyncGenerator):
        await rest.aclose()
