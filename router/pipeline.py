"""The one flow every transport shares: decide → call → validate → escalate → record.

    trace = begin(call)                   agent feedback, sticky sessions, policy.decide (pure)
    for each attempt (tenacity):          escalation.Trace picks the tier and judges the answer
        answer = upstream[tier](call)     pooled, warm connections
        trace.judge(answer)               validate.check → record → Escalate if warranted
    trace.delivered(answer)               remember routed tool calls for agent-reported errors

Streams run the same loop through a `Gate` that holds tool-call deltas until they are checked, so
a mistake found before anything was sent escalates invisibly.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from router import feedback
from router.call import Call
from router.errors import UpstreamError
from router.escalation import Trace
from router.policy.decide import Live, decide
from router.streaming import Emitter, Gate
from router.upstream.base import Reply

if TYPE_CHECKING:
    from router.app import Router


async def begin(router: Router, call: Call) -> Trace:
    policy = router.policy.current
    sticky = await feedback.sticky_tier(router, call, policy)
    decision = decide(call.features, policy, Live(sticky_tier=sticky))
    return Trace(router, call, policy, decision)


async def complete(router: Router, call: Call) -> tuple[Trace, Reply]:
    trace = await begin(router, call)
    async for attempt in trace.attempts():
        with attempt:
            tier = trace.next_tier()
            try:
                reply = await router.upstreams[tier].complete(call.body, trace.deadline)
            except UpstreamError as exc:
                trace.failed(tier, exc)
            choice = _first_choice(reply.data)
            trace.judge(tier, choice.get("message") or {}, choice.get("finish_reason"))
    trace.delivered(_first_choice(reply.data).get("message") or {})
    return trace, reply


async def stream(router: Router, call: Call) -> tuple[Trace, AsyncIterator[bytes]]:
    """Start streaming. Failures before the first byte raise here, as a plain HTTP error."""
    trace = await begin(router, call)
    frames = _frames(router, call, trace)
    first = await anext(frames)
    return trace, _prepend(first, frames)


async def _frames(router: Router, call: Call, trace: Trace) -> AsyncIterator[bytes]:
    out = Emitter()
    try:
        async for attempt in trace.attempts():
            with attempt:
                tier = trace.next_tier()
                gate = Gate(hold=trace.checked(tier), tools_offered=bool(call.features.tool_names))
                out.next_attempt()
                try:
                    async for chunk in router.upstreams[tier].stream(call.body, trace.deadline):
                        for ready in gate.feed(chunk):
                            yield out.frame(ready)
                except UpstreamError as exc:
                    trace.failed(tier, exc)
                trace.judge(tier, gate.message(), gate.finish_reason)
                for ready in gate.release():
                    yield out.frame(ready)
    except UpstreamError as exc:
        if not out.sent:
            raise
        yield out.error(exc)  # the stream already started: an SSE error frame, then the trailer
        yield out.trailer(trace.summary())
        return
    trace.delivered(gate.message())
    yield out.trailer(trace.summary())
    yield out.DONE


async def _prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield first
    async for frame in rest:
        yield frame


def _first_choice(data: dict[str, Any]) -> dict[str, Any]:
    choices = data.get("choices")
    return choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
