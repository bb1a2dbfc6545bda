"""The frozen record of one routed call: what was decided and why, every attempt with its tier,
mistakes and timings, and what was delivered. `Attempts.outcome()` takes it (router/flow/attempts.py);
the transports' headers and trailers (router/flow/summary.py), the access log, the metrics, traces and
errors (`RouterError.outcome`) read it, never the live `Attempts`.

    Outcome                 the call: route, reason, lane, the tier answering, the tiers tried, ...
      .attempts             one `Tried` per attempt, in order
    Tried                   one attempt: its tier, mistakes, how it ended (`Step.how`: answered,
                            fell_back, escalated, retried, failed; cancelled), when it started,
                            its first token and its end (seconds after the call began)
    Account                 what a call has done so far, written as it goes (`Attempts` is one);
                            `outcome()` freezes it

A stream's outcome is taken twice: for its headers when the first chunk is ready, for its trailer
once it ends. While the call runs, its `Timeline` keeps each attempt's times.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from router.core.live.lanes import Choice
from router.core.live.ledger import Worth
from router.flow.record import Record
from router.upstream.base import Speed, Usage


class Tried(NamedTuple):
    tier: str
    mistakes: tuple[str, ...]
    how: str  # `Step.how`, or "cancelled" (the client left, a hedge lost), "running" (not over)
    started: float  # seconds after the call began
    first_token: float | None  # the first chunk or the whole answer, if any
    ended: float | None  # None while it runs
    usage: Usage | None  # its tokens, by its tier's own count (None: it said none)


class Outcome(NamedTuple):
    """(A named tuple: immutable, and made in one step — every routed call makes one or two.)"""

    route: str
    reason: str  # why the route and tier were chosen (policy.decide)
    lane: str
    tier: str  # the tier answering (the last tried, or the winner of a hedge, or the held answer's)
    tried: tuple[str, ...]  # every tier asked, in order (a hedge's too)
    skipped: tuple[str, ...]  # tiers passed over because their breaker was open
    mistakes: tuple[str, ...]  # every mistake found, in order
    escalated: bool  # a tier other than the routed one was asked
    repaired: bool
    exhausted: bool  # every attempt failed the checks
    signs: tuple[str, ...]  # the signs of the answer delivered
    salvaged: bool
    looped: bool
    verdicts: tuple[str, ...]  # "kind:accept|reject|unsure" per verified answer
    prompt_evaluated: int  # prompt tokens the tiers' servers evaluated, by their own count
    prompt_reused: int  # and reused from their cache
    repeat: str | None  # "resampled", "refused" (a repeat of an exhausted request)
    sampled: str | None  # "sign", "mistake" (the call went on sampled on the repeat tier)
    speed: Speed | None  # the speed the answering tier served at, where it says
    native: bool  # the answering tier got the client's own request as it came (nothing left out)
    attempts: tuple[Tried, ...]
    session: str
    took: float  # seconds from the call's start to this record
    ended_at: float  # unix seconds of this record
    cost_usd: float | None  # what its attempts cost (router/core/live/ledger.py; None: not known, see `why`)
    baseline_usd: float | None  # what the same call would have cost on the baseline tier
    baseline_s: float | None  # and taken there
    why: str  # why a cost or baseline figure is absent ("" when none is)
    reported: int  # routed calls this request reports failed (router/flow/feedback.py)

    def to_json(self) -> dict[str, Any]:
        """The call as the call log keeps it and the console shows it (router/store/calls.py)."""
        usage = next((t.usage for t in reversed(self.attempts) if t.usage is not None), None)
        return {
            "route": self.route, "reason": self.reason, "lane": self.lane, "tier": self.tier,
            "tried": list(self.tried), "skipped": list(self.skipped), "mistakes": list(self.mistakes),
            "escalated": self.escalated, "repaired": self.repaired, "exhausted": self.exhausted,
            "signs": list(self.signs), "salvaged": self.salvaged, "looped": self.looped,
            "verified": list(self.verdicts), "repeat": self.repeat, "sampled": self.sampled,
            "speed": self.speed.served if self.speed is not None else None,
            "tokens": {
                "prompt": usage.prompt if usage else 0, "cached": usage.reused if usage else 0,
                "output": usage.output if usage else 0,
            },
            "attempts": [
                {"tier": t.tier, "mistakes": list(t.mistakes), "how": t.how, "started": _ms(t.started),
                 "first_token": _ms(t.first_token), "ended": _ms(t.ended),
                 "usage": _tokens(t.usage)}
                for t in self.attempts
            ],
            "seconds": round(self.took, 4), "cost_usd": self.cost_usd, "baseline_cost_usd": self.baseline_usd,
            "baseline_seconds": self.baseline_s, "worth_unknown": self.why or None, "reported": self.reported,
        }  # fmt: skip


_UNPRICED = Worth(None, None, None, "not priced yet")


def _tokens(usage: Usage | None) -> dict[str, int] | None:
    if usage is None:
        return None
    return {"evaluated": usage.evaluated, "reused": usage.reused, "output": usage.output, "written": usage.written}


def _ms(seconds: float | None) -> float | None:
    return round(seconds * 1000, 1) if seconds is not None else None


@dataclass(slots=True)
class _Run:
    tier: str
    mistakes_from: int  # its mistakes: the call's from here up to the next attempt's
    started: float
    first_token: float | None = None
    ended: float | None = None
    how: str = "running"
    usage: Usage | None = None


class Timeline:
    """Each attempt's tier, times (seconds after the call began) and end, while the call runs."""

    __slots__ = ("_runs",)

    def __init__(self) -> None:
        self._runs: list[_Run] = []

    def __len__(self) -> int:
        return len(self._runs)

    def started(self, tier: str, mistakes_from: int, at: float) -> None:
        self._runs.append(_Run(tier, mistakes_from, at))

    def first_token(self, at: float) -> None:
        run = self._runs[-1]
        if run.first_token is None:
            run.first_token = at

    def ended(self, tier: str, how: str, at: float) -> None:
        run = self._runs[-1]
        run.tier, run.how, run.ended = tier, how, at

    def used(self, usage: Usage) -> None:
        """The running attempt's tokens, as its tier counted them."""
        if self._runs:
            self._runs[-1].usage = usage

    def tried(self, mistakes: Sequence[str]) -> tuple[Tried, ...]:
        """The attempts, each with its share of the call's `mistakes`."""
        runs, out = self._runs, []
        for i, run in enumerate(runs):
            end = runs[i + 1].mistakes_from if i + 1 < len(runs) else len(mistakes)
            out.append(Tried(run.tier, tuple(mistakes[run.mistakes_from : end]), run.how, run.started,
                             run.first_token, run.ended, run.usage))  # fmt: skip
        return tuple(out)


