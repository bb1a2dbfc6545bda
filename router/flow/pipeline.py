"""The one flow every transport shares: decide → call → check → step → record.

    attempts = begin(call)                  lane (router/core/live/lanes.py), agent feedback, sticky sessions,
                                            policy.decide (pure); a repeat of a request whose every
                                            attempt failed the checks: resampled or refused
                                            (router/core/live/repeats.py)
    loop (`_attempts`, one for both shapes):
        tier, body = attempts.next_attempt()   routed, repair, stronger, sampled (router/flow/next_tier.py),
                                            past tiers whose breaker is open (router/core/live/breaker.py)
        answer = upstream[tier](body)       pooled, warm connections; hedged if the route asks
                                            (router/flow/hedge.py); its end told to the breaker
        salvage(answer)                     a call written as text → a tool call (router/flow/salvage.py)
        step = attempts.judge(answer)       validate.check → record → a `Step` (router/flow/steps.py)
        step = attempts.verify(answer)      the route's verifier (router/core/checks/verify.py)
        Deliver → attempts.delivered(answer) (its tool calls in the store first), done;
        Retry → (backoff) again; Fail → its error

A tier that speaks the client's own API (an `anthropic/*` tier for /v1/messages) gets the client's
request itself (`Call.native`) and answers in it; the checks read the chat equivalent it comes with.

A call goes to a tier whose context window its prompt fits (`policy.decide` with the windows known,
router/core/live/context.py); a tier's own context error sends it on to a larger one, else ends it with
the client's own context error (router/flow/attempts.py). `count(runtime, call)` decides a call
the same way and counts its prompt with that tier's tokenizer (POST /v1/messages/count_tokens).

Streams run the same loop through a `Gate` that holds tool-call deltas until they are checked, so
a mistake found before anything was sent escalates invisibly. An answer of the greedy last tier
with a sign (`repeated_call`, `tool_spray`) is held — a whole reply, or its gate — while one sampled
attempt tries to better it, and delivered should that sample fail (`Deliver(held)`).

A routed call ends with its frozen `Outcome` (router/flow/outcome.py); an error of a routed call
carries it (`RouterError.outcome`), so the transports tell the client its routing with the error
(router/flow/summary.py) as with an answer, and its log line names its tier and route.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from router.core.call import Call
from router.core.checks.validate import SchemaTooCostly
from router.core.live.tracing import Span
from router.errors import RouterError, UpstreamError
from router.flow import feedback
from router.flow.attempts import Attempts
from router.flow.hedge import first_valid
from router.flow.keepalive import beating, prepend, settled
from router.flow.outcome import Outcome
from router.flow.salvage import salvage_reply, salvage_stream
from router.flow.steps import DELIVER, STEPS, Deliver, Fail, Retry, Step
from router.flow.streaming import Gate, Joiner
from router.policy.decide import Decision, Live, decide
from router.upstream.base import Chunk, Native, NativeUpstream, Reply, Speed, Upstream, Usage, speaks

if TYPE_CHECKING:
    from router.runtime import Runtime

T = TypeVar("T")
Attempt = Callable[["Attempts", dict[str, Any], str], AsyncIterator["T | Step"]]  # one attempt on a tier
log = logging.getLogger("router.pipeline")


async def begin(runtime: Runtime, call: Call) -> Attempts:
    try:
        tools = call.body.get("tools")
        tool_set = runtime.validator.admit(tools)  # a client schema too costly to check: 400 now
    except SchemaTooCostly:
        runtime.metrics.tripped("schema_too_costly")
        raise
    lane, call, policy = runtime.lanes.enter(call, runtime.policy.current)
    features = call.features.with_tools(tool_set.chars)  # what a tier's context must hold: the tools too
    try:
        fed = await feedback.read(runtime.store, runtime.metrics, call, policy)
        adaptive, windows = runtime.adaptive, runtime.windows.known()
        live = Live(sticky_tier=fed.sticky, degraded=adaptive.degraded, diverted=adaptive.diverted, windows=windows)
        decision = decide(features, policy, live)
        seen = runtime.repeats.seen(call) if policy.escalation.repeat is not None else None
    except BaseException:
        runtime.lanes.leave(lane)
        raise
    runtime.adaptive.note(decision)
    runtime.warming.offer(policy, call.session, call.body, decision.tier)  # the other tiers read it meanwhile
    attempts = Attempts(runtime.parts, call, policy, decision, lane, features.context_tokens, seen)
    attempts.admitted = (tools, tool_set)
    attempts.reported = fed.reported
    if attempts.repeat == "refused":  # every run the policy gives this request failed: not run again
        runtime.lanes.leave(lane)
        refused = attempts.refused()
        refused.outcome = attempts.outcome()
        raise refused
    return attempts


async def count(runtime: Runtime, call: Call) -> tuple[Decision, int, bool]:
    """The decision `call` would get and its prompt tokens as that tier counts them: (decision,
    tokens, counted — False when the tier has no tokenizer to ask and `tokens` is the router's estimate).
    Decided as a call is (`decided`); calls no model."""
    tools = call.body.get("tools")
    features = call.features.with_tools(len(orjson.dumps(tools)) if tools else 0)
    decision = decided(runtime, call)
    policy = runtime.policy.current
    tier = decision.tier
    deadline = asyncio.get_running_loop().time() + policy.models[tier].timeouts.first_token
    try:
        tokens = await runtime.upstreams[tier].count_tokens(call.body, deadline, call.native)
    except Exception as exc:  # an in-process tier's own method failing: counted by the estimate
        log.warning("tier %s: counting tokens failed (%s)", tier, type(exc).__name__)
        tokens = None
    return (decision, tokens, True) if tokens is not None else (decision, features.context_tokens, False)


def decided(runtime: Runtime, call: Call) -> Decision:
    """The decision `call` would get (routes, adaptive routing, context windows), without taking one of
    a sticky session's calls or a lane's place."""
    tools = call.body.get("tools")
    features = call.features.with_tools(len(orjson.dumps(tools)) if tools else 0)
    adaptive = runtime.adaptive
    live = Live(degraded=adaptive.degraded, diverted=adaptive.diverted, windows=runtime.windows.known())
    return decide(features, runtime.policy.current, live)


async def complete(runtime: Runtime, call: Call) -> tuple[Outcome, Reply]:
    """A whole answer, checked, and the call's outcome."""
    attempts = await begin(runtime, call)
    span = runtime.tracing.start(attempts)  # router/core/live/tracing.py; OFF: no-ops

    def answered(reply: Reply) -> Reply:
        span.answer(reply.data)
        return reply

    replies = [reply async for reply in _attempts(runtime, attempts, span, _reply, answered)]  # one: delivered
    return attempts.outcome(), replies[-1]


async def stream(runtime: Runtime, call: Call) -> tuple[Attempts, AsyncIterator[Chunk]]:
    """Chunks ready to send, as one stream. Failures before the first chunk raise here (a plain
    HTTP error is still possible); later ones raise from the iterator (the transport frames them).

    A first chunk that takes longer than `stream_keepalive` seconds (a cold prompt on a CPU server
    reads for minutes) does not keep the client waiting in silence — agents give up on a stream that
    sends nothing (Claude Code after 360 s): the stream starts with a keep-alive (`Chunk.beat`), one
    every `stream_keepalive` seconds until the answer comes, which each transport frames as its API
    does (an SSE comment, Anthropic's `ping`, Responses' `response.in_progress`). Nothing of an
    answer was sent meanwhile: an escalation is still invisible; a failure is an error event."""
    attempts = await begin(runtime, call)
    join, span = Joiner(), runtime.tracing.start(attempts)

    def ready(chunk: Chunk) -> Chunk:
        attempts.streamed = True  # the client has part of the answer
        return span.chunk(join(chunk))

    chunks = _attempts(runtime, attempts, span, _chunks, ready, join.next_attempt)
    every = runtime.settings.stream_keepalive
    first = asyncio.ensure_future(anext(chunks, None))
    try:
        await asyncio.wait({first}, timeout=every or None)
    except BaseException:
        first.cancel()
        raise
    if not first.done():
        return attempts, beating(first, chunks, every, partial(_empty, attempts))
    chunk, failure = settled(first)
    del first  # the task holds the failure: this frame, in the failure's traceback, must not hold it
    if failure is None and chunk is not None:
        return attempts, prepend(chunk, chunks)
    failure = failure or _empty(attempts)
    if isinstance(failure, RouterError):
        failure.outcome = attempts.outcome()  # nothing was sent: the transport names the call's routing with its error
    try:
        raise failure
    finally:
        del failure  # no cycle through this frame (tests/test_cycles.py)


def _empty(attempts: Attempts) -> UpstreamError:
    return UpstreamError(f"tier {attempts.tier!r} answered with an empty stream", tier=attempts.tier)


async def _attempts(
    runtime: Runtime,
    attempts: Attempts,
    span: Span,
    one: Attempt[T],
    out: Callable[[T], T],
    each: Callable[[], None] | None = None,
) -> AsyncIterator[T]:
    """The call's one attempt loop, for whole answers and streams alike: `one` attempt after another
    (`each` told before each), until one's step delivers (its items are yielded as they come, through
    `out`) or fails (its error is raised, carrying the call's outcome). Every attempt ends with a
    `Step` (router/flow/steps.py). The call's lane place and span end with it."""
    try:
        while True:
            step: Step | None = None
            first = True
            with span.attempt(attempts) as traced:
                asked = attempts.next_attempt()
                if isinstance(asked, Fail):  # no tier to ask
                    error = asked.error
                    del asked
                    try:
                        raise error  # the call's one error: no frame in its traceback holds it after (no cycle)
                    finally:
                        del error
                tier, body = asked
                if each is not None:
                    each()
                try:
                    async for item in await _hedged(attempts, tier, partial(one, attempts, body)):
                        if isinstance(item, STEPS):
                            step = item
                            continue
                        if first:
                            attempts.first_token()
                            first = False
                        yield out(item)
                except BaseException:  # the client left, a hedge lost: neither an answer nor a failure
                    attempts.ended("cancelled")
                    raise
                assert step is not None, "every attempt ends with a step"
                traced.ended(step.how, step.error if isinstance(step, Fail) else None)
            attempts.ended(step.how)
            if isinstance(step, Fail):
                error = step.error
                del step, item
                try:
                    raise error
                finally:
                    del error
            if isinstance(step, Deliver):
                return
            # the backoff, or at least one turn of the event loop: a tier's connection released by the
            # attempt just ended is taken back into its pool there — asked again at once, the same
            # server's pool hands out one whose last answer's end is still unread, and the request
            # cannot be written (aiohttp's ClientOSError; seen on llama.cpp's server, tests/e2e)
            await asyncio.sleep(attempts.backoff() if step.backoff else 0)
    except RouterError as exc:
        exc.outcome = attempts.outcome()  # the transport names the call's routing with its error
        raise
    finally:
        attempts.finished()
        runtime.lanes.leave(attempts.lane)
        span.end(attempts)


def _native(attempts: Attempts, upstream: Upstream, body: dict[str, Any]) -> tuple[NativeUpstream, Native] | None:
    """The client's own request, when `upstream` speaks its API and this attempt asks nothing more."""
    native = attempts.call.native
    if native is None or body is not attempts.call.body or not speaks(upstream, native.dialect):
        return None
    return upstream, native


async def _reply(attempts: Attempts, body: dict[str, Any], tier: str) -> AsyncIterator[Reply | Step]:
    """One whole answer from `tier`, judged: the answer delivered (`tier`'s, or the held one a failed
    sample was to better) and then the attempt's step."""
    upstream = attempts.parts.upstreams[tier]
    pass_through = _native(attempts, upstream, body)
    attempts.sent(tier, pass_through is not None)
    try:
        session = attempts.call.session
        if pass_through:
            reply = await pass_through[0].complete_native(pass_through[1], attempts.deadline, session=session)
        else:
            reply = await upstream.complete(body, attempts.deadline, session=session)
    except UpstreamError as exc:
        step = attempts.failed(tier, exc)
    except BaseException:  # neither an answer nor a failure of the tier's (the client left, a hedge lost)
        attempts.cancelled(tier)
        raise
    else:
        step, choice = _judged(attempts, tier, reply)
        if step == DELIVER:
            step = await attempts.verify(tier, body, choice)
        if step == DELIVER:
            await attempts.delivered(tier, choice.get("message") or {})
            yield reply
    if isinstance(step, Deliver) and (held := step.held) is not None:
        await attempts.delivered(held.tier, held.message)
        yield held.answer
    yield step


def _judged(attempts: Attempts, tier: str, reply: Reply) -> tuple[Step, dict[str, Any]]:
    """`tier`'s whole answer, read (speed, prompt, loops), salvaged and judged: its step and choice."""
    if reply.speed is not None:
        attempts.sped(tier, reply.speed)
    attempts.answered(tier, reply.usage)  # a whole answer: the tier's breaker starts counting again
    if reply.looped:
        attempts.looped_on(tier)
    salvage_reply(attempts, tier, reply)  # a call written as text, made structured (router/flow/salvage.py)
    choices = reply.data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    return attempts.judge(tier, message, choice.get("finish_reason"), reply), choice


async def _chunks(attempts: Attempts, body: dict[str, Any], tier: str) -> AsyncIterator[Chunk | Step]:
    """`tier`'s stream through a gate: content as it comes, the rest once judged, then the step.

    What the gate lets through of events that arrived in one read goes out in one write
    (`Chunk.more`), and the held part with the stream's end: a tier that sends its answer at once
    costs the client one write instead of one per event."""
    gate = Gate(tools_offered=bool(attempts.call.features.tool_names))
    upstream = attempts.parts.upstreams[tier]
    pass_through = _native(attempts, upstream, body)
    attempts.sent(tier, pass_through is not None)
    if pass_through:
        source = pass_through[0].stream_native(pass_through[1], attempts.deadline, session=attempts.call.session)
    else:
        source = upstream.stream(body, attempts.deadline, session=attempts.call.session)
    together: list[Chunk] = []  # ready to send, from events received in one read
    options = attempts.call.body.get("stream_options")
    counts_asked = isinstance(options, dict) and options.get("include_usage") is True
    step: Step | None = None
    usage: Usage | None = None  # the server's count of the call's tokens, on the events with usage
    speed: Speed | None = None  # the speed it is served at, on the events that say it
    try:
        try:
            async for chunk in source:
                if chunk.usage is not None:
                    usage = chunk.usage if usage is None else usage.then(chunk.usage)
                    if not counts_asked and chunk.native is None and not chunk.data.get("choices"):
                        continue  # the token counts the router asked for, not the client
                if chunk.speed is not None and chunk.speed is not speed:
                    speed = chunk.speed
                    attempts.sped(tier, speed)
                if chunk.looped:
                    attempts.looped_on(tier)
                    gate.answer.drop_repeated_calls()
                received_more = chunk.more  # read first: the gate clears it on what it lets through
                together += gate.feed(chunk)
                if not received_more:
                    for ready in _one_write(together):
                        yield ready
                    together = []
        except UpstreamError as exc:
            step = attempts.failed(tier, exc)
        for ready in _one_write(together):  # what was received before the end (or the failure)
            yield ready
    except BaseException:  # neither an answer nor a failure of the tier's (the client left, a hedge lost)
        attempts.cancelled(tier)
        raise
    if step is None:  # a whole answer: the tier's breaker starts counting again
        attempts.answered(tier, usage)
        salvage_stream(attempts, tier, gate)
        message = gate.message()
        step = attempts.judge(tier, message, gate.finish_reason, gate)
        if step == DELIVER:
            step = await attempts.verify(tier, body, {"message": message, "finish_reason": gate.finish_reason})
        if step == DELIVER:
            await attempts.delivered(tier, message)
    if isinstance(step, Deliver) and (held := step.held) is not None:  # a sign's sample failed
        await attempts.delivered(held.tier, held.message)
        gate = held.answer
    if isinstance(step, Deliver):
        # the answer passed: nothing but the stream's end follows, which the transport writes with these
        for ready in _one_write(gate.release(), last_more=True):
            yield ready
    yield step


def _one_write(chunks: list[Chunk], last_more: bool = False) -> list[Chunk]:
    """`chunks`, marked to be written together (`more` on all but the last, and on the last if `last_more`)."""
    for i, chunk in enumerate(chunks):
        chunk.more = last_more or i < len(chunks) - 1
    return chunks


async def _hedged(attempts: Attempts, tier: str, attempt: Callable[[str], AsyncIterator[T]]) -> AsyncIterator[T]:
    """`attempt(tier)`, raced against the route's hedge tier when it has one: an attempt whose first
    item is its step (a retry, a failure) loses."""
    hedge = attempts.hedge_for(tier)
    if hedge is None:
        return attempt(tier)
    hedge_tier, after = hedge

    def start_hedge() -> AsyncIterator[T]:
        attempts.hedging(hedge_tier)
        return attempt(hedge_tier)

    hedge_won, items = await first_valid(attempt(tier), start_hedge, after, lost=_lost)
    if hedge_won is not None:
        attempts.won(hedge_tier if hedge_won else tier)
    return items


def _lost(item: object) -> bool:
    return isinstance(item, Retry | Fail)
