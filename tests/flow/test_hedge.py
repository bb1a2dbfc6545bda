"""router/flow/hedge.py: `first_valid` races a primary attempt against a hedge started after a delay; an
attempt whose first item is its step (here: an item starting with "step") or that raises loses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from router.errors import UpstreamError
from router.flow.hedge import first_valid


class Attempt:
    """An attempt's items after `delay` seconds, or `error` instead; it notes whether it was closed."""

    def __init__(self, items: list[str], delay: float = 0.0, error: Exception | None = None) -> None:
        self.items, self.delay, self.error = items, delay, error
        self.closed = False

    async def run(self) -> AsyncIterator[str]:
        try:
            await asyncio.sleep(self.delay)
            if self.error is not None:
                raise self.error
            for item in self.items:
                yield item
        finally:
            self.closed = True


async def race(primary: Attempt, hedge: Attempt, after: float) -> tuple[bool | None, list[str], bool]:
    """(the hedge won — None: both lost —, the winner's items, the hedge was started)."""
    started = False

    def start_hedge() -> AsyncIterator[str]:
        nonlocal started
        started = True
        return hedge.run()

    hedge_won, items = await first_valid(primary.run(), start_hedge, after, lost=lambda item: item.startswith("step"))
    return hedge_won, [item async for item in items], started


async def test_a_quick_primary_never_starts_the_hedge() -> None:
    assert await race(Attempt(["a", "b"]), Attempt(["h"]), after=1.0) == (False, ["a", "b"], False)


async def test_a_slow_primary_loses_to_the_hedge_and_is_closed() -> None:
    primary = Attempt(["a"], delay=5.0)
    assert await race(primary, Attempt(["h1", "h2"]), after=0.01) == (True, ["h1", "h2"], True)
    assert primary.closed


async def test_a_primary_that_fails_after_the_hedge_started_loses() -> None:
    primary = Attempt([], delay=0.05, error=UpstreamError("down", tier="fast"))
    assert await race(primary, Attempt(["h"], delay=0.1), after=0.01) == (True, ["h"], True)


async def test_a_slow_primary_still_wins_when_the_hedge_fails() -> None:
    hedge = Attempt([], error=UpstreamError("down", tier="full"))
    assert await race(Attempt(["a"], delay=0.05), hedge, after=0.01) == (False, ["a"], True)


async def test_when_both_fail_the_later_error_is_raised() -> None:
    primary = Attempt([], delay=0.02, error=UpstreamError("primary", tier="fast"))
    hedge = Attempt([], delay=0.1, error=UpstreamError("hedge", tier="full"))
    with pytest.raises(UpstreamError, match="hedge"):
        await race(primary, hedge, after=0.01)


async def test_an_empty_winner_yields_nothing() -> None:
    assert await race(Attempt([]), Attempt(["h"]), after=1.0) == (False, [], False)


async def test_a_primary_whose_step_comes_first_loses_to_the_hedge_and_is_closed() -> None:
    primary = Attempt(["step: retry"], delay=0.05)
    assert await race(primary, Attempt(["h"], delay=0.1), after=0.01) == (True, ["h"], True)
    assert primary.closed


async def test_when_both_lose_the_later_step_is_what_follows() -> None:
    primary = Attempt(["step: primary"], delay=0.02)
    hedge = Attempt(["step: hedge"], delay=0.1)
    assert await race(primary, hedge, after=0.01) == (None, ["step: hedge"], True)


async def test_a_quick_primary_that_lost_is_no_winner() -> None:
    assert await race(Attempt(["step: failed"]), Attempt(["h"]), after=1.0) == (None, ["step: failed"], False)
