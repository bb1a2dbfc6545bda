"""The loop of a call's attempts: tenacity's, retrying while `Escalate` is raised.

A call's first attempt runs without it (most calls need no other, and the loop's machinery costs
more than the rest of a call's routing); one that raises `Escalate` goes on in `after_first`,
tenacity's loop taken up where it would have been after that attempt (same stop, same backoff).

Backoff (exponential, with jitter) applies only when an upstream error sends the call back to the
same tier (`Escalate.backoff`); escalating to another tier or asking again after a mistake is
immediate. No wait goes past the call's deadline.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator

from tenacity import AsyncRetrying, AttemptManager, RetryCallState, retry_if_exception_type, stop_after_attempt
from tenacity.wait import wait_exponential_jitter

from router.core.escalate import Escalate

_backoff = wait_exponential_jitter(multiplier=0.1, max=2.0, jitter=0.2)
_retry = retry_if_exception_type(Escalate)  # one for every loop: each refers to itself (a cycle)


def loop(max_attempts: int, deadline: float) -> AsyncRetrying:
    """Tenacity's loop: at most `max_attempts`, backing off (`Escalate.backoff`) until `deadline`."""
    # `wait` is a function of the deadline, not a method of the call's `Attempts`: tenacity's loop
    # object refers to itself, a cycle only the garbage collector frees, which would hold the call's
    # attempts and body (every dict of it) until the next collection instead of freeing them at once.
    return AsyncRetrying(
        retry=_retry,
        stop=stop_after_attempt(max_attempts),
        wait=functools.partial(_wait, deadline),
        reraise=True,
    )


def _wait(deadline: float, state: RetryCallState) -> float:
    """The backoff, never past the call's deadline (the next attempt then times out at once)."""
    exc = state.outcome.exception() if state.outcome else None
    wait = _backoff(state) if isinstance(exc, Escalate) and exc.backoff else 0.0
    return max(0.0, min(wait, deadline - asyncio.get_running_loop().time()))


async def after_first(attempts: AsyncRetrying, first: Escalate) -> AsyncIterator[AttemptManager]:
    """`attempts`' attempts but its first, which only raises `first` again (tenacity records it).

    Once the loop is over, its state lets go of the loop and of the last outcome: tenacity's loop
    and its state refer to each other, and the exception it raises last refers to both (through
    its traceback) — cycles that would leave them, and the call's objects in the frames of that
    traceback, to the garbage collector instead of freeing them at once."""
    # private API: tenacity-loop-state, see docs/architecture.md (the loop taken up after its first attempt)
    replay: Escalate | None = first
    del first
    state: RetryCallState | None = None
    try:
        async for attempt in attempts:
            state = attempt.retry_state
            if replay is None:
                yield attempt
                continue
            with attempt:
                raise replay
            replay = None  # the outcome is tenacity's now; no reference from this frame to its traceback
    finally:
        # private API: tenacity-loop-state, see docs/architecture.md
        attempts.iter_state.reset()  # the loop's pending actions: its own bound methods
        if state is not None:
            state.outcome = None
            state.retry_object = None  # type: ignore[assignment]
