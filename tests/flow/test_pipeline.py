"""router/flow/pipeline.py without sockets: `complete` and `stream` through scripted in-process tiers
(tests/scripted.py). The live-server suites (tests/api, tests/fault) cover the same flow over HTTP."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from router.core.call import Call, chat_call
from router.errors import ChecksFailed, UpstreamError
from router.flow import pipeline
from router.flow.outcome import Outcome
from router.flow.summary import router_headers
from router.metrics import Metrics
from router.upstream.base import Chunk
from tests.conftest import policy_text
from tests.scripted import UNUSED, WEATHER, Scripted, call, started, text
from tests.sweeps import SHELL_TOOLS, SWEEP_CALLS, SWEEP_TEXT, calls

POLICY = policy_text(UNUSED, extra="escalation: {to: full}\n")


def ask(content: str, *, tools: bool = False, stream: bool = False) -> Call:
    body: dict[str, Any] = {"model": "auto", "messages": [{"role": "user", "content": content}], "stream": stream}
    if tools:
        body["tools"] = [WEATHER]
    return chat_call(orjson.dumps(body), {})


async def test_complete_answers_from_the_routed_tier(tmp_path: Path) -> None:
    fast, full = Scripted("fast", [call("get_weather", '{"city": "Paris"}')]), Scripted("full", [])
    async with started(POLICY, tmp_path, fast=fast, full=full) as runtime:
        attempts, reply = await pipeline.complete(runtime, ask("weather in Paris?", tools=True))
    assert (attempts.tier, attempts.route, attempts.tried) == ("fast", "simple-tool-call", ("fast",))
    assert reply.data["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'
    assert fast.bodies[0]["messages"][0]["content"] == "weather in Paris?"
    assert fast.started and fast.closed and not full.bodies


async def test_complete_escalates_a_mistake_to_the_stronger_tier(tmp_path: Path) -> None:
    fast = Scripted("fast", [call("get_weather", '{"city": ')])  # cut-off arguments: invalid_json
    full = Scripted("full", [call("get_weather", '{"city": "Oslo"}')])
    async with started(POLICY, tmp_path, fast=fast, full=full) as runtime:
        attempts, reply = await pipeline.complete(runtime, ask("weather in Oslo?", tools=True))
    assert attempts.tried == ("fast", "full") and attempts.escalated and attempts.mistakes == ("invalid_json",)
    assert reply.data["model"] == "full"


async def test_stream_sends_text_as_it_comes_and_hides_an_escalated_call(tmp_path: Path) -> None:
    fast = Scripted("fast", [call("get_weather", "not json")])
    full = Scripted("full", [call("get_weather", '{"city": "Rome"}')])
    async with started(POLICY, tmp_path, fast=fast, full=full) as runtime:
        attempts, chunks = await pipeline.stream(runtime, ask("weather in Rome?", tools=True, stream=True))
        sent = [c.data async for c in chunks]
    assert attempts.outcome().tried == ("fast", "full")
    deltas = [c["choices"][0]["delta"] for c in sent if c.get("choices")]
    calls = [tc for d in deltas for tc in d.get("tool_calls") or ()]
    assert [tc["function"]["arguments"] for tc in calls] == ['{"city": "Rome"}']  # fast's call never left
    assert sum("role" in d for d in deltas) == 1
    assert {c["id"] for c in sent} == {sent[0]["id"]}  # one stream: one id


def ask_shell(stream: bool = False) -> Call:
    content = "Total the north region's sales in /data/sales-q1.csv."
    body = {"model": "auto", "messages": [{"role": "user", "content": content}], "tools": SHELL_TOOLS, "stream": stream}
    return chat_call(orjson.dumps(body), {})


GREP = '{"pattern": "north", "path": "/data/sales-q1.csv"}'


@pytest.mark.parametrize("answer", [text(SWEEP_TEXT), calls(*SWEEP_CALLS)], ids=["as-text", "as-calls"])
async def test_a_sweep_escalates_and_never_reaches_the_client(tmp_path: Path, answer: dict[str, Any]) -> None:
    """The eval's sweep, written as text (which salvage would make eight valid calls) or made as calls."""
    fast, full = Scripted("fast", [answer]), Scripted("full", [calls(("grep", GREP))])
    async with started(POLICY, tmp_path, fast=fast, full=full) as runtime:
        attempts, reply = await pipeline.complete(runtime, ask_shell())
    assert attempts.tried == ("fast", "full") and not attempts.salvaged and not attempts.repaired
    headers = router_headers(attempts)
    assert (headers["x-router-tier"], headers["x-router-mistakes"]) == ("full", "tool_sweep")
    message = reply.data["choices"][0]["message"]
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["grep"] and not message.get("content")
    assert b"calculate" not in orjson.dumps(reply.data)  # nothing of the sweep


