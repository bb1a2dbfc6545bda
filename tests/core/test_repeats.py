"""A request whose every attempt failed the checks is not run the same way again (router/core/live/repeats.py,
the policy's `escalation.repeat`): its repeats are resampled on the strongest tier, then refused at once.
The memory itself (bounded, with a TTL), then the rule through the pipeline with scripted tiers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from router.core.call import Call, chat_call
from router.core.live.repeats import Repeats, digest, resampled
from router.errors import ChecksFailed, ChecksFailedRepeatedly
from router.flow import pipeline
from router.flow.summary import error_headers, router_headers, summary
from router.policy.loader import PolicyError, parse_policy
from tests.conftest import policy_text
from tests.flow.test_pipeline import ask
from tests.scripted import UNUSED, WEATHER, Scripted, call, started, text

BAD = call("get_weather", '{"town": "Paris"}')  # schema_violation
GOOD = call("get_weather", '{"city": "Paris"}')


def policy(repeat: str = "") -> str:
    escalation = "{to: full, max_attempts: 2" + (f", repeat: {repeat}" if repeat else "") + "}"
    return policy_text(UNUSED, extra=f"escalation: {escalation}\n")


def greedy(text: str, *tiers: str) -> str:
    """`text` with the params of `tiers` pinning temperature 0, as policies/local.yaml's do."""
    for tier in tiers:
        model = f"model: openai/{tier}-model"
        text = text.replace(model, f"{model}\n    params: {{temperature: 0}}")
    return text


def counted(runtime: Any, outcome: str, route: str = "simple-tool-call") -> float:
    return runtime.metrics.repeats.labels(route, outcome)._value.get()  # type: ignore[no-any-return]


# -- the memory ------------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def asked(content: str, **fields: Any) -> Call:
    body = {"model": "auto", "messages": [{"role": "user", "content": content}], "tools": [WEATHER], **fields}
    return chat_call(orjson.dumps(body), {})


def test_a_request_counts_its_exhausted_runs_in_a_row_until_one_passes() -> None:
    repeats = Repeats(8, 60.0)
    first = repeats.seen(asked("weather?"))
    assert first.runs == 0 and first.key is None  # nothing remembered: no digest computed
    assert repeats.exhausted(first) == 1
    again = repeats.seen(asked("weather?"))
    assert again.runs == 1 and again.key == digest(asked("weather?"))
    assert repeats.exhausted(again) == 2
    assert repeats.seen(asked("weather in Oslo?")).runs == 0  # another request
    assert repeats.seen(asked("weather?", temperature=0.2)).runs == 0  # another body: another request
    # a greedy tier answers the same streamed or not, whatever the output limit: the same request
    assert repeats.seen(asked("weather?", stream=True, max_tokens=64)).runs == 2
    repeats.answered(repeats.seen(asked("weather?")))
    assert repeats.seen(asked("weather?")).runs == 0 and len(repeats) == 0


def test_the_memory_is_bounded_and_forgets_after_its_ttl() -> None:
    clock = Clock()
    repeats = Repeats(2, 60.0, clock)
    for n in range(3):
        repeats.exhausted(repeats.seen(asked(f"question {n}")))
        clock.now += 1
    assert len(repeats) == 2 and repeats.seen(asked("question 0")).runs == 0  # the least recent went first
    assert repeats.seen(asked("question 2")).runs == 1
    clock.now += 58
    assert repeats.seen(asked("question 1")).runs == 0  # failed 60 s ago: forgotten
    assert repeats.seen(asked("question 2")).runs == 1
    clock.now += 1
    assert repeats.seen(asked("question 2")).runs == 0 and len(repeats) == 0


def test_a_resampled_call_has_the_temperature_and_not_the_clients_seed() -> None:
    call_ = asked("weather?", seed=7, temperature=0)
    again = resampled(call_, 0.7)
    assert again.body["temperature"] == 0.7 and "seed" not in again.body
    assert call_.body["seed"] == 7 and call_.body["temperature"] == 0  # the client's request is untouched


