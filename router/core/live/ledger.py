"""What routing is worth, call by call and session by session, as this proxy saw it.

    worth(prices, session, attempts, tier, took)   a call's cost and its baseline: what the same
                                                   call would have cost and taken on the baseline tier
    add(outcome)                                   a finished call: its tiers' speeds observed, its
                                                   session's prompt size kept for the next baseline

A call's **cost** is every attempt's tokens (the tier's own count, `Usage`) at that tier's rates
(router/core/live/prices.py): an escalated call pays for each tier it tried; an attempt that failed
without an answer costs nothing. Its **baseline** is the delivered answer's tokens at the baseline
tier's rates (the policy's `baseline:`, else the escalation chain's last tier), net of cache effects:
the baseline keeps cached what the session's previous call sent (an agent's prompt grows by appending,
so a provider's prefix cache holds the previous prompt), and a call answered on the baseline tier alone
costs its baseline exactly what it paid. The baseline's **time** is its prompt read afresh at the
baseline tier's observed prefill speed plus its output at its decode speed (medians over the tier's
last `SPEED_WINDOW` streamed answers). Where a figure cannot be known — no price, no token counts, no
observation yet — it is None, and `why` says so: nothing is made up.

Memory is bounded: the last prompt size of `max_sessions` sessions (least recently used dropped) and
`SPEED_WINDOW` observations per tier. Sessions' totals are added up from the store's call log
(router/store/calls.py), on every replica alike.
"""

from __future__ import annotations

import statistics
from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from router.core.live.prices import Prices
from router.policy.model import Policy
from router.upstream.base import Usage

SPEED_WINDOW = 50  # streamed answers per tier whose speeds make the baseline's time


class Attempted(Protocol):
    """What `worth` reads of one attempt (router/flow/outcome.py's `Tried`)."""

    @property
    def tier(self) -> str: ...

    @property
    def how(self) -> str: ...

    @property
    def started(self) -> float: ...

    @property
    def first_token(self) -> float | None: ...

    @property
    def ended(self) -> float | None: ...

    @property
    def usage(self) -> Usage | None: ...


class Worth(NamedTuple):
    cost_usd: float | None  # what the call cost
    baseline_usd: float | None  # what it would have cost on the baseline tier
    baseline_s: float | None  # how long it would have taken there
    why: str  # why a figure is absent ("" when none is)


class Finished(Protocol):
    """What `add` reads of a finished call (router/flow/outcome.py's `Outcome`)."""

    @property
    def session(self) -> str: ...

    @property
    def tier(self) -> str: ...

    @property
    def route(self) -> str: ...

    @property
    def escalated(self) -> bool: ...

    @property
    def mistakes(self) -> tuple[str, ...]: ...

    @property
    def exhausted(self) -> bool: ...

    @property
    def attempts(self) -> Sequence[Attempted]: ...

    @property
    def cost_usd(self) -> float | None: ...

    @property
    def baseline_usd(self) -> float | None: ...

    @property
    def took(self) -> float: ...

    @property
    def ended_at(self) -> float: ...

    def to_json(self) -> dict[str, Any]: ...