@pytest.mark.parametrize("answer", [text(SWEEP_TEXT), calls(*SWEEP_CALLS)], ids=["as-text", "as-calls"])
async def test_a_streamed_sweep_escalates_and_never_reaches_the_client(tmp_path: Path, answer: dict[str, Any]) -> None:
    fast, full = Scripted("fast", [answer]), Scripted("full", [calls(("grep", GREP))])
    async with started(POLICY, tmp_path, fast=fast, full=full) as runtime:
        attempts, chunks = await pipeline.stream(runtime, ask_shell(stream=True))
        sent = [c.data async for c in chunks]
    outcome = attempts.outcome()
    assert outcome.tried == ("fast", "full") and router_headers(outcome)["x-router-mistakes"] == "tool_sweep"
    deltas = [c["choices"][0]["delta"] for c in sent if c.get("choices")]
    assert "".join(d.get("content") or "" for d in deltas) == ""  # the held text never left
    names = [tc["function"]["name"] for d in deltas for tc in d.get("tool_calls") or () if "name" in tc["function"]]
    assert names == ["grep"]


async def test_stream_of_text(tmp_path: Path) -> None:
    fast = Scripted("fast", [text("hello there")])
    async with started(POLICY, tmp_path, fast=fast, full=Scripted("full", [text("I am full")])) as runtime:
        attempts, chunks = await pipeline.stream(runtime, ask("hi", stream=True))
        sent = [c.data async for c in chunks]
    assert attempts.tier == "full"  # the default route
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in sent if c.get("choices"))
    assert content == "I am full "
    assert sent[-1]["choices"][0]["finish_reason"] == "stop"


async def test_an_upstream_error_on_the_last_tier_is_raised(tmp_path: Path) -> None:
    error = UpstreamError("tier 'full' is down", tier="full")
    full = Scripted("full", [error, error, error])
    policy = policy_text(UNUSED, extra="escalation: {to: full, on: [invalid_json]}\n")
    async with started(policy, tmp_path, fast=Scripted("fast", []), full=full) as runtime:
        with pytest.raises(UpstreamError):
            await pipeline.complete(runtime, ask("hi"))
    assert len(full.bodies) == 1  # `upstream_error` is not in `on`: no second try


class Reads(Scripted):
    """A tier whose stream arrives in reads: `reads[i]` is one read's events (`more` on all but its
    last, as router/upstream/http.py marks them); an exception in a read fails the stream there."""

    def __init__(self, tier: str, reads: list[list[dict[str, Any] | Exception]]) -> None:
        super().__init__(tier, [])
        self.reads = reads

    async def stream(self, body: dict[str, Any], deadline: float, session: Any = None) -> AsyncIterator[Chunk]:
        self.bodies.append(body)
        for read in self.reads:
            for i, delta in enumerate(read):
                if isinstance(delta, Exception):
                    raise delta
                finish = delta.pop("finish", None)
                choice = {"index": 0, "delta": delta, "finish_reason": finish}
                yield Chunk({"id": "c", "model": self.tier, "choices": [choice]}, more=i < len(read) - 1)