# -- the rule, through the pipeline ----------------------------------------------------------------
async def test_a_repeat_is_resampled_on_the_strongest_tier_and_forgotten_once_it_passes(tmp_path: Path) -> None:
    fast, full = Scripted("fast", [BAD, GOOD]), Scripted("full", [BAD, GOOD])
    async with started(policy(), tmp_path, fast=fast, full=full) as runtime:
        with pytest.raises(ChecksFailed) as first:
            await pipeline.complete(runtime, ask("weather?", tools=True))
        assert first.value.should_retry and "run again resampled" in first.value.message
        assert first.value.outcome is not None and router_headers(first.value.outcome)["x-router-exhausted"] == "true"
        attempts, reply = await pipeline.complete(runtime, ask("weather?", tools=True))  # the agent's retry
        assert attempts.repeat == "resampled" and attempts.tried == ("full",) and reply.data["model"] == "full"
        assert router_headers(attempts)["x-router-repeat"] == "resampled"
        assert orjson.loads(summary(attempts))["repeat"] == "resampled"
        attempts, _ = await pipeline.complete(runtime, ask("weather?", tools=True))  # passed: forgotten
        assert attempts.repeat is None and attempts.tried == ("fast",)
        assert (counted(runtime, "resampled"), counted(runtime, "answered"), counted(runtime, "refused")) == (1, 1, 0)
    assert [("temperature" in b, "seed" in b) for b in fast.bodies] == [(False, False), (False, False)]
    assert full.bodies[0].get("temperature") is None  # the first run's escalation: as the client asked
    assert full.bodies[1]["temperature"] == 0.7  # the repeat: sampled


async def test_a_resampled_run_keeps_to_its_tier_and_the_last_one_tells_the_client_to_stop(tmp_path: Path) -> None:
    fast, full = Scripted("fast", [BAD]), Scripted("full", [BAD, BAD, BAD])
    async with started(policy("{resample: 1}"), tmp_path, fast=fast, full=full) as runtime:
        with pytest.raises(ChecksFailed):
            await pipeline.complete(runtime, ask("weather?", tools=True))
        with pytest.raises(ChecksFailedRepeatedly) as last:
            await pipeline.complete(runtime, ask("weather?", tools=True))
        assert not last.value.should_retry and "in each of its last 2 runs" in last.value.message
        assert last.value.outcome.tried == ("full", "full")  # both attempts on the resample tier, sampled
        with pytest.raises(ChecksFailedRepeatedly) as refused:
            await pipeline.complete(runtime, ask("weather?", tools=True))
        headers = error_headers(refused.value)
        assert headers["x-router-repeat"] == "refused" and headers["x-should-retry"] == "false"
        assert headers["x-router-route"] == "simple-tool-call" and "x-router-exhausted" not in headers
        assert counted(runtime, "refused") == 1 and counted(runtime, "answered") == 0
    assert len(fast.bodies) == 1 and len(full.bodies) == 3  # the refused repeat called no tier
    assert [b.get("temperature") for b in full.bodies] == [None, 0.7, 0.7]


async def test_resample_zero_refuses_the_first_repeat_and_null_runs_repeats_as_they_come(tmp_path: Path) -> None:
    fast, full = Scripted("fast", [BAD]), Scripted("full", [BAD])
    async with started(policy("{resample: 0}"), tmp_path, fast=fast, full=full) as runtime:
        with pytest.raises(ChecksFailedRepeatedly):  # no repeat would run: not retryable at once
            await pipeline.complete(runtime, ask("weather?", tools=True))
        with pytest.raises(ChecksFailedRepeatedly) as refused:
            await pipeline.complete(runtime, ask("weather?", tools=True))
        assert refused.value.outcome.tried == ()
    fast, full = Scripted("fast", [BAD, BAD]), Scripted("full", [BAD, BAD])
    async with started(policy("null"), tmp_path, fast=fast, full=full) as runtime:
        for _ in range(2):
            with pytest.raises(ChecksFailed) as failed:
                await pipeline.complete(runtime, ask("weather?", tools=True))
            assert failed.value.should_retry and failed.value.outcome.repeat is None
        assert len(runtime.repeats) == 0
    assert [b.get("temperature") for b in fast.bodies + full.bodies] == [None] * 4


async def test_the_repeat_tier_is_the_policys_own(tmp_path: Path) -> None:
    yaml = policy("{tier: fast}")
    fast, full = Scripted("fast", [BAD, GOOD]), Scripted("full", [BAD])
    async with started(yaml, tmp_path, fast=fast, full=full) as runtime:
        with pytest.raises(ChecksFailed):
            await pipeline.complete(runtime, ask("weather?", tools=True))
        attempts, _ = await pipeline.complete(runtime, ask("weather?", tools=True))
    assert attempts.tried == ("fast",) and fast.bodies[1]["temperature"] == 0.7
    with pytest.raises(PolicyError) as bad:
        parse_policy(policy("{tier: nowhere}"), "p.yaml", {})
    assert any("escalation.repeat.tier" in e and "unknown tier 'nowhere'" in e for e in bad.value.errors)


