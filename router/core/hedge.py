"""Hedging: if the routed tier has produced nothing valid after a delay, start a second tier too,
keep whichever yields a valid first item, and cancel the other.

Works on any attempt shaped as an async iterator (a stream of released chunks, or a one-item
iterator holding a whole reply). An attempt that fails — a mistake, an upstream error — simply
loses the race; if both fail, the later one's error is raised and the escalation loop goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")
_END: Any = object()


async def first_valid(
    primary: AsyncIterator[T], start_hedge: Callable[[], AsyncIterator[T]], after: float
) -> tuple[bool, AsyncIterator[T]]:
    """Race `primary` against a hedge started after `after` seconds.

    Returns (the hedge won, the winner's items from its first one on).
    """
    first = asyncio.create_task(_next(primary))
    done, _ = await asyncio.wait({first}, timeout=after)
    if done:
        return False, _from(first.result(), primary)
    hedge = start_hedge()
    racers: dict[asyncio.Task[Any], AsyncIterator[T]] = {first: primary, asyncio.create_task(_next(hedge)): hedge}
    error: BaseException | None = None
    while racers:
        done, _ = await asyncio.wait(racers, return_when=asyncio.FIRST_COMPLETED)
        for task in sorted(done, key=lambda t: racers[t] is hedge):  # the primary wins a tie
            it = racers.pop(task)
            if (error := task.exception()) is None:
                await _cancel(racers)
                return it is hedge, _from(task.result(), it)
    assert error is not None
    raise error


async def _next(it: AsyncIterator[T]) -> Any:
    return await anext(it, _END)


async def _cancel(racers: Mapping[asyncio.Task[Any], AsyncIterator[Any]]) -> None:
    for task, it in racers.items():
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
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
