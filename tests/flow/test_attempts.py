"""router/flow/attempts.py's decisions without sockets: which tier and body each attempt gets after a
mistake, and what happens when no attempt is left. Scripted in-process tiers (tests/scripted.py)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from router.core.call import chat_call
from router.errors import ChecksFailed, ContextExceeded, UpstreamError
from router.flow import pipeline
from router.flow.summary import router_headers
from tests.conftest import policy_text
from tests.flow.test_pipeline import ask
from tests.scripted import UNUSED, WEATHER, Scripted, call, started

PINNED = {"type": "function", "function": {"name": "get_weather"}}
BAD_SCHEMA = call("get_weather", '{"town": "Paris"}')  # schema_violation: `city` missing, `town` not allowed
GOOD = call("get_weather", '{"city": "Paris"}')
ONLY_FULL = "routes:\n  - name: default\n    use: full\n"


def policy(escalation: str = "{to: full}", routes: str | None = None) -> str:
    return policy_text(UNUSED, extra=f"escalation: {escalation}\n", routes=routes)


async def test_a_mistake_goes_to_the_stronger_tier(tmp_path: Path) -> None:
    fast, full = Scripted("fast", [BAD_SCHEMA]), Scripted("full", [GOOD])
    async with started(policy(), tmp_path, fast=fast, full=full) as runtime:
        attempts, _ = await pipeline.complete(runtime, ask("weather?", tools=True))
    assert attempts.tried == ("fast", "full") and not attempts.repaired
    assert router_headers(attempts)["x-router-escalated"] == "true"
    assert router_headers(attempts)["x-router-mistakes"] == "schema_violation"
    assert "tool_choice" not in full.bodies[0]


async def test_a_route_that_repairs_asks_the_same_tier_again_with_the_tool_pinned(tmp_path: Path) -> None:
    routes = "routes:\n  - name: tools\n    use: fast\n    repair: true\n"
    fast, full = Scripted("fast", [BAD_SCHEMA, GOOD]), Scripted("full", [])
    async with started(policy(routes=routes), tmp_path, fast=fast, full=full) as runtime:
        attempts, _ = await pipeline.complete(runtime, ask("weather?", tools=True))
    assert attempts.tried == ("fast", "fast") and attempts.repaired and not attempts.escalated
    assert "tool_choice" not in fast.bodies[0] and fast.bodies[1]["tool_choice"] == PINNED
    assert not full.bodies


async def test_the_chains_last_tier_is_repaired_then_sampled_afresh(tmp_path: Path) -> None:
    full = Scripted("full", [BAD_SCHEMA, BAD_SCHEMA, GOOD])
    async with started(policy(routes=ONLY_FULL), tmp_path, fast=Scripted("fast", []), full=full) as runtime:
        attempts, _ = await pipeline.complete(runtime, ask("weather?", tools=True))
    assert attempts.tried == ("full", "full", "full") and attempts.repaired
    assert "tool_choice" not in full.bodies[0]
    assert full.bodies[1]["tool_choice"] == PINNED  # the one repair of this tier
    assert "tool_choice" not in full.bodies[2]  # then a fresh sample


async def test_an_unrepairable_mistake_on_the_last_tier_is_sampled_afresh(tmp_path: Path) -> None:
    full = Scripted("full", [call("get_forecast", "{}"), GOOD])  # unknown_tool: nothing to pin
    async with started(policy(routes=ONLY_FULL), tmp_path, fast=Scripted("fast", []), full=full) as runtime:
        attempts, _ = await pipeline.complete(runtime, ask("weather?", tools=True))
    assert attempts.tried == ("full", "full") and not attempts.repaired and attempts.mistakes == ("unknown_tool",)
    assert "tool_choice" not in full.bodies[1]


def greedy_full() -> str:
    """Every call on full, which its params pin to temperature 0."""
    pinned = "model: openai/full-model\n    params: {temperature: 0}"
    return policy(routes=ONLY_FULL).replace("model: openai/full-model", pinned)


@pytest.mark.parametrize("greedy", ["params", "client"])
async def test_a_greedy_last_tier_is_not_asked_the_same_thing_again(tmp_path: Path, greedy: str) -> None:
    """Temperature 0 gives the same answer to the same request: after a mistake no repair can mend,
    the chain's last tier is not asked again — the call is exhausted at once, not after three tries."""
    text = policy(routes=ONLY_FULL) if greedy == "client" else greedy_full()
    full = Scripted("full", [call("get_forecast", "{}"), GOOD])  # unknown_tool: nothing to pin
    body = {"model": "auto", "messages": [{"role": "user", "content": "weather?"}], "tools": [WEATHER]}
    request = chat_call(orjson.dumps({**body, "temperature": 0} if greedy == "client" else body), {})
    async with started(text, tmp_path, fast=Scripted("fast", []), full=full) as runtime:
        with pytest.raises(ChecksFailed):
            await pipeline.complete(runtime, request)
    assert len(full.bodies) == 1


async def test_a_greedy_last_tier_is_still_repaired(tmp_path: Path) -> None:
    text = greedy_full()
    full = Scripted("full", [BAD_SCHEMA, GOOD])
    async with started(text, tmp_path, fast=Scripted("fast", []), full=full) as runtime:
        attempts, _ = await pipeline.complete(runtime, ask("weather?", tools=True))
    assert attempts.tried == ("full", "full") and attempts.repaired and full.bodies[1]["tool_choice"] == PINNED