@pytest.mark.parametrize(("repeat", "pinned"), [("", "full"), ("{tier: fast}", "fast")])
async def test_a_greedy_repeat_tier_stops_the_client_at_once(tmp_path: Path, repeat: str, pinned: str) -> None:
    """The tier a repeat would run on (the chain's last, or `repeat.tier`) pins temperature 0: a
    resampled run could not differ, so the first run's error already says not to retry, and why; the
    repeat is refused with no upstream call."""
    fast, full = Scripted("fast", [BAD]), Scripted("full", [BAD])
    async with started(greedy(policy(repeat), pinned), tmp_path, fast=fast, full=full) as runtime:
        with pytest.raises(ChecksFailedRepeatedly) as first:
            await pipeline.complete(runtime, ask("weather?", tools=True))
        assert not first.value.should_retry and error_headers(first.value)["x-should-retry"] == "false"
        assert f"answer greedily (temperature 0 on {pinned}" in first.value.message
        assert "fails the same way" in first.value.message and "in each of its last" not in first.value.message
        with pytest.raises(ChecksFailedRepeatedly) as refused:
            await pipeline.complete(runtime, ask("weather?", tools=True))
        assert refused.value.outcome.tried == () and error_headers(refused.value)["x-router-repeat"] == "refused"
        assert "failed the router's checks in its last run" in refused.value.message
        assert f"answer greedily (temperature 0 on {pinned}" in refused.value.message
        assert (counted(runtime, "resampled"), counted(runtime, "refused")) == (0, 1)
    assert (len(fast.bodies), len(full.bodies)) == (1, 1)  # the refused repeat called no tier


async def test_a_sampled_variant_of_a_greedy_tier_resamples_its_repeats(tmp_path: Path) -> None:
    """Greedy tiers, the repeats on a sampled variant of the strongest (policies/local.yaml's
    `full-resample`): the first error invites the retry, which is resampled there, as ever."""
    variant = f"  full-resample:\n    model: openai/full-model\n    api_base: {UNUSED}\n"
    variant += "    params: {temperature: 0.7}\n"
    text = greedy(policy("{tier: full-resample}"), "fast", "full").replace("store:", variant + "store:")
    fast, full, resample = Scripted("fast", [BAD]), Scripted("full", [BAD]), Scripted("full-resample", [BAD, GOOD])
    async with started(text, tmp_path, fast=fast, full=full, **{"full-resample": resample}) as runtime:
        with pytest.raises(ChecksFailed) as first:
            await pipeline.complete(runtime, ask("weather?", tools=True))
        assert first.value.should_retry and "run again resampled" in first.value.message
        attempts, reply = await pipeline.complete(runtime, ask("weather?", tools=True))
    assert attempts.repeat == "resampled" and attempts.tried == ("full-resample", "full-resample")
    assert reply.data["model"] == "full-resample"
    assert [b["temperature"] for b in resample.bodies] == [0.7, 0.7]
    assert (len(fast.bodies), len(full.bodies)) == (1, 1)


async def test_a_streams_error_after_its_text_says_the_text_was_all_it_got(tmp_path: Path) -> None:
    announced = text("I will call get_weather now.")  # missing_tool_call, its text streamed as it came
    fast, full = Scripted("fast", [announced]), Scripted("full", [announced])
    async with started(policy(), tmp_path, fast=fast, full=full) as runtime:
        attempts, chunks = await pipeline.stream(runtime, ask("weather?", tools=True, stream=True))
        got: list[dict[str, Any]] = []
        with pytest.raises(ChecksFailed) as failed:
            async for chunk in chunks:
                got.append(chunk.data)
    sent = "".join(c["choices"][0]["delta"].get("content") or "" for c in got if c.get("choices"))
    assert sent.startswith("I will call get_weather now.") and attempts.streamed
    message = failed.value.message
    assert "only the text already streamed" in message and "nothing was delivered" not in message


async def test_one_sessions_retries_are_not_another_sessions_and_a_refusal_names_no_tier(tmp_path: Path) -> None:
    """Two agents send the same opening request: the first's exhausted request is refused when it
    repeats it, the second's is run as any first request is; the refusal's headers name no tier, as
    none was asked."""
    fast, full = Scripted("fast", [BAD, BAD]), Scripted("full", [BAD, BAD])

    def in_session(session: str) -> Call:
        body = {"model": "auto", "messages": [{"role": "user", "content": "weather?"}], "tools": [WEATHER]}
        return chat_call(orjson.dumps(body), {"x-session-id": session})

    async with started(greedy(policy(), "full"), tmp_path, fast=fast, full=full) as runtime:
        with pytest.raises(ChecksFailedRepeatedly):
            await pipeline.complete(runtime, in_session("agent-a"))
        with pytest.raises(ChecksFailedRepeatedly) as refused:
            await pipeline.complete(runtime, in_session("agent-a"))
        assert refused.value.outcome.tried == () and "x-router-tier" not in error_headers(refused.value)
        with pytest.raises(ChecksFailedRepeatedly) as other:
            await pipeline.complete(runtime, in_session("agent-b"))  # run, not refused: its own first try
        assert other.value.outcome.tried == ("fast", "full") and other.value.outcome.repeat is None
    assert (len(fast.bodies), len(full.bodies)) == (2, 2)
