"""Per-tier circuit breakers (outlier ejection): a tier whose calls keep failing is skipped a while.

    closed    ── `failures` upstream errors in a row ──▶ open ── `cooldown` s ──▶ half-open
    half-open ── one trial call; it answers             ──▶ closed
    half-open ── the trial fails                        ──▶ open, the cooldown doubled (up to `max_cooldown`)

A failure is an upstream error of the tier's own making: unreachable, reset, timed out, 5xx, a
body or stream over its bound, an answer it cannot read. A client's fault (a 4xx the request
caused, a client that left) and a well-formed but wrong answer (a tool-call mistake: the router's
normal escalation) are not; any answer read whole counts as a success and closes the count.

Consecutive failures rather than a failure ratio: the rule needs no window and no minimum volume,
one answer in between resets it, so a tier that fails now and then (which escalation handles) is
never opened, while a tier that fails every call (down, or sending without end) is opened after
`failures` calls whatever the traffic. State is per process: each worker counts and opens alone.

`Circuit` is the pure state machine of one tier (time comes in as an argument); `Breakers` holds
one per tier, reads the clock (injectable), counts in metrics and logs each opening and closing.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from router.policy.model import Breaker

if TYPE_CHECKING:
    from router.metrics import Metrics

log = logging.getLogger("router.breaker")

State = Literal["closed", "open", "half_open"]


@dataclass(slots=True)
class Circuit:
    """One tier's breaker. `allow` before a call (False: skip the tier), then exactly one of
    `succeeded`, `failed` or `released` (the call ended neither way: cancelled, client gone)."""

    config: Breaker
    state: State = "closed"
    failures: int = 0  # in a row, while closed
    cooldown: float = 0.0  # of the current (or last) opening
    until: float = 0.0  # open until then
    trial: bool = False  # half-open: the one trial call is in flight
    openings: int = 0

    def allow(self, now: float) -> bool:
        if self.state == "open" and now >= self.until:
            self.state, self.trial = "half_open", False
        if self.state == "closed":
            return True
        if self.state == "half_open" and not self.trial:
            self.trial = True
            return True
        return False

    def succeeded(self) -> bool:
        """An answer read whole; True when that closes the breaker."""
        self.failures = 0
        if self.state != "half_open":
            return False  # closed already; or open, from a call that started before the opening
        self.state, self.trial, self.cooldown = "closed", False, 0.0
        return True

    def failed(self, now: float) -> bool:
        """An upstream error of the tier's making; True when that opens the breaker."""
        if self.state == "open" or self.config.failures == 0:
            return False
        if self.state == "closed":
            self.failures += 1
            if self.failures < self.config.failures:
                return False
            self.cooldown = self.config.cooldown
        else:  # the trial failed: open again, for longer
            self.cooldown = min(max(self.cooldown, self.config.cooldown) * 2, self.config.max_cooldown)
        self.state, self.trial, self.failures = "open", False, 0
        self.until = now + self.cooldown
        self.openings += 1
        return True

    def released(self) -> None:
        """A call ended without telling (cancelled): a trial in flight makes way for another."""
        self.trial = False

    def retry_after(self, now: float) -> float:
        """Seconds until a call may be let through (0 when one may now)."""
        return max(0.0, self.until - now) if self.state == "open" else 0.0


class Breakers:
    """The breakers of one process, by tier, each with its tier's `breaker` options from the policy
    (a reload changes the options and keeps the state)."""

    def __init__(self, metrics: Metrics | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.metrics = metrics
        self.clock = clock
        self._circuits: dict[str, Circuit] = {}

    def circuit(self, tier: str, config: Breaker) -> Circuit:
        c = self._circuits.get(tier)
        if c is None:
            c = self._circuits[tier] = Circuit(config)
        elif c.config != config:
            c.config = config
        return c

    def allow(self, tier: str, config: Breaker) -> bool:
        return self.circuit(tier, config).allow(self.clock())

    def closed(self, tier: str) -> bool:
        c = self._circuits.get(tier)
        return c is None or c.state == "closed"

    def succeeded(self, tier: str) -> None:
        c = self._circuits.get(tier)
        if c is not None and c.succeeded():
            log.info("tier %s: closed, its trial call answered", tier)
            self._gauge(tier, 0)

    def failed(self, tier: str, config: Breaker, reason: str) -> None:
        c = self.circuit(tier, config)
        was = c.state
        if c.failed(self.clock()):
            why = "its trial call failed" if was == "half_open" else f"{config.failures} upstream errors in a row"
            log.warning("tier %s: open for %.0f s, %s (last: %s)", tier, c.cooldown, why, reason)
            self._gauge(tier, 1)
            if self.metrics is not None:
                self.metrics.tier_openings.labels(tier).inc()

    def released(self, tier: str) -> None:
        if (c := self._circuits.get(tier)) is not None:
            c.released()

    def retry_after(self, tiers: list[str]) -> int:
        """Whole seconds (at least 1) until the first of `tiers` lets a call through."""
        now = self.clock()
        waits = [self._circuits[t].retry_after(now) for t in tiers if t in self._circuits]
        return max(1, math.ceil(min(waits, default=1.0)))

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Each tier's state for /v1/router/stats: state, failures in a row, seconds left open, openings."""
        now = self.clock()
        return {
            tier: {
                "state": "half_open" if c.state == "open" and now >= c.until else c.state,
                "failures": c.failures,
                "open_for": round(c.retry_after(now), 3),
                "openings": c.openings,
            }
            for tier, c in sorted(self._circuits.items())
        }

    def _gauge(self, tier: str, value: int) -> None:
        if self.metrics is not None:
            self.metrics.tier_open.labels(tier).set(value)