def writes(sent: list[Chunk]) -> list[list[str]]:
    """The chunks as the transport writes them (a write ends at a chunk without `more`), each chunk
    named by its text, `role`, `call`, `finish:<reason>` or `empty`."""
    out: list[list[str]] = [[]]
    for c in sent:
        delta, finish = c.data["choices"][0]["delta"], c.data["choices"][0]["finish_reason"]
        name = delta.get("content") or ("call" if delta.get("tool_calls") else "role" if delta.get("role") else "")
        name = name or (f"finish:{finish}" if finish else "empty")
        out[-1].append(name)
        if not c.more:
            out.append([])
    return out


async def test_stream_events_received_together_are_sent_together_and_the_held_part_with_the_end(
    tmp_path: Path,
) -> None:
    reads: list[list[dict[str, Any] | Exception]] = [
        [{"role": "assistant"}, {"content": "a"}, {"content": "b"}],
        [{"content": "c"}, {"content": "d"}, {"finish": "stop"}],  # the finish is held until judged
    ]
    async with started(POLICY, tmp_path, fast=Scripted("fast", []), full=Reads("full", reads)) as runtime:
        _, chunks = await pipeline.stream(runtime, ask("hi", stream=True))
        sent = [c async for c in chunks]
    # one write per read; the held finish is marked `more`: the transport writes it with the stream's end
    assert writes(sent) == [["role", "a", "b"], ["c", "d"], ["finish:stop"]]
    assert sent[-1].more