class Account:
    """What one routed call has done so far: the tiers it tried and skipped, what they answered and
    how, the mistakes found and what was done about them. `Attempts` (router/flow/attempts.py), which
    decides, writes it as the call goes; `outcome()` freezes it."""

    def __init__(self, record: Record, reason: str, lane: Choice, routed: str, session: str) -> None:
        self.record = record  # where what a tier said is written down (router/flow/record.py)
        self.route, self.reason, self.lane, self.session = record.route, reason, lane, session
        self.routed = routed  # the tier the decision named
        self.tier = routed  # the tier answering now
        self.tried: list[str] = []
        self.skipped: list[str] = []  # tiers passed over because their breaker was open
        self.mistakes: list[str] = []
        self.repaired = False
        self.exhausted = False  # every attempt failed the checks (and the answer was refused or delivered)
        self.signs: list[str] = []  # the signs (`SIGNS`) of the answer judged deliverable
        self.salvaged = False  # a call written as text was made structured (router/flow/salvage.py)
        self.looped = False  # an answer went round in a loop and was stopped (router/upstream/loops.py)
        self.verdicts: list[str] = []  # "kind:accept|reject|unsure" per verified answer
        self.prompt_evaluated = 0  # prompt tokens the tiers' servers evaluated, by their own count
        self.prompt_reused = 0  # prompt tokens they reused from their cache (a session's kept prefix)
        self.streamed = False  # a stream's client has part of the answer (text, which is not held)
        self.reported = 0  # routed calls the request reports failed: mistakes that reached the agent earlier
        self.repeat: str | None = None  # how this repeat of an exhausted request runs (`Repeat`)
        self.sampled: str | None = None  # why the call went on sampled (`Why`), once it did
        self.native: dict[str, bool] = {}  # tier → its latest attempt got the client's own request
        self.speeds: dict[str, Speed] = {}  # tier → the speed its latest attempt is served at, as it says
        self.timeline = Timeline()  # each attempt's times
        self.started = asyncio.get_running_loop().time()
        self.over: tuple[float, float] | None = None  # (seconds after the start, wall clock) the attempts ended

    @property
    def escalated(self) -> bool:
        return any(t != self.routed for t in self.tried)

    @property
    def speed(self) -> Speed | None:
        """The speed of the answer of the tier answering now, where it says."""
        return self.speeds.get(self.tier)

    @property
    def answered_natively(self) -> bool:
        """The tier answering now got the client's request as it came (nothing was left out of it)."""
        return self.native.get(self.tier, False)

    def now(self) -> float:
        """Seconds since the call began."""
        return asyncio.get_running_loop().time() - self.started

    def finished(self) -> None:
        """No attempt is left to run: the call's time stops here, so every record of it taken from now
        on (a stream's final event, its trailer, the access log) says the same."""
        self.over = (self.now(), time.time())

    # -- what a tier said ----------------------------------------------------------------------------
    def sent(self, tier: str, native: bool) -> None:
        """An attempt on `tier` starts: with the client's request itself (`native`) or the chat body."""
        self.native[tier] = native
        self.speeds.pop(tier, None)
        self.record.sent(tier, native)

    def sped(self, tier: str, speed: Speed) -> None:
        """`tier`'s answer says the speed it is served at (router/upstream/speed.py)."""
        self.speeds[tier] = speed

    def answered(self, tier: str, prompt: Usage | None = None) -> None:
        """`tier` sent a whole answer (right or wrong); `prompt`: the server's count of the prompt it read."""
        self.record.answered(tier, prompt, self.speeds.get(tier))
        if prompt is not None:
            self.prompt_evaluated += prompt.evaluated
            self.prompt_reused += prompt.reused
            self.timeline.used(prompt)

    def released(self, tier: str) -> None:
        """A call to `tier` ended neither way, and not by the tier's fault (its breaker is not told)."""
        self.record.released(tier)

    def cancelled(self, tier: str) -> None:
        """A call to `tier` was cut off unanswered: the client left, the router stopped, a hedge lost."""
        self.record.cancelled(tier)

    def looped_on(self, tier: str) -> None:
        """`tier`'s answer went round in a loop and was stopped there (router/upstream/loops.py)."""
        self.looped = True
        self.record.looped(tier)

    def outcome(self, priced: bool = True) -> Outcome:
        """The call as it stands, frozen; without its cost and baseline unless `priced` (a stream's
        headers are written before its answer, whose tokens are its cost)."""
        tried = self.timeline.tried(self.mistakes)
        worth = self.worth(tried) if priced else _UNPRICED
        took, ended_at = self.over or (self.now(), time.time())
        return Outcome(  # positionally, in `Outcome`'s order: a third of the cost of keywords
            self.route, self.reason, self.lane.name, self.tier, tuple(self.tried), tuple(self.skipped),
            tuple(self.mistakes), self.escalated, self.repaired, self.exhausted, tuple(self.signs), self.salvaged,
            self.looped, tuple(self.verdicts), self.prompt_evaluated, self.prompt_reused, self.repeat, self.sampled,
            self.speed, self.answered_natively, tried, self.session, took, ended_at, *worth, self.reported,
        )  # fmt: skip

    def worth(self, tried: tuple[Tried, ...]) -> Worth:
        """The call's cost and baseline (router/core/live/ledger.py): not known to a bare account."""
        return Worth(None, None, None, "not priced")
