"""`Escalate`: the signal that a call's attempt is to be followed by another. `attempts.Attempts`
raises it inside an attempt; the attempt loop retries on it and tracing reads it."""

from __future__ import annotations

from collections.abc import Sequence


class Escalate(Exception):
    """Try again: raised inside a tenacity attempt."""

    def __init__(self, mistakes: Sequence[str], backoff: bool = False) -> None:
        super().__init__(", ".join(mistakes))
        self.backoff = backoff  # an upstream error sends the call back to the same tier: wait first
