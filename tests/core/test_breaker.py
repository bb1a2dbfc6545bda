"""The breaker's state machine (router/core/live/breaker.py) on a clock the test moves: closed → open
after `failures` upstream errors in a row → half-open after `cooldown` (one trial) → closed on an
answer, open again for longer on a failure. The pipeline's use of it: tests/fault/test_breaker.py."""

from __future__ import annotations

import logging
import re

import pytest

from router.core.live.breaker import Breakers, Circuit
from router.metrics import Metrics
from router.policy.model import Breaker

CONFIG = Breaker(failures=3, cooldown=10.0, max_cooldown=25.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def opened(c: Circuit, now: float) -> None:
    for _ in range(c.config.failures):
        assert c.allow(now)
        c.failed(now)
    assert c.state == "open"


def test_failures_in_a_row_open_it_and_an_answer_in_between_starts_the_count_again() -> None:
    c = Circuit(CONFIG)
    for _ in range(2):
        assert c.allow(0.0)
        assert not c.failed(0.0)
    assert c.succeeded() is False  # closed already: nothing to close
    assert c.failures == 0
    for _ in range(2):
        assert not c.failed(0.0)
    assert c.state == "closed" and c.allow(0.0)
    assert c.failed(0.0)  # the third in a row
    assert (c.state, c.until, c.openings) == ("open", 10.0, 1)


def test_open_it_refuses_until_the_cooldown_then_lets_one_trial_through() -> None:
    c = Circuit(CONFIG)
    opened(c, 0.0)
    assert not c.allow(9.99)
    assert c.retry_after(4.0) == 6.0
    assert c.allow(10.0)  # the trial
    assert c.state == "half_open"
    assert not c.allow(10.5)  # one at a time
    assert c.retry_after(10.5) == 0.0


def test_a_trial_that_answers_closes_it() -> None:
    c = Circuit(CONFIG)
    opened(c, 0.0)
    assert c.allow(10.0)
    assert c.succeeded()
    assert (c.state, c.failures, c.cooldown) == ("closed", 0, 0.0)
    assert c.allow(10.0) and c.allow(10.0)


def test_a_trial_that_fails_opens_it_again_for_twice_as_long_up_to_the_cap() -> None:
    c = Circuit(CONFIG)
    opened(c, 0.0)
    now, cooldowns = 10.0, []
    for _ in range(3):
        assert c.allow(now)
        assert c.failed(now)
        cooldowns.append(c.cooldown)
        assert not c.allow(now + c.cooldown - 0.01)
        now += c.cooldown
    assert cooldowns == [20.0, 25.0, 25.0]
    assert c.openings == 4
    assert c.allow(now) and c.succeeded()  # closed: the next opening starts from `cooldown` again
    opened(c, now)
    assert c.cooldown == 10.0


def test_a_trial_that_ends_neither_way_makes_way_for_another() -> None:
    c = Circuit(CONFIG)
    opened(c, 0.0)
    assert c.allow(10.0)
    assert not c.allow(10.0)
    c.released()  # the client left mid-trial
    assert c.allow(10.0)


def test_calls_started_before_the_opening_change_nothing_while_it_is_open() -> None:
    c = Circuit(CONFIG)
    opened(c, 0.0)
    assert not c.failed(1.0) and c.until == 10.0
    assert not c.succeeded() and c.state == "open"


def test_failures_zero_never_opens() -> None:
    c = Circuit(Breaker(failures=0))
    for _ in range(100):
        assert c.allow(0.0)
        assert not c.failed(0.0)
    assert c.state == "closed"


def test_the_policy_refuses_a_cap_below_the_cooldown() -> None:
    with pytest.raises(ValueError, match="max_cooldown"):
        Breaker(cooldown=30.0, max_cooldown=10.0)
    with pytest.raises(ValueError):
        Breaker(failures=-1)
    with pytest.raises(ValueError):
        Breaker(cool_down=1.0)  # type: ignore[call-arg]  # unknown keys are errors


def metric(metrics: Metrics, line: str) -> float | None:
    found = re.search(rf"^{re.escape(line)} (\S+)$", metrics.render().decode(), re.M)
    return float(found.group(1)) if found else None


def test_breakers_count_log_once_per_change_and_show_their_state(caplog: pytest.LogCaptureFixture) -> None:
    clock, metrics = Clock(), Metrics()
    breakers = Breakers(metrics, clock)
    caplog.set_level(logging.INFO, "router.breaker")
    assert breakers.closed("fast") and breakers.allow("fast", CONFIG)
    for _ in range(5):  # the last two come from calls started before the opening: no new opening
        breakers.failed("fast", CONFIG, "tier 'fast' sent an answer over the limit of 4194304")
    assert metric(metrics, 'router_tier_open{tier="fast"}') == 1.0
    assert metric(metrics, 'router_tier_openings_total{tier="fast"}') == 1.0
    assert not breakers.closed("fast") and not breakers.allow("fast", CONFIG)
    clock.now += 4.2
    assert breakers.retry_after(["fast"]) == 6
    assert breakers.snapshot() == {"fast": {"state": "open", "failures": 0, "open_for": 5.8, "openings": 1}}
    clock.now += 6
    assert breakers.snapshot()["fast"]["state"] == "half_open"
    assert breakers.allow("fast", CONFIG)
    breakers.failed("fast", CONFIG, "HTTP 500")
    assert metric(metrics, 'router_tier_openings_total{tier="fast"}') == 2.0
    assert breakers.snapshot()["fast"]["open_for"] == 20.0
    clock.now += 20
    assert breakers.allow("fast", CONFIG)
    breakers.succeeded("fast")
    breakers.succeeded("fast")
    assert metric(metrics, 'router_tier_open{tier="fast"}') == 0.0
    assert breakers.snapshot()["fast"] == {"state": "closed", "failures": 0, "open_for": 0.0, "openings": 2}
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "tier fast: open for 10 s, 3 upstream errors in a row "
        "(last: tier 'fast' sent an answer over the limit of 4194304)",
        "tier fast: open for 20 s, its trial call failed (last: HTTP 500)",
        "tier fast: closed, its trial call answered",
    ]
    assert all(r.exc_info is None for r in caplog.records)


def test_a_policy_reload_changes_the_options_and_keeps_the_state() -> None:
    clock = Clock()
    breakers = Breakers(None, clock)
    for _ in range(2):
        breakers.failed("fast", CONFIG, "HTTP 502")
    stricter = Breaker(failures=2, cooldown=5.0, max_cooldown=5.0)
    breakers.failed("fast", stricter, "HTTP 502")  # the count so far (2) goes on: 3 >= 2
    assert not breakers.allow("fast", stricter)
    assert breakers.retry_after(["fast", "unknown"]) == 5
    assert breakers.retry_after([]) == 1
