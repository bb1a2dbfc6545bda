"""What one call leaves behind in the running proxy: events in the store (stats, sticky sessions,
adaptive routes), Prometheus counts, and what it tells the tiers' breakers, warm-ups, shadow mode and
the memory of exhausted requests. `Attempts` (router/flow/attempts.py) decides; its `Record` writes
down and tells what it decided — every side effect of a call's flow is a method here.

    sent(tier)                      an attempt starts: a warm-up there gives way
    attempt(tier, tools, found)     one answer of `tier` (or its failure): the call, each offered
                                    tool it called or fumbled, each mistake, and `MISTAKEN` once
    answered(tier, prompt, speed)   `tier` sent a whole answer: its breaker starts counting again
    failed(tier, breaker, reason)   `tier` failed of its own making: its breaker counts it
    released(tier)                  an attempt ended neither way, not by the tier's fault (the request's)
    cancelled(tier)                 an attempt cut off unanswered (a client gone, a stop, a hedge lost)
    escalated(tier)                 the call left `tier` for another
    salvaged(tier, tools)           `tier`'s calls written as text were made structured
    looped(tier)                    `tier`'s answer went round in a loop and was stopped
    verdict(...)                    the route's verifier's verdict; `rejected(tier, tool)` when no
    delivered(tier, message, ...)   the tool calls the client got (to attribute errors it reports
                                    later; awaited: in the store before the answer ends); the
                                    answer offered to warm-ups and shadow mode
    sampled, repeat, exhausted, remembered, refused, window, context: the flow's own counts
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from router.core.call import Call
from router.mistakes import VERIFIER_REJECT, Mistake
from router.store.base import (
    CANCELLED,
    ESCALATED,
    FALLBACK_PREFIX,
    MISTAKEN,
    PROMPT_EVALUATED,
    PROMPT_REUSED,
    SALVAGED,
    SPEED_PREFIX,
    Event,
    RoutedCall,
)

if TYPE_CHECKING:
    from router.core.live.repeats import Seen
    from router.policy.model import Breaker, Policy
    from router.runtime import Parts
    from router.upstream.base import Native, Speed, Usage

log = logging.getLogger("router.flow")
_ARGUMENTS_KEPT = 2000  # characters of a routed call's arguments kept to recognise it when repeated


class Record:
    __slots__ = ("call", "parts", "route")

    def __init__(self, parts: Parts, call: Call, route: str) -> None:
        self.parts = parts
        self.call = call
        self.route = route

    # -- a tier's attempt ---------------------------------------------------------------------
    def sent(self, tier: str, native: bool) -> None:
        self.parts.warming.live_started(tier)
        asked = self.call.native
        if not native and asked is not None and asked.left_out:
            self.left_out(tier, asked)

    def left_out(self, tier: str, asked: Native) -> None:
        """`tier`, of another API, does not get all of the client's request: counted by field in
        `router_left_out_total`, and the first time a field is left out, said in the log with the
        betas the client sent (which are what most such fields come with)."""
        first = self.parts.metrics.observe_left_out(asked.dialect, {f"field:{n}": 1 for n in asked.left_out})
        if first:
            betas = asked.headers.get("anthropic-beta", "")[:400]
            beta = f" (anthropic-beta: {betas})" if betas else ""
            names = ", ".join(k.split(":", 1)[1] for k in first)
            log.info("tier %r takes no %s request as it is: left out %s%s", tier, asked.dialect, names, beta)

    def attempt(self, tier: str, tools: Sequence[str], found: Sequence[Mistake], answered: bool = True) -> None:
        """Count one attempt of `tier`: a call (failed ones too), each offered tool it called or
        fumbled, each mistake by kind, and once per call and tool with any mistake (`MISTAKEN`: the
        stats' mistake rate is the share of calls with at least one)."""
        s, r = self.call.session.id, self.route
        offered = self.call.features.tool_names  # never record names a model made up: unbounded keys
        called = {t for t in tools if t in offered}
        fumbled = {m.tool for m in found if m.tool in offered}
        events = [Event(tier, r, session=s)]
        events += [Event(tier, r, tool=t, session=s) for t in sorted(called | fumbled)]
        events += [Event(tier, r, tool=m.tool if m.tool in offered else "", kind=m.kind, session=s) for m in found]
        if found:
            events += [Event(tier, r, kind=MISTAKEN, session=s)]
            events += [Event(tier, r, tool=t, kind=MISTAKEN, session=s) for t in sorted(fumbled)]
        self.parts.store.record(events)
        self.parts.metrics.observe_answer(tier, r, answered, [m.kind for m in found])

    def answered(self, tier: str, prompt: Usage | None, speed: Speed | None) -> None:
        """`tier` sent a whole answer (right or wrong): its breaker's count of failures starts over;
        the server's count of the prompt it read (evaluated, reused) and its speed are recorded."""
        self.parts.breakers.succeeded(tier)
        self.parts.warming.live_ended(tier)
        if speed is not None:
            self._speed(tier, speed)
        if prompt is not None:
            self._prompt(tier, prompt.evaluated, prompt.reused)

    def failed(self, tier: str, breaker: Breaker, reason: str) -> None:
        self.parts.breakers.failed(tier, breaker, reason)
        self.parts.warming.live_ended(tier)

    def released(self, tier: str) -> None:
        self.parts.breakers.released(tier)
        self.parts.warming.live_ended(tier)

    def cancelled(self, tier: str) -> None:
        """A call cut off unanswered: released, and counted apart from calls (`cancelled` in stats)."""
        self.released(tier)
        self.parts.store.record([Event(tier, self.route, kind=CANCELLED, session=self.call.session.id)])

    def escalated(self, tier: str) -> None:
        self.parts.store.record([Event(tier, self.route, kind=ESCALATED, session=self.call.session.id)])

    def salvaged(self, tier: str, tools: Sequence[str]) -> None:
        """`tier` wrote these calls as text and they were made structured (router/flow/salvage.py)."""
        s = self.call.session.id
        self.parts.store.record([Event(tier, self.route, tool=t, kind=SALVAGED, session=s) for t in tools])

    def looped(self, tier: str) -> None:
        self.parts.metrics.loops_cut.labels(tier, self.route).inc()

    def verdict(self, verifier: str, outcome: str, cached: bool, seconds: float) -> None:
        self.parts.metrics.observe_verdict(verifier, self.route, outcome, cached, seconds)

    def rejected(self, tier: str, tool: str) -> None:
        s, r = self.call.session.id, self.route
        events = [Event(tier, r, tool=tool, kind=VERIFIER_REJECT, session=s)]
        events += [Event(tier, r, tool=t, kind=MISTAKEN, session=s) for t in dict.fromkeys(("", tool))]
        self.parts.store.record(events)
        self.parts.metrics.observe_answer(tier, r, False, [VERIFIER_REJECT])

    def _prompt(self, tier: str, evaluated: int, reused: int) -> None:
        s, r = self.call.session.id, self.route
        counts = ((PROMPT_EVALUATED, evaluated), (PROMPT_REUSED, reused))
        self.parts.store.record([Event(tier, r, kind=kind, session=s, n=n) for kind, n in counts if n > 0])
        self.parts.metrics.observe_prompt(tier, evaluated, reused)

    def _speed(self, tier: str, speed: Speed) -> None:
        """`tier` answered at `speed` (its provider's word, bounded: router/upstream/speed.py); a
        fast-mode request answered at standard speed instead is counted by its reason too."""
        s, r = self.call.session.id, self.route
        events = [Event(tier, r, kind=SPEED_PREFIX + speed.served, session=s)]
        if speed.fallback:
            events.append(Event(tier, r, kind=FALLBACK_PREFIX + speed.fallback, session=s))
        self.parts.store.record(events)
        self.parts.metrics.observe_speed(tier, speed.served, speed.fallback)

    # -- the call's end ---------------------------------------------------------------------------
    async def delivered(self, policy: Policy, tier: str, message: Mapping[str, Any], seen: Seen) -> None:
        """Remember the tool calls the client got, to attribute errors it reports later — awaited
        before the answer's end is sent, so that an error reported at once finds them on any replica
        (a Redis store waits `store_write_wait` at most: router/store/routed.py); let the session's
        other tiers read the answer ahead; forget the request if it was remembered as exhausted;
        offer the answer to the route's shadow mode."""
        calls = [
            RoutedCall(
                str(c.get("id", "")),
                tier,
                self.route,
                str((c.get("function") or {}).get("name", "")),
                str((c.get("function") or {}).get("arguments", ""))[:_ARGUMENTS_KEPT],
            )
            for c in message.get("tool_calls") or ()
            if c.get("id")
        ]
        # the session's next turn starts with this answer: the other tiers read it in the background
        self.parts.warming.offer(policy, self.call.session, self.call.body, tier, message)
        if seen.key is not None:  # its shape was remembered: if the request was, it is forgotten
            self.parts.repeats.answered(seen)
        self.parts.shadow.offer(policy, self.route, self.call.body, tier, message)  # maybe, in the background
        if calls:
            await self.parts.store.routed_put(self.call.session.id, calls)

    # -- the flow's own counts ----------------------------------------------------------------------
    def sampled(self, why: str, how: str) -> None:
        """A call went on sampled (`how`: sampled), and what was delivered (answered, fell_back)."""
        self.parts.metrics.samples.labels(self.route, why, how).inc()

    def repeat(self, how: str) -> None:
        self.parts.metrics.repeats.labels(self.route, how).inc()

    def exhausted(self, tier: str) -> None:
        """No attempt left, and the answer refused (`ChecksFailed`)."""
        self.parts.metrics.exhausted.labels(tier, self.route).inc()

    def remembered(self, seen: Seen) -> int:
        """The request failed every attempt: remembered for its repeats; how many runs of it have."""
        return self.parts.repeats.exhausted(seen)

    def refused(self, reason: str) -> None:
        self.parts.metrics.refused.labels(reason).inc()

    def window(self, tier: str, window: int | None) -> None:
        """`tier`'s context did not take the prompt: its window (`window`, if it said) is learned."""
        self.parts.windows.learned(tier, window)

    def context(self, tier: str, how: str) -> None:
        """The prompt did not fit `tier`: the call went on to a larger tier (`how`), or was refused."""
        self.parts.metrics.context_exceeded.labels(tier, how).inc()
