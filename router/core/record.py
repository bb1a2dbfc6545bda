"""What one call leaves behind: events in the store (stats, sticky sessions, adaptive routes) and
Prometheus counts. `attempts.Attempts` decides; a `Record` writes down what it decided.

    attempt(tier, tools, found)     one answer of `tier` (or its failure): the call, each offered
                                    tool it called or fumbled, each mistake, and `MISTAKEN` once
    escalated(tier)                 the call left `tier` for another
    salvaged(tier, tools)           `tier`'s calls written as text were made structured
    rejected(tier, tool)            a route's verifier rejected `tier`'s call of `tool`
    delivered(tier, message)        the tool calls the client got, to attribute errors it reports later
    prompt(tier, evaluated, reused) the server's count of a prompt: tokens evaluated and reused from its cache
    speed(tier, speed)              the speed `tier`'s answer was served at; a fast request's fallback
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from router.core.call import Call
from router.mistakes import VERIFIER_REJECT, Mistake
from router.store.base import (
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
    from router.metrics import Metrics
    from router.store import Store
    from router.upstream.base import Speed

Background = Callable[[Coroutine[Any, Any, Any]], None]  # runs a coroutine off the request path
_ARGUMENTS_KEPT = 2000  # characters of a routed call's arguments kept to recognise it when repeated


class Record:
    __slots__ = ("background", "call", "metrics", "route", "store")

    def __init__(self, store: Store, metrics: Metrics, background: Background, call: Call, route: str) -> None:
        self.store = store
        self.metrics = metrics
        self.background = background
        self.call = call
        self.route = route

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
        self.store.record(events)
        self.metrics.observe_answer(tier, r, answered, [m.kind for m in found])

    def escalated(self, tier: str) -> None:
        self.store.record([Event(tier, self.route, kind=ESCALATED, session=self.call.session.id)])

    def salvaged(self, tier: str, tools: Sequence[str]) -> None:
        """`tier` wrote these calls as text and they were made structured (router/flow/salvage.py)."""
        self.store.record([Event(tier, self.route, tool=t, kind=SALVAGED, session=self.call.session.id) for t in tools])

    def rejected(self, tier: str, tool: str) -> None:
        s, r = self.call.session.id, self.route
        events = [Event(tier, r, tool=tool, kind=VERIFIER_REJECT, session=s)]
        events += [Event(tier, r, tool=t, kind=MISTAKEN, session=s) for t in dict.fromkeys(("", tool))]
        self.store.record(events)
        self.metrics.observe_answer(tier, r, False, [VERIFIER_REJECT])

    def prompt(self, tier: str, evaluated: int, reused: int) -> None:
        s, r = self.call.session.id, self.route
        counts = ((PROMPT_EVALUATED, evaluated), (PROMPT_REUSED, reused))
        self.store.record([Event(tier, r, kind=kind, session=s, n=n) for kind, n in counts if n > 0])
        self.metrics.observe_prompt(tier, evaluated, reused)

    def speed(self, tier: str, speed: Speed) -> None:
        """`tier` answered at `speed` (its provider's word, bounded: router/upstream/speed.py); a
        fast-mode request answered at standard speed instead is counted by its reason too."""
        s, r = self.call.session.id, self.route
        events = [Event(tier, r, kind=SPEED_PREFIX + speed.served, session=s)]
        if speed.fallback:
            events.append(Event(tier, r, kind=FALLBACK_PREFIX + speed.fallback, session=s))
        self.store.record(events)
        self.metrics.observe_speed(tier, speed.served, speed.fallback)

    def delivered(self, tier: str, message: Mapping[str, Any]) -> None:
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
        if calls:
            self.background(self.store.routed_put(self.call.session.id, calls))
