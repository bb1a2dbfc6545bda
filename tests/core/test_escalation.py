"""router/core/escalation.py's decisions without sockets: which tier and body each attempt gets after a
mistake, and what happens when no attempt is left. Scripted in-process tiers (tests/scripted.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.api.headers import router_headers
from router.core import pipeline
from router.errors import ChecksFailed, UpstreamError
from tests.conftest import policy_text
from tests.core.test_pipeline import ask
from tests.scripted import UNUSED, Scripted, call, started

PINNED = {"type": "function", "function": {"name": "get_weather"}}
BAD_SCHEMA = call("get_weather", '{"town": "Paris"}')  # schema_violation: `city` missing, `town` not allowed
GOOD = call("get_weather", '{"city": "Paris"}')
ONLY_FULL = "routes:\n  - name: default\n    use: full\n"


def policy(escalation: str = "{to: full}", routes: str | None = None) -> str:
    return policy_text(UNUSED, extra=f"escalation: {escalation}\n", routes=routes)


async def test_a_mistake_goes_to_the_stronger_tier(tmp_path: Path) -> None:
    fast, full = Scripted("fast", [BAD_SCHEMA]), Scripted("full", [GOOD])
    async with started(policy(), tmp_path, fast=fast, full=full) as router:
        trace, _ = await pipeline.complete(router, ask("weather?", tools=True))
    assert trace.tried == ["fast", "full"] and not trace.repaired
    assert router_headers(trace)["x-router-escalated"] == "true"
    assert router_headers(trace)["x-router-mistakes"] == "schema_violation"
    assert "tool_choice" not in full.bodies[0]


async def test_a_route_that_repairs_asks_the_same_tier_again_with_the_tool_pinned(tmp_path: Path) -> None:
    routes = "routes:\n  - name: tools\n    use: fast\n    repair: true\n"
    fast, full = Scripted("fast", [BAD_SCHEMA, GOOD]), Scripted("full", [])
    async with started(policy(routes=routes), tmp_path, fast=fast, full=full) as router:
        trace, _ = await pipeline.complete(router, ask("weather?", tools=True))
    assert trace.tried == ["fast", "fast"] and trace.repaired and not trace.escalated
    assert "tool_choice" not in fast.bodies[0] and fast.bodies[1]["tool_choice"] == PINNED
    assert not full.bodies


async def test_the_chains_last_tier_is_repaired_then_sampled_afresh(tmp_path: Path) -> None:
    full = Scripted("full", [BAD_SCHEMA, BAD_SCHEMA, GOOD])
    async with started(policy(routes=ONLY_FULL), tmp_path, fast=Scripted("fast", []), full=full) as router:
        trace, _ = await pipeline.complete(router, ask("weather?", tools=True))
    assert trace.tried == ["full", "full", "full"] and trace.repaired
    assert "tool_choice" not in full.bodies[0]
    assert full.bodies[1]["tool_choice"] == PINNED  # the one repair of this tier
    assert "tool_choice" not in full.bodies[2]  # then a fresh sample


async def test_an_unrepairable_mistake_on_the_last_tier_is_sampled_afresh(tmp_path: Path) -> None:
    full = Scripted("full", [call("get_forecast", "{}"), GOOD])  # unknown_tool: nothing to pin
    async with started(policy(routes=ONLY_FULL), tmp_path, fast=Scripted("fast", []), full=full) as router:
        trace, _ = await pipeline.complete(router, ask("weather?", tools=True))
    assert trace.tried == ["full", "full"] and not trace.repaired and trace.mistakes == ["unknown_tool"]
    assert "tool_choice" not in full.bodies[1]


async def test_no_attempt_left_is_checks_failed(tmp_path: Path) -> None:
    fast, full = Scripted("fast", [BAD_SCHEMA]), Scripted("full", [BAD_SCHEMA, BAD_SCHEMA])
    escalation = "{to: full, max_attempts: 2}"
    async with started(policy(escalation), tmp_path, fast=fast, full=full) as router:
        with pytest.raises(ChecksFailed) as caught:
            await pipeline.complete(router, ask("weather?", tools=True))
        exhausted = router.metrics.exhausted.labels("full", "simple-tool-call")._value.get()
    assert caught.value.http_status == 502 and caught.value.should_retry
    assert len(fast.bodies) + len(full.bodies) == 2  # max_attempts, all tiers together
    assert exhausted == 1


async def test_on_exhausted_deliver_hands_over_the_last_answer(tmp_path: Path) -> None:
    fast, full = Scripted("fast", [BAD_SCHEMA]), Scripted("full", [BAD_SCHEMA])
    escalation = "{to: full, max_attempts: 2, on_exhausted: deliver}"
    async with started(policy(escalation), tmp_path, fast=fast, full=full) as router:
        trace, reply = await pipeline.complete(router, ask("weather?", tools=True))
    assert trace.exhausted and router_headers(trace)["x-router-exhausted"] == "true"
    assert reply.data["model"] == "full"


async def test_an_upstream_error_escalates_like_a_mistake(tmp_path: Path) -> None:
    fast = Scripted("fast", [UpstreamError("tier 'fast' failed", tier="fast")])
    full = Scripted("full", [GOOD])
    async with started(policy(), tmp_path, fast=fast, full=full) as router:
        trace, _ = await pipeline.complete(router, ask("weather?", tools=True))
    assert trace.tried == ["fast", "full"] and trace.mistakes == ["upstream_error"]