async def test_stream_events_received_before_a_failure_are_sent(tmp_path: Path) -> None:
    down = UpstreamError("tier 'fast' closed the connection", tier="fast")
    fast = Reads("fast", [[{"role": "assistant"}, {"content": "a"}, down]])
    full = Reads("full", [[{"role": "assistant"}, {"content": "b"}, {"finish": "stop"}]])
    async with started(POLICY, tmp_path, fast=fast, full=full) as runtime:
        body = {"model": "fast", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        attempts, chunks = await pipeline.stream(runtime, chat_call(orjson.dumps(body), {}))
        sent = [c async for c in chunks]
    assert attempts.outcome().tried == ("fast", "full")
    # fast's text went out before its failure (as one write); full's follows after a blank line (its
    # role delta is dropped: the client had one)
    assert writes(sent) == [["role", "a"], ["empty", "\n\nb"], ["finish:stop"]]


async def test_a_finished_call_leaves_none_of_its_objects_to_the_cycle_collector(tmp_path: Path) -> None:
    """tenacity's loop object refers to itself (a cycle only the garbage collector frees); the call's
    trace, body and answer must not hang off it, or each call's objects wait for a collection."""
    fast = Scripted("fast", [call("get_weather", '{"city": "Paris"}')] * 30)
    full = Scripted("full", [text("hi")] * 20)
    async with started(POLICY, tmp_path, fast=fast, full=full) as runtime:
        await pipeline.complete(runtime, ask("warm up", tools=True))
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for _ in range(10):
                await pipeline.complete(runtime, ask("weather in Paris?", tools=True))
                _, chunks = await pipeline.stream(runtime, ask("weather in Paris?", tools=True, stream=True))
                [c async for c in chunks]
            gc.collect()
            kept = {type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith("router.")}
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    assert kept == set()


# -- repeated_call: the agent's last calls again go to a stronger tier, if there is one -------------------------

SENT = '{"to": "@maria", "text": "The total is 370."}'


def after_a_turn(made: dict[str, Any]) -> Call:
    """The agent's next request after the tiers' `made` turn, its result brought back."""
    message = {**made, "tool_calls": [{**made["tool_calls"][0], "id": "call_0"}]}
    body = {
        "model": "auto",
        "messages": [
            {"role": "user", "content": "Tell Maria the total."},
            message,
            {"role": "tool", "tool_call_id": "call_0", "content": "sent to @maria"},
        ],
        "tools": [SEND_TOOL],
    }
    return chat_call(orjson.dumps(body), {})


SEND_TOOL = {
    "type": "function",
    "function": {
        "name": "send_message",
        "parameters": {
            "type": "object",
            "properties": {"to": {"type": "string"}, "text": {"type": "string"}},
            "required": ["to", "text"],
        },
    },
}


async def test_a_repeat_of_the_last_turn_goes_to_the_stronger_tier(tmp_path: Path) -> None:
    """The 0.5B's loop as seen: the message it just sent, sent again (its spacing its own)."""
    fast = Scripted("fast", [call("send_message", '{"text":"The total is 370.","to":"@maria"}')])
    full = Scripted("full", [text("Sent: the total is 370.")])
    async with started(POLICY, tmp_path, fast=fast, full=full) as runtime:
        attempts, reply = await pipeline.complete(runtime, after_a_turn(call("send_message", SENT)))
    assert attempts.tried == ("fast", "full") and attempts.mistakes == ("repeated_call",)
    assert router_headers(attempts)["x-router-mistakes"] == "repeated_call"
    assert "x-router-signs" not in router_headers(attempts)  # full's answer has none
    assert reply.data["choices"][0]["message"]["content"] == "Sent: the total is 370."


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_the_last_tiers_repeat_is_delivered(tmp_path: Path, stream: bool) -> None:
    """Agents poll by calling again: the chain's last tier's repeat reaches the agent, in one attempt."""
    full = Scripted("full", [call("send_message", SENT, "call_7")])
    routes = "routes:\n  - {name: default, use: full}\n"
    policy = policy_text(UNUSED, extra="escalation: {to: full, max_attempts: 3}\n", routes=routes)
    asked = after_a_turn(call("send_message", SENT))
    if stream:
        asked = chat_call(orjson.dumps({**asked.body, "stream": True}), {})
    async with started(policy, tmp_path, fast=Scripted("fast", []), full=full) as runtime:
        if stream:
            streaming, chunks = await pipeline.stream(runtime, asked)
            sent = [c.data async for c in chunks]
            made = [tc for c in sent if c.get("choices") for tc in c["choices"][0]["delta"].get("tool_calls") or ()]
            assert [tc["function"]["arguments"] for tc in made if tc["function"].get("arguments")] == [SENT]
            attempts = streaming.outcome()
        else:
            attempts, reply = await pipeline.complete(runtime, asked)
            assert reply.data["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == SENT
    assert attempts.tried == ("full",) and attempts.mistakes == ("repeated_call",) and not attempts.exhausted
    assert len(full.bodies) == 1 and router_headers(attempts)["x-router-signs"] == "repeated_call"


def sampling(repeat: str = "{tier: full-resample}", max_attempts: int = 3) -> str:
    """local.yaml's shape: full greedy, all on full, repeats (and full's signs) sampled on full-resample."""
    routes = "routes:\n  - {name: default, use: full}\n"
    extra = f"escalation: {{to: full, max_attempts: {max_attempts}, repeat: {repeat}}}\n"
    text = policy_text(UNUSED, extra=extra, routes=routes)
    text = text.replace("model: openai/full-model", "model: openai/full-model\n    params: {temperature: 0}")
    variant = f"  full-resample:\n    model: openai/full-model\n    api_base: {UNUSED}\n"
    return text.replace("store:", variant + "    params: {temperature: 0.7}\nstore:")


def sampled_tiers(*answers: dict[str, Any] | Exception, fast: list[Any] | None = None) -> dict[str, Scripted]:
    """fast unused (or `fast`); full writes the agent's last call again; full-resample `answers`."""
    again = call("send_message", SENT, "call_7")
    return {"fast": Scripted("fast", fast or []), "full": Scripted("full", [again]),
            "full-resample": Scripted("full-resample", list(answers))}  # fmt: skip


async def sampled_run(
    policy: str, tmp_path: Path, tiers: dict[str, Scripted], stream: bool
) -> tuple[Outcome, str, Metrics]:
    """The agent's next request after sending its message: (its outcome, the arguments of the call it
    got, the metrics)."""
    asked = after_a_turn(call("send_message", SENT))
    async with started(policy, tmp_path, **tiers) as runtime:
        if stream:
            streamed = chat_call(orjson.dumps({**asked.body, "stream": True}), {})
            attempts, chunks = await pipeline.stream(runtime, streamed)
            sent = [c.data async for c in chunks]
            made = [tc for c in sent if c.get("choices") for tc in c["choices"][0]["delta"].get("tool_calls") or ()]
            assert len({c["id"] for c in sent}) == 1
            return attempts.outcome(), "".join(tc["function"].get("arguments") or "" for tc in made), runtime.metrics
        outcome, reply = await pipeline.complete(runtime, asked)
        arguments = reply.data["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
        return outcome, arguments, runtime.metrics


OUTCOMES = ("sampled", "answered", "fell_back")


def samples(metrics: Metrics, outcome: Outcome, after: str) -> list[float]:
    """router_samples_total of the call's route: [sampled, answered, fell_back]."""
    counter = metrics.samples
    return [counter.labels(outcome.route, after, how)._value.get() for how in OUTCOMES]


# where a sample could not help: no attempt left, the repeat tier is the greedy tier itself, repeats not resampled
NO_SAMPLE = pytest.mark.parametrize(
    "policy",
    [sampling(max_attempts=1), sampling(repeat="{tier: full}"), sampling(repeat="null")],
    ids=["no-attempt-left", "greedy-repeat-tier", "no-repeat"],
)


async def test_the_greedy_last_tiers_repeat_gets_one_sampled_attempt(tmp_path: Path) -> None:
    """The sticky 1.5B's loop (create_issue 7 turns running): its repeat is sampled once before the
    agent sees it, on the repeat tier, without the client's seed."""
    tiers = sampled_tiers(text("Done: Maria has the total."))
    asked = chat_call(orjson.dumps({**after_a_turn(call("send_message", SENT)).body, "seed": 7}), {})
    async with started(sampling(), tmp_path, **tiers) as runtime:
        attempts, reply = await pipeline.complete(runtime, asked)
    assert attempts.tried == ("full", "full-resample") and attempts.mistakes == ("repeated_call",)
    assert reply.data["choices"][0]["message"]["content"] == "Done: Maria has the total."
    sample = tiers["full-resample"].bodies[0]
    assert sample["temperature"] == 0.7 and "seed" not in sample and "seed" in tiers["full"].bodies[0]
    headers = router_headers(attempts)
    assert not attempts.exhausted and headers["x-router-tier"] == "full-resample" and "x-router-signs" not in headers


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_sampled_repeat_is_delivered(tmp_path: Path, stream: bool) -> None:
    """Sampled, the model polls again: a sign is never refused, and no third attempt is made."""
    tiers = sampled_tiers(call("send_message", SENT, "call_8"))
    attempts, arguments, metrics = await sampled_run(sampling(), tmp_path, tiers, stream)
    assert arguments == SENT and attempts.tier == "full-resample"
    assert attempts.tried == ("full", "full-resample") and attempts.mistakes == ("repeated_call", "repeated_call")
    assert not attempts.exhausted and len(tiers["full"].bodies) == 1 and attempts.signs == ("repeated_call",)
    assert samples(metrics, attempts, "sign") == [1, 1, 0]


BROKEN = call("send_message", '{"to": "@maria", "text": ')  # cut off: invalid_json


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(
    "sample", [BROKEN, UpstreamError("reset by peer", tier="full-resample")], ids=["broken", "upstream-error"]
)
async def test_a_failed_sample_delivers_the_held_answer(
    tmp_path: Path, stream: bool, sample: dict[str, Any] | Exception
) -> None:
    """The sample's mistake or error is not answered again: the greedy answer, held meanwhile, is
    delivered with its sign, and never refused."""
    tiers = sampled_tiers(sample)
    attempts, arguments, metrics = await sampled_run(sampling(), tmp_path, tiers, stream)
    assert arguments == SENT and attempts.tier == "full" and attempts.signs == ("repeated_call",)
    assert attempts.tried == ("full", "full-resample") and attempts.mistakes[0] == "repeated_call"
    assert attempts.mistakes[1] == ("invalid_json" if isinstance(sample, dict) else "upstream_error")
    assert not attempts.exhausted and not attempts.repaired and len(tiers["full"].bodies) == 1
    assert router_headers(attempts)["x-router-signs"] == "repeated_call"
    assert samples(metrics, attempts, "sign") == [1, 0, 1]


async def test_an_escalated_calls_repeat_is_sampled_with_its_last_attempt(tmp_path: Path) -> None:
    """fast's text call, then full's repeat (the sticky 1.5B's, after a repair): the third attempt samples it."""
    routes = "routes:\n  - {name: tools, when: {tools: {present: true}}, use: fast}\n  - {name: default, use: full}\n"
    policy = sampling().replace("routes:\n  - {name: default, use: full}\n", routes)
    text_call = text('{"name": "send_message", "arguments": {"to": "@maria", "text": ')
    tiers = sampled_tiers(text("Done: Maria has the total."), fast=[text_call])
    async with started(policy, tmp_path, **tiers) as runtime:
        attempts, reply = await pipeline.complete(runtime, after_a_turn(call("send_message", SENT)))
    assert attempts.tried == ("fast", "full", "full-resample")
    assert attempts.mistakes == ("text_tool_call", "repeated_call")
    assert reply.data["choices"][0]["message"]["content"] == "Done: Maria has the total."


async def test_a_repeat_written_as_text_is_salvaged_and_sampled_at_once(tmp_path: Path) -> None:
    """The sticky 1.5B writes its repeat as text, turn after turn: salvaged, it is the sign it is, and
    its sample comes next — no repair that pins the tool only to make the same call again."""
    tiers = sampled_tiers(text("Done: Maria has the total."))
    tiers["full"] = Scripted("full", [text('{"name": "send_message", "arguments": ' + SENT + "}")])
    async with started(sampling(), tmp_path, **tiers) as runtime:
        attempts, reply = await pipeline.complete(runtime, after_a_turn(call("send_message", SENT)))
    assert attempts.tried == ("full", "full-resample") and attempts.mistakes == ("repeated_call",)
    assert attempts.salvaged and not attempts.repaired and attempts.sampled == "sign"
    assert reply.data["choices"][0]["message"]["content"] == "Done: Maria has the total."


@NO_SAMPLE
async def test_no_sample_where_it_could_not_help(tmp_path: Path, policy: str) -> None:
    tiers = sampled_tiers(text("unused"))
    async with started(policy, tmp_path, **tiers) as runtime:
        attempts, reply = await pipeline.complete(runtime, after_a_turn(call("send_message", SENT)))
    assert attempts.tried == ("full",) and attempts.mistakes == ("repeated_call",) and not attempts.exhausted
    assert reply.data["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == SENT
    assert not tiers["full-resample"].bodies


# -- a mistake of the greedy last tier: sampled within the call, not a 502 for the agent to retry ---------------

OMAR = '{"to": "@omar", "text": "Done."}'


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_the_greedy_last_tiers_mistake_is_sampled_within_the_call(tmp_path: Path, stream: bool) -> None:
    """The sticky 1.5B's empty answer: asked again greedily it would be empty again, and the agent's
    retry of a 502 would run sampled anyway — so the call goes on to the repeat tier at once."""
    tiers = sampled_tiers(call("send_message", OMAR, "call_8"))
    tiers["full"] = Scripted("full", [text("")])
    attempts, arguments, metrics = await sampled_run(sampling(), tmp_path, tiers, stream)
    assert arguments == OMAR and attempts.tried == ("full", "full-resample") and attempts.sampled == "mistake"
    assert attempts.mistakes == ("empty_response",) and not attempts.exhausted and attempts.signs == ()
    assert tiers["full-resample"].bodies[0]["temperature"] == 0.7
    headers = router_headers(attempts)
    assert headers["x-router-tier"] == "full-resample" and headers["x-router-sampled"] == "mistake"
    assert samples(metrics, attempts, "mistake") == [1, 1, 0]


async def test_a_sampled_call_stays_on_the_repeat_tier_and_its_failure_is_a_502_to_retry(tmp_path: Path) -> None:
    """A failed sample is sampled again there (never back down the chain); with no attempt left the
    call ends as it did without the sample: a retryable error, and the agent's retry runs resampled."""
    tiers = sampled_tiers(text(""), text(""), call("send_message", OMAR, "call_8"))
    tiers["full"] = Scripted("full", [text("")])
    asked = after_a_turn(call("send_message", SENT))
    async with started(sampling(), tmp_path, **tiers) as runtime:
        with pytest.raises(ChecksFailed) as failed:
            await pipeline.complete(runtime, asked)
        assert failed.value.should_retry and "run again resampled" in failed.value.message
        assert failed.value.outcome.tried == ("full", "full-resample", "full-resample")
        # sampled, and no answer delivered
        assert samples(runtime.metrics, failed.value.outcome, "mistake") == [1, 0, 0]
        attempts, reply = await pipeline.complete(runtime, asked)
    assert attempts.repeat == "resampled" and attempts.tried == ("full-resample",)
    assert reply.data["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == OMAR
    assert not tiers["fast"].bodies and len(tiers["full"].bodies) == 1


@NO_SAMPLE
async def test_no_sample_of_a_mistake_where_it_could_not_help(tmp_path: Path, policy: str) -> None:
    tiers = sampled_tiers(text("unused"))
    tiers["full"] = Scripted("full", [text("")])
    async with started(policy, tmp_path, **tiers) as runtime:
        with pytest.raises(ChecksFailed) as failed:
            await pipeline.complete(runtime, after_a_turn(call("send_message", SENT)))
    assert failed.value.outcome.tried == ("full",) and failed.value.outcome.exhausted
    assert not tiers["full-resample"].bodies


async def test_no_sample_of_a_mistake_once_text_was_streamed(tmp_path: Path) -> None:
    """The client has the greedy answer's text: a sample would add another's after it."""
    tiers = sampled_tiers(text("unused"))
    announced = text("I will call send_message now.")  # missing_tool_call, its text streamed as it came
    tiers["full"] = Scripted("full", [announced, announced])  # the second time repaired (the tool pinned)
    asked = after_a_turn(call("send_message", SENT))
    async with started(sampling(), tmp_path, **tiers) as runtime:
        attempts, chunks = await pipeline.stream(runtime, chat_call(orjson.dumps({**asked.body, "stream": True}), {}))
        with pytest.raises(ChecksFailed) as failed:
            [c async for c in chunks]
    outcome = failed.value.outcome
    assert outcome.tried == ("full", "full") and outcome.repaired and attempts.streamed
    assert not tiers["full-resample"].bodies


async def test_a_spray_goes_to_the_stronger_tier(tmp_path: Path) -> None:
    """The 0.5B's one meeting as 18 events, an hour apart: full schedules it once."""
    spray = calls(*(("send_message", f'{{"to": "@maria", "text": "{h}:00"}}') for h in range(10, 28)))
    once = calls(("send_message", '{"to": "@maria", "text": "Budget review, Wednesday 10:00"}'))
    fast, full = Scripted("fast", [spray]), Scripted("full", [once])
    async with started(POLICY, tmp_path, fast=fast, full=full) as runtime:
        attempts, reply = await pipeline.complete(runtime, after_a_turn(call("send_message", SENT)))
    assert attempts.tried == ("fast", "full") and attempts.mistakes == ("tool_spray",)
    assert len(reply.data["choices"][0]["message"]["tool_calls"]) == 1
