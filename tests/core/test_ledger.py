"""router/core/live/ledger.py: a call's cost and its baseline (what the baseline tier would have cost
and taken), and sessions' running totals — no runtime, no sockets."""

from __future__ import annotations

import textwrap
from typing import NamedTuple

import pytest

from router.core.live.ledger import Ledger
from router.core.live.prices import Prices
from router.policy.loader import parse_policy
from router.upstream.base import Usage

POLICY = """
version: 1
models:
  fast: {model: openai/small, api_base: "http://127.0.0.1:1/v1", price: {input: 1, output: 2}}
  full: {model: openai/big, api_base: "http://127.0.0.1:2/v1", price: {input: 10, cached_input: 1, output: 20}}
  free: {model: openai/local, api_base: "http://127.0.0.1:3/v1"}
routes:
  - {name: d, use: fast}
escalation: {to: full}
"""


class Attempt(NamedTuple):
    tier: str
    how: str
    started: float
    first_token: float | None
    ended: float | None
    usage: Usage | None


class Call(NamedTuple):
    session: str
    tier: str
    route: str
    escalated: bool
    mistakes: tuple[str, ...]
    exhausted: bool
    attempts: tuple[Attempt, ...]
    cost_usd: float | None
    baseline_usd: float | None
    took: float
    ended_at: float

    def to_json(self) -> dict[str, object]:
        return {}


def prices(extra: str = "") -> Prices:
    return Prices(parse_policy(textwrap.dedent(POLICY) + extra, "t.yaml", {}), ({}, "0"))


def answered(tier: str, usage: Usage | None, started: float = 0.0, first: float = 0.5, ended: float = 1.0) -> Attempt:
    return Attempt(tier, "answered", started, first, ended, usage)


def call(ledger: Ledger, p: Prices, session: str, *attempts: Attempt, at: float = 100.0) -> Call:
    worth = ledger.worth(p, session, attempts, attempts[-1].tier)
    c = Call(session, attempts[-1].tier, "d", len({a.tier for a in attempts}) > 1, (), False, attempts,
             worth.cost_usd, worth.baseline_usd, 1.0, at)  # fmt: skip
    ledger.add(c)
    return c


def test_a_call_costs_every_attempt_and_its_baseline_is_the_delivered_tokens_on_the_baseline_tier() -> None:
    ledger, p = Ledger(), prices()
    bad = answered("fast", Usage(1_000_000, 0, 100_000))  # $1 + $0.2
    good = answered("full", Usage(1_000_000, 0, 100_000))  # $10 + $2
    worth = ledger.worth(p, "s", (bad, good), "full")
    assert worth.cost_usd == pytest.approx(13.2)
    assert worth.baseline_usd == pytest.approx(12.0)  # answered on the baseline alone would be its own cost
    cheap = ledger.worth(p, "s", (answered("fast", Usage(1_000_000, 0, 100_000)),), "fast")
    assert cheap.cost_usd == pytest.approx(1.2) and cheap.baseline_usd == pytest.approx(12.0)


def test_the_baseline_keeps_cached_what_the_sessions_previous_call_sent() -> None:
    ledger, p = Ledger(), prices()
    call(ledger, p, "s", answered("fast", Usage(600_000, 0, 0)))  # the session's first prompt: 600k tokens
    worth = ledger.worth(p, "s", (answered("fast", Usage(400_000, 600_000, 0)),), "fast")
    # on full: the previous 600k cached at $1/M, the 400k new at $10/M
    assert worth.baseline_usd == pytest.approx(0.6 + 4.0)
    other = ledger.worth(p, "another", (answered("fast", Usage(400_000, 600_000, 0)),), "fast")
    assert other.baseline_usd == pytest.approx(10.0)  # a session's first call: nothing cached


def test_an_attempt_that_failed_without_an_answer_costs_nothing() -> None:
    ledger, p = Ledger(), prices()
    failed = Attempt("fast", "failed", 0.0, None, 0.1, None)
    worth = ledger.worth(p, "s", (failed, answered("full", Usage(0, 0, 50_000))), "full")
    assert worth.cost_usd == pytest.approx(1.0) and worth.why.startswith("no streamed answer")


def test_what_cannot_be_known_is_absent_and_says_why() -> None:
    ledger = Ledger()
    p = prices()
    unknown = ledger.worth(p, "s", (answered("fast", None),), "fast")
    assert unknown.cost_usd is None and unknown.baseline_usd is None
    assert "tier 'fast' reported no token counts" in unknown.why
    free = ledger.worth(p, "s", (answered("free", None),), "free")
    assert free.cost_usd == 0.0 and free.baseline_usd is None  # a local tier costs 0, counted or not
    no_chain = Prices(parse_policy(textwrap.dedent(POLICY).replace("escalation: {to: full}\n", ""), "t", {}), ({}, "0"))
    alone = ledger.worth(no_chain, "s", (answered("fast", Usage(1, 0, 1)),), "fast")
    assert alone.baseline_usd is None and "no baseline tier" in alone.why


def test_the_baseline_time_is_its_prompt_and_output_at_the_baseline_tiers_observed_speeds() -> None:
    ledger, p = Ledger(), prices()
    assert ledger.worth(p, "s", (answered("fast", Usage(100, 0, 10)),), "fast").baseline_s is None
    # full read 2,000 tokens in 1 s and wrote 100 in 2 s: 2,000 tok/s prefill, 50 tok/s decode
    call(ledger, p, "warm", answered("full", Usage(2000, 0, 100), started=0.0, first=1.0, ended=3.0))
    worth = ledger.worth(p, "s", (answered("fast", Usage(1000, 0, 25)),), "fast")
    assert worth.baseline_s == pytest.approx(1000 / 2000 + 25 / 50)


def test_the_sessions_it_remembers_are_bounded() -> None:
    ledger, p = Ledger(max_sessions=2), prices()
    for session in ("a", "b", "c"):
        call(ledger, p, session, answered("fast", Usage(1_000_000, 0, 0)))
    # "a", least recently seen, was let go: its next call's baseline caches nothing
    assert ledger.worth(p, "a", (answered("fast", Usage(0, 1_000_000, 0)),), "fast").baseline_usd == pytest.approx(10.0)
    assert ledger.worth(p, "c", (answered("fast", Usage(0, 1_000_000, 0)),), "fast").baseline_usd == pytest.approx(1.0)
