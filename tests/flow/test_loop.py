"""The one attempt loop (router/flow/pipeline.py's `_attempts`): every attempt ends with a step, run
the same way for whole answers and streams, on scripted tiers (tests/scripted.py): the tiers tried,
the mistakes, the backoffs asked for (after which attempt, on which mistake), the answer or the error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from router.errors import UpstreamError
from router.flow import pipeline
from router.flow.attempts import Attempts
from tests.conftest import policy_text
from tests.flow.test_pipeline import ask
from tests.scripted import UNUSED, Scripted, call, started, text

BAD = call("get_weather", '{"town": "Paris"}')  # schema_violation
GOOD = call("get_weather", '{"city": "Paris"}')
ONLY_FULL = "routes:\n  - name: default\n    use: full\n"


def down() -> UpstreamError:
    return UpstreamError("tier 'full' is down", tier="full")


# (escalation, routes, fast's script, full's script) → what is seen
CASES: dict[str, tuple[str, str | None, list[Any], list[Any], dict[str, Any]]] = {
    "answered at once": (
        "{to: full}", None, [GOOD], [],
        {"tried": ("fast",), "mistakes": (), "waits": [], "fast": 1, "full": 0, "model": "fast"},
    ),
    "a mistake escalates": (
        "{to: full}", None, [BAD], [GOOD],
        {"tried": ("fast", "full"), "mistakes": ("schema_violation",), "waits": [], "fast": 1, "full": 1},
    ),
    "errors back off on the last tier": (
        "{to: full, max_attempts: 4}", ONLY_FULL, [], [down(), down(), GOOD],
        {"tried": ("full",) * 3, "waits": [(1, "upstream_error"), (2, "upstream_error")], "full": 3},
    ),
    "errors until no attempt is left": (
        "{to: full, max_attempts: 3}", ONLY_FULL, [], [down(), down(), down()],
        {"error": "UpstreamError", "waits": [(1, "upstream_error"), (2, "upstream_error")], "full": 3},
    ),
    "mistakes until no attempt is left": (
        "{to: full, max_attempts: 3}", None, [BAD], [BAD, BAD],
        {"error": "ChecksFailed", "waits": [], "fast": 1, "full": 2},
    ),
    "one attempt only": (
        "{to: full, max_attempts: 1}", None, [BAD], [],
        {"error": "ChecksFailed", "waits": [], "fast": 1, "full": 0},
    ),
    "an error not escalated on": (
        "{to: full, on: [invalid_json]}", ONLY_FULL, [], [down()],
        {"error": "UpstreamError", "waits": [], "full": 1},
    ),
}  # fmt: skip


async def run(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream: bool = False) -> dict[str, Any]:
    escalate, routes, fast_script, full_script, _ = CASES[case]
    waits: list[tuple[int, str]] = []

    def backoff(attempts: Attempts) -> float:
        waits.append((len(attempts.outcome().attempts), attempts.mistakes[-1]))
        return 0.0

    monkeypatch.setattr(Attempts, "backoff", backoff)
    policy = policy_text(UNUSED, extra=f"escalation: {escalate}\n", routes=routes)
    fast, full = Scripted("fast", fast_script), Scripted("full", full_script)
    seen: dict[str, Any] = {}
    async with started(policy, tmp_path, fast=fast, full=full) as runtime:
        try:
            if stream:
                attempts, chunks = await pipeline.stream(runtime, ask("weather?", tools=True, stream=True))
                _ = [c async for c in chunks]
                outcome = attempts.outcome()
            else:
                outcome, reply = await pipeline.complete(runtime, ask("weather?", tools=True))
                seen.update(model=reply.data["model"])
            seen.update(tried=outcome.tried, mistakes=outcome.mistakes)
        except Exception as exc:
            seen.update(error=type(exc).__name__)
        seen.update(fast=len(fast.bodies), full=len(full.bodies), waits=waits)
    return seen


@pytest.mark.parametrize("name", list(CASES))
async def test_each_step_is_run_as_it_says(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = await run(name, tmp_path, monkeypatch)
    expected = CASES[name][-1]
    assert {k: seen.get(k) for k in expected} == expected


@pytest.mark.parametrize("name", list(CASES))
async def test_a_stream_runs_the_same_loop(name: str, tmp_path_factory: pytest.TempPathFactory,
                                           monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    whole = await run(name, tmp_path_factory.mktemp("whole"), monkeypatch)
    streamed = await run(name, tmp_path_factory.mktemp("stream"), monkeypatch, stream=True)
    whole.pop("model", None)
    assert streamed == whole


async def test_the_outcome_has_every_attempt_with_its_mistakes_and_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = policy_text(UNUSED, extra="escalation: {to: full}\n")
    fast, full = Scripted("fast", [BAD]), Scripted("full", [GOOD])
    async with started(policy, tmp_path, fast=fast, full=full) as runtime:
        outcome, _ = await pipeline.complete(runtime, ask("weather?", tools=True))
    first, second = outcome.attempts
    assert (first.tier, first.mistakes, first.how) == ("fast", ("schema_violation",), "escalated")
    assert (second.tier, second.mistakes, second.how) == ("full", (), "answered")
    assert first.ended is not None and second.ended is not None and second.first_token is not None
    assert 0 <= first.started <= first.ended <= second.started <= second.first_token <= second.ended <= outcome.took


async def test_a_tier_skipped_as_open_is_the_mistake_of_the_attempt_that_skipped_it(tmp_path: Path) -> None:
    policy = policy_text(UNUSED, extra="escalation: {to: full}\n")
    fast, full = Scripted("fast", []), Scripted("full", [GOOD])
    async with started(policy, tmp_path, fast=fast, full=full) as runtime:
        for _ in range(10):
            runtime.breakers.failed("fast", runtime.policy.current.models["fast"].breaker, "down")
        outcome, _ = await pipeline.complete(runtime, ask("weather?", tools=True))
    assert outcome.tried == ("full",) and outcome.skipped == ("fast",)
    assert [(t.tier, t.mistakes) for t in outcome.attempts] == [("full", ("tier_open",))]


async def test_the_backoff_doubles_and_never_goes_past_the_deadline(tmp_path: Path) -> None:
    async with started(policy_text(UNUSED), tmp_path, fast=Scripted("fast", []), full=Scripted("full", [])) as runtime:
        attempts = await pipeline.begin(runtime, ask("weather?", tools=True))
        runtime.lanes.leave(attempts.lane)
        waits = []
        for _ in range(6):
            attempts.next_attempt()
            waits.append(attempts.backoff())
        assert 0.1 <= waits[0] <= 0.3 and 0.2 <= waits[1] <= 0.4 and all(2.0 <= w <= 2.2 for w in waits[5:])
        attempts.deadline = attempts.started  # past: no wait at all
        assert attempts.backoff() == 0.0


async def test_a_stream_escalates_after_its_first_attempt(tmp_path: Path) -> None:
    policy = policy_text(UNUSED, extra="escalation: {to: full}\n")
    fast, full = Scripted("fast", [BAD]), Scripted("full", [text("fine")])
    async with started(policy, tmp_path, fast=fast, full=full) as runtime:
        attempts, chunks = await pipeline.stream(runtime, ask("weather?", tools=True, stream=True))
        sent = [c async for c in chunks]
    assert attempts.tried == ["fast", "full"] and attempts.mistakes == ["schema_violation"]
    assert "".join(c.data["choices"][0]["delta"].get("content") or "" for c in sent).strip() == "fine"