async def test_no_attempt_left_is_checks_failed(tmp_path: Path) -> None:
    fast, full = Scripted("fast", [BAD_SCHEMA]), Scripted("full", [BAD_SCHEMA, BAD_SCHEMA])
    escalation = "{to: full, max_attempts: 2}"
    async with started(policy(escalation), tmp_path, fast=fast, full=full) as runtime:
        with pytest.raises(ChecksFailed) as caught:
            await pipeline.complete(runtime, ask("weather?", tools=True))
        exhausted = runtime.metrics.exhausted.labels("full", "simple-tool-call")._value.get()
    assert caught.value.http_status == 502 and caught.value.should_retry
    assert len(fast.bodies) + len(full.bodies) == 2  # max_attempts, all tiers together
    assert exhausted == 1


async def test_on_exhausted_deliver_hands_over_the_last_answer(tmp_path: Path) -> None:
    fast, full = Scripted("fast", [BAD_SCHEMA]), Scripted("full", [BAD_SCHEMA])
    escalation = "{to: full, max_attempts: 2, on_exhausted: deliver}"
    async with started(policy(escalation), tmp_path, fast=fast, full=full) as runtime:
        attempts, reply = await pipeline.complete(runtime, ask("weather?", tools=True))
    assert attempts.exhausted and router_headers(attempts)["x-router-exhausted"] == "true"
    assert reply.data["model"] == "full"


async def test_an_upstream_error_escalates_like_a_mistake(tmp_path: Path) -> None:
    fast = Scripted("fast", [UpstreamError("tier 'fast' failed", tier="fast")])
    full = Scripted("full", [GOOD])
    async with started(policy(), tmp_path, fast=fast, full=full) as runtime:
        attempts, _ = await pipeline.complete(runtime, ask("weather?", tools=True))
    assert attempts.tried == ("fast", "full") and attempts.mistakes == ("upstream_error",)


# ---------------------------------------------------------------------- a prompt too long for a tier's context


def too_long(tier: str, prompt_tokens: int | None = 5000, window: int | None = 4096) -> ContextExceeded:
    return ContextExceeded(tier=tier, prompt_tokens=prompt_tokens, window=window)


async def test_a_prompt_too_long_for_a_tier_goes_on_to_a_larger_one_and_is_nobodys_mistake(tmp_path: Path) -> None:
    fast, full = Scripted("fast", [too_long("fast")]), Scripted("full", [GOOD])
    async with started(policy(), tmp_path, fast=fast, full=full) as runtime:
        attempts, _ = await pipeline.complete(runtime, ask("weather?", tools=True))
        await runtime.store.flush()
        stats = await runtime.store.stats()
        escalated = runtime.metrics.context_exceeded.labels("fast", "escalated")._value.get()
        assert runtime.windows.known()["fast"] == 4096  # what its error said
        assert runtime.breakers.snapshot().get("fast", {}).get("failures", 0) == 0
    assert attempts.tried == ("fast", "full") and attempts.mistakes == ()
    assert escalated == 1
    assert "mistakes" not in stats["tiers"].get("fast", {}) or not stats["tiers"]["fast"]["mistakes"]


async def test_a_prompt_too_long_for_every_tier_is_the_clients_context_error(tmp_path: Path) -> None:
    fast, full = Scripted("fast", [too_long("fast")]), Scripted("full", [too_long("full", 5000, None)], window=8000)
    async with started(policy(), tmp_path, fast=fast, full=full) as runtime:
        await runtime.windows.settled(5)
        with pytest.raises(ContextExceeded) as caught:
            await pipeline.complete(runtime, ask("weather?", tools=True))
        refused = runtime.metrics.context_exceeded.labels("full", "refused")._value.get()
    error = caught.value
    assert (error.http_status, error.code) == (400, "context_length_exceeded")
    assert (error.prompt_tokens, error.window) == (5000, 8000)  # as full counted it, and full's window
    assert error.anthropic_message == "prompt is too long: 5000 tokens > 8000 maximum"
    assert error.to_body()["error"]["type"] == "invalid_request_error"
    assert (error.outcome.tier, error.outcome.route, error.outcome.escalated) == ("full", "simple-tool-call", True)
    assert refused == 1


async def test_a_tier_known_to_be_too_small_is_passed_over_before_the_call(tmp_path: Path) -> None:
    fast, full = Scripted("fast", [], window=16), Scripted("full", [GOOD])  # the tools alone are more
    async with started(policy(), tmp_path, fast=fast, full=full) as runtime:
        await runtime.windows.settled(5)
        attempts, _ = await pipeline.complete(runtime, ask("weather?", tools=True))
    assert attempts.tried == ("full",) and not fast.bodies and not attempts.escalated
    assert attempts.route == "simple-tool-call" and "does not fit 'fast'" in attempts.reason


async def test_what_a_context_error_said_routes_the_next_call(tmp_path: Path) -> None:
    fast, full = Scripted("fast", [too_long("fast", 70, 20)]), Scripted("full", [GOOD, GOOD])
    async with started(policy(), tmp_path, fast=fast, full=full) as runtime:
        await pipeline.complete(runtime, ask("weather?", tools=True))
        attempts, _ = await pipeline.complete(runtime, ask("weather?", tools=True))
    assert len(fast.bodies) == 1 and attempts.tried == ("full",)


async def test_with_no_attempt_left_a_prompt_too_long_is_refused_at_once(tmp_path: Path) -> None:
    fast, full = Scripted("fast", [too_long("fast")]), Scripted("full", [GOOD])
    async with started(policy("{to: full, max_attempts: 1}"), tmp_path, fast=fast, full=full) as runtime:
        with pytest.raises(ContextExceeded) as caught:
            await pipeline.complete(runtime, ask("weather?", tools=True))
    assert (caught.value.prompt_tokens, caught.value.window) == (5000, 4096) and not full.bodies
