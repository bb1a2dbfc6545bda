"""Adaptive routing's live state: which tools a route's tier currently fumbles too often.

A background task reads windowed stats from the store every few seconds (never on the request
path) and keeps, per route with an `adaptive` option, the tools whose mistake rate on the route's
tier is over the threshold with enough samples. `policy.decide` reads that snapshot and diverts
those tools' calls, letting every `probe_every`-th one through as a probe; `note()` counts them.
A tool returns to its tier when probes bring its windowed rate back under the threshold.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from router.constants import ADAPTIVE_INTERVAL
from router.policy.decide import Decision
from router.policy.watch import PolicyHolder
from router.store.base import Store

log = logging.getLogger("router.adaptive")


def _samples_and_rate(counts: dict[str, Any]) -> tuple[int, float]:
    """(answers for the tool, share of them with a mistake). A tool's answers include those that
    were meant to call it and did not (else a tool the tier never calls would never be diverted)."""
    return int(counts["calls"]), float(counts.get("mistake_rate", 0.0))


class AdaptiveState:
    def __init__(self, store: Store, policy: PolicyHolder, interval: float = ADAPTIVE_INTERVAL) -> None:
        self.store = store
        self.policy = policy
        self.interval = interval
        self.degraded: dict[tuple[str, str], float] = {}
        self.diverted: dict[tuple[str, str], int] = {}

    def note(self, decision: Decision) -> None:
        if decision.diverted_tool is not None:
            key = (decision.route.rsplit(":", 1)[0], decision.diverted_tool)
            self.diverted[key] = self.diverted.get(key, 0) + 1

    async def refresh(self) -> None:
        routes = [r for r in self.policy.current.routes if r.adaptive is not None]
        by_window: dict[float, dict[str, Any]] = {}
        degraded: dict[tuple[str, str], float] = {}
        for route in routes:
            rule = route.adaptive
            assert rule is not None
            if rule.window not in by_window:
                by_window[rule.window] = await self.store.stats(rule.window)
            for tool, counts in by_window[rule.window].get("tools", {}).get(route.use, {}).items():
                samples, rate = _samples_and_rate(counts)
                if samples >= rule.min_samples and rate > rule.max_mistake_rate:
                    degraded[(route.name, tool)] = rate
        for key in degraded.keys() - self.degraded.keys():
            log.info("route %s: diverting tool %s (mistake rate %.2f)", key[0], key[1], degraded[key])
        for key in self.degraded.keys() - degraded.keys():
            log.info("route %s: tool %s is back under its threshold", key[0], key[1])
        self.degraded = degraded
        self.diverted = {k: v for k, v in self.diverted.items() if k in degraded}

    async def run(self) -> None:
        while True:
            try:
                await self.refresh()
            except Exception as exc:  # a store hiccup must not end adaptive routing
                log.warning("adaptive refresh failed: %s", type(exc).__name__)
            await asyncio.sleep(self.interval)
