"""A call's first attempt runs outside tenacity's loop, the others in it (`Attempts.retries`,
router/flow/retries.py): checked side by side with the loop running every attempt (as the pipeline
did before), on scripted tiers (tests/scripted.py): the same tiers tried, the same mistakes, the
same backoffs asked for (attempt number and cause), the same answer or error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tenacity import RetryCallState

from router.core.call import Call
from router.errors import UpstreamError
from router.flow import pipeline, retries
from router.runtime import Runtime
from router.upstream.base import Reply
from tests.conftest import policy_text
from tests.flow.test_pipeline import ask
from tests.scripted import UNUSED, Scripted, call, started, text

BAD = call("get_weather", '{"town": "Paris"}')  # schema_violation
GOOD = call("get_weather", '{"city": "Paris"}')
ONLY_FULL = "routes:\n  - name: default\n    use: full\n"


def down() -> UpstreamError:
    return UpstreamError("tier 'full' is down", tier="full")


async def tenacity_only(runtime: Runtime, call: Call) -> tuple[Any, Reply]:
    """The pipeline's JSON flow with every attempt in tenacity's loop (the reference)."""
    attempts = await pipeline.begin(runtime, call)
    try:
        async for attempt in attempts.attempts():
            with attempt:
                reply = await pipeline._answer(attempts)
    finally:
        runtime.lanes.leave(attempts.lane)
    return attempts, reply


# (escalation, routes, fast's script, full's script)
CASES: dict[str, tuple[str, str | None, list[Any], list[Any]]] = {
    "answered at once": ("{to: full}", None, [GOOD], []),
    "a mistake escalates": ("{to: full}", None, [BAD], [GOOD]),
    "errors back off on the last tier": ("{to: full, max_attempts: 4}", ONLY_FULL, [], [down(), down(), GOOD]),
    "errors until no attempt is left": ("{to: full, max_attempts: 3}", ONLY_FULL, [], [down(), down(), down()]),
    "mistakes until no attempt is left": ("{to: full, max_attempts: 3}", None, [BAD], [BAD, BAD]),
    "one attempt only": ("{to: full, max_attempts: 1}", None, [BAD], []),
    "an error not escalated on": ("{to: full, on: [invalid_json]}", ONLY_FULL, [], [down()]),
}


async def run(
    flow: Any, case: tuple[str, str | None, list[Any], list[Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    escalate, routes, fast_script, full_script = case
    waits: list[tuple[int, str]] = []

    def backoff(state: RetryCallState) -> float:
        cause = state.outcome.exception() if state.outcome else None
        waits.append((state.attempt_number, str(cause)))
        return 0.0

    monkeypatch.setattr(retries, "_backoff", backoff)
    policy = policy_text(UNUSED, extra=f"escalation: {escalate}\n", routes=routes)
    fast, full = Scripted("fast", fast_script), Scripted("full", full_script)
    seen: dict[str, Any] = {}
    async with started(policy, tmp_path, fast=fast, full=full) as runtime:
        try:
            attempts, reply = await flow(runtime, ask("weather?", tools=True))
            seen.update(tried=attempts.tried, mistakes=attempts.mistakes, exhausted=attempts.exhausted)
            seen.update(model=reply.data["model"])
        except Exception as exc:
            seen.update(error=(type(exc).__name__, str(exc)))
        seen.update(fast=len(fast.bodies), full=len(full.bodies), waits=waits)
    return seen


@pytest.mark.parametrize("name", list(CASES))
async def test_the_first_attempt_outside_the_loop_retries_as_the_loop_did(
    name: str, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = CASES[name]
    ours = await run(pipeline.complete, case, tmp_path_factory.mktemp("ours"), monkeypatch)
    assert ours == await run(tenacity_only, case, tmp_path_factory.mktemp("tenacity"), monkeypatch)


async def test_backoff_is_asked_per_failed_attempt_with_its_number(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = await run(
        pipeline.complete, CASES["errors back off on the last tier"], tmp_path_factory.mktemp("a"), monkeypatch
    )
    assert seen["tried"] == ["full", "full", "full"] and seen["full"] == 3
    assert seen["waits"] == [(1, "upstream_error"), (2, "upstream_error")]
    seen = await run(
        pipeline.complete, CASES["errors until no attempt is left"], tmp_path_factory.mktemp("b"), monkeypatch
    )
    assert seen["error"][0] == "UpstreamError" and seen["full"] == 3 and len(seen["waits"]) == 2


async def test_a_stream_escalates_after_its_first_attempt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = policy_text(UNUSED, extra="escalation: {to: full}\n")
    fast, full = Scripted("fast", [BAD]), Scripted("full", [text("fine")])
    async with started(policy, tmp_path, fast=fast, full=full) as runtime:
        attempts, chunks = await pipeline.stream(runtime, ask("weather?", tools=True, stream=True))
        sent = [c async for c in chunks]
    assert attempts.tried == ["fast", "full"] and attempts.mistakes == ["schema_violation"]
    assert "".join(c.data["choices"][0]["delta"].get("content") or "" for c in sent).strip() == "fine"