class Ledger:
    def __init__(self, max_sessions: int = 10_000) -> None:
        self.max_sessions = max_sessions
        self._prompts: OrderedDict[str, int] = OrderedDict()  # session → its previous call's prompt tokens
        self._prefill: dict[str, deque[float]] = {}  # tier → prompt tokens per second
        self._decode: dict[str, deque[float]] = {}  # tier → output tokens per second
        self._speeds: dict[str, tuple[float, float]] = {}  # tier → their medians, until the next observation
        self._prices: tuple[Policy, Prices] | None = None

    def prices(self, policy: Policy) -> Prices:
        """The prices of `policy` (read once per policy: a reload reads them again)."""
        if self._prices is None or self._prices[0] is not policy:
            self._prices = (policy, Prices(policy))
        return self._prices[1]

    # -- one call --------------------------------------------------------------------------------
    def worth(
        self,
        prices: Prices,
        session: str,
        attempts: Sequence[Attempted],
        tier: str,
        standard: frozenset[str] = frozenset(),
    ) -> Worth:
        """The cost of a call whose `attempts` ended with `tier`'s answer, and its baseline; the
        tiers in `standard` answered at standard speed, their fast mode refused (priced so)."""
        why: list[str] = []
        cost: float | None = 0.0
        for attempt in attempts:
            if attempt.usage is None and attempt.how in ("failed", "cancelled", "running"):
                continue  # no answer, no charge known
            spent = prices.cost(attempt.tier, attempt.usage, attempt.tier in standard)
            if spent is None:
                why.append(_unknown(prices, attempt.tier, attempt.usage, attempt.tier in standard))
                cost = None
            elif cost is not None:
                cost += spent
        baseline, base_s = self._baseline(prices, session, attempts, tier, cost, why)
        return Worth(cost, baseline, base_s, "; ".join(dict.fromkeys(why)))

    def _baseline(
        self, prices: Prices, session: str, attempts: Sequence[Attempted], tier: str, cost: float | None,
        why: list[str],
    ) -> tuple[float | None, float | None]:  # fmt: skip
        base = prices.baseline
        if base is None:
            why.append("no baseline tier (the policy has no escalation chain and no `baseline:`)")
            return None, None
        delivered = next((a for a in reversed(attempts) if a.tier == tier and a.usage is not None), None)
        if delivered is None or delivered.usage is None:
            why.append(f"tier {tier!r} reported no token counts")
            return None, None
        usage = delivered.usage
        cached = min(usage.prompt, self._prompts.get(session, 0))
        fresh = usage.prompt - cached
        seconds = self._seconds(base, fresh, usage.output, why)
        if all(a.tier == base for a in attempts if a.usage is not None):
            return cost, seconds  # answered there alone: what it paid
        rates = prices.of(base)
        if rates is None:
            why.append(f"the baseline tier {base!r} has no price")
            return None, seconds
        return rates.cost(Usage(fresh, cached, usage.output)), seconds

    def _seconds(self, tier: str, fresh: int, output: int, why: list[str]) -> float | None:
        speeds = self._speeds.get(tier)
        if speeds is None:
            prefill, decode = self._prefill.get(tier), self._decode.get(tier)
            if not prefill or not decode:
                why.append(f"no streamed answer of the baseline tier {tier!r} observed yet: its speed is unknown")
                return None
            speeds = self._speeds[tier] = (statistics.median(prefill), statistics.median(decode))
        return fresh / speeds[0] + output / speeds[1]

    # -- after it ----------------------------------------------------------------------------------
    def add(self, call: Finished) -> None:
        """A finished call: its tiers' speeds observed, its session's prompt size kept."""
        for attempt in call.attempts:
            self._observe(attempt)
        usage = next((a.usage for a in reversed(call.attempts) if a.usage is not None), None)
        if not call.session or usage is None:
            return
        self._prompts[call.session] = usage.prompt
        self._prompts.move_to_end(call.session)
        while len(self._prompts) > self.max_sessions:
            self._prompts.popitem(last=False)

    def _observe(self, attempt: Attempted) -> None:
        usage, first, ended = attempt.usage, attempt.first_token, attempt.ended
        if usage is None or first is None or ended is None or attempt.how != "answered":
            return
        waited, wrote = first - attempt.started, ended - first
        if waited > 0 and usage.evaluated > 0 and wrote > 0 and usage.output > 1:  # a stream: both phases seen
            self._prefill.setdefault(attempt.tier, deque(maxlen=SPEED_WINDOW)).append(usage.evaluated / waited)
            self._decode.setdefault(attempt.tier, deque(maxlen=SPEED_WINDOW)).append(usage.output / wrote)
            self._speeds.pop(attempt.tier, None)


def _unknown(prices: Prices, tier: str, usage: Usage | None, standard: bool = False) -> str:
    if standard and prices.standard.get(tier) is None and prices.of(tier) is not None:
        return f"tier {tier!r} answered at standard speed (its fast mode refused): its declared price is its fast one"
    if prices.of(tier) is None:
        return f"tier {tier!r} has no price ({prices.sources.get(tier, 'unknown tier')})"
    return f"tier {tier!r} reported no token counts" if usage is None else f"tier {tier!r}: unknown cost"
