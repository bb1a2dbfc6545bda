"""Hedging: if the routed tier has produced nothing valid after a delay, start a second tier too,
keep whichever yields a valid first item, and cancel the other.

Works on any attempt shaped as an async iterator whose last item is its step (router/flow/steps.py):
a stream of released chunks, or a whole reply. An attempt whose first item `lost` says is its step
(a retry, a failure) or that raises loses the race; if both lose, the later one's items (its step)
are what the loop goes on with.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")
_END: Any = object()


async def first_valid(
    primary: AsyncIterator[T], start_hedge: Callable[[], AsyncIterator[T]], after: float, lost: Callable[[T], bool]
) -> tuple[bool | None, AsyncIterator[T]]:
    """Race `primary` against a hedge started after `after` seconds.

    Returns (the hedge won — None when both lost —, the winner's items from its first one on, or
    the later loser's).
    """
    first = asyncio.create_task(_next(primary))
    done, _ = await asyncio.wait({first}, timeout=after)
    if done:
        item = first.result()
        return (None if item is not _END and lost(item) else False), _from(item, primary)
    hedge = start_hedge()
    racers: dict[asyncio.Task[Any], AsyncIterator[T]] = {first: primary, asyncio.create_task(_next(hedge)): hedge}
    while racers:
        done, _ = await asyncio.wait(racers, return_when=asyncio.FIRST_COMPLETED)
        for task in sorted(done, key=lambda t: racers[t] is hedge):  # the primary wins a tie
            it = racers.pop(task)
            if (error := task.exception()) is not None:
                if not racers:
                    raise error
                continue
            item = task.result()
            if item is _END or not lost(item):
                await _cancel(racers)
                return it is hedge, _from(item, it)
            if not racers:  # both lost: the later one's step
                return None, _from(item, it)
            await _close(it)
    raise AssertionError("unreachable: a racer always ends the loop")


async def _next(it: AsyncIterator[T]) -> Any:
    return await anext(it, _END)


async def _cancel(racers: Mapping[asyncio.Task[Any], AsyncIterator[Any]]) -> None:
    for task, it in racers.items():
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        await _close(it)


async def _close(it: AsyncIterator[Any]) -> None:
    aclose = getattr(it, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()


async def _from(first: T, rest: AsyncIterator[T]) -> AsyncIterator[T]:
    if first is _END:
        return
    yield first
    async for item in rest:
        yield item
