"""The attempt loop (router/attempts.py): tenacity's retry-on-Escalate semantics, checked side by side."""

from __future__ import annotations

import pytest
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

from router.attempts import Attempts


class Again(Exception):
    pass


class Other(Exception):
    pass


async def run(loop: object, script: list[type[Exception] | None]) -> tuple[int, str]:
    """Run `script` (per attempt: raise this, or None to succeed) through `loop`; (attempts, outcome)."""
    tried = 0
    try:
        async for attempt in loop:  # type: ignore[attr-defined]
            with attempt:
                step = script[tried]
                tried += 1
                if step is not None:
                    raise step(f"attempt {tried}")
    except Exception as exc:
        return tried, f"{type(exc).__name__}: {exc}"
    return tried, "ok"


SCRIPTS: list[list[type[Exception] | None]] = [
    [None],
    [Again, None],
    [Again, Again, None],
    [Again, Again, Again, None],  # one more than allowed: the last Again is raised
    [Other],
    [Again, Other],
    [Again, Again, Again],
]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: "-".join(x.__name__ if x else "ok" for x in s))
async def test_same_as_tenacity(script: list[type[Exception] | None]) -> None:
    waits: list[tuple[int, str]] = []

    def wait(state: RetryCallState) -> float:
        assert state.outcome is not None
        waits.append((state.attempt_number, str(state.outcome.exception())))
        return 0.0

    theirs = AsyncRetrying(retry=retry_if_exception_type(Again), stop=stop_after_attempt(3), wait=wait, reraise=True)
    expected = await run(theirs, script)
    expected_waits, waits[:] = list(waits), []
    assert await run(Attempts(3, wait, retry_on=Again), script) == expected
    # the waits before each retry (tenacity also computes one after the last attempt, then stops)
    assert waits == expected_waits[: expected[0] - 1]
