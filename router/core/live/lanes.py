"""Fast-mode lanes: a call that asks for speed is served the way the policy's `lanes:` say.

    asked(call)                       the lane a call asks for: `x-router-lane`, else `speed`, else
                                      `service_tier` (values "auto", "default", "standard" ask for none)
    choose(policy, asked, inflight)   → Choice(lane, outcome)          pure, like policy.decide
    Lanes.enter(call, policy)         choose, count, and give the call and policy the lane's view:
                                      tiers swapped for their variants, `params` set, fields dropped
    Lanes.leave(choice)               the call is over (frees its place under `max_concurrent`)

Outcomes: `served` (on the lane asked for), `standard` (asked for none, or for one the policy does
not define: the call goes on untouched), `capped` (the lane was full: served on the standard lane
with the lane's fields dropped), `refused`/`busy` (an error: the lane refuses calls, or is full with
`over_limit: refuse`). An unknown name in the router's own header is a client error (400).
The lane is in the `x-router-lane` header; calls that asked for one are counted by lane and outcome
in the `router_lanes` metric and the stats' `lanes` key; tier variants show in stats like any tier.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from router.core.call import Call
from router.errors import BadRequest, LaneBusy, LaneRefused
from router.policy.model import Lane, Policy

LANE_HEADER = "x-router-lane"
STANDARD = "standard"
UNKNOWN = "unknown"  # what a value no lane claims is counted as
LANE_FIELDS = ("speed", "service_tier")
_ASK_NOTHING = frozenset({"auto", "default", STANDARD, "standard_only"})

Outcome = Literal["served", "standard", "capped", "refused", "busy"]


@dataclass(frozen=True, slots=True)
class Asked:
    header: str | None = None
    speed: str | None = None
    service_tier: str | None = None

    @property
    def anything(self) -> bool:
        return any((self.header, self.speed, self.service_tier))


@dataclass(frozen=True, slots=True)
class Choice:
    name: str  # the lane the call is served on ("standard" unless served)
    outcome: Outcome
    asked: str | None = None  # the lane it asked for ("unknown": a value no lane claims)


STANDARD_LANE = Choice(STANDARD, "standard")


def asked(call: Call) -> Asked:
    body = call.native.body if call.native is not None else call.lane_fields or call.body
    speed, tier = body.get("speed"), body.get("service_tier")
    return Asked(
        call.headers.get(LANE_HEADER) or None,
        speed if isinstance(speed, str) and speed not in _ASK_NOTHING else None,
        tier if isinstance(tier, str) and tier not in _ASK_NOTHING else None,
    )


def _wants(name: str, lane: Lane, a: Asked) -> bool:
    if a.header is not None:
        return a.header == name
    speeds = lane.speed if lane.speed is not None else [name]
    tiers = lane.service_tier if lane.service_tier is not None else [name]
    return (a.speed is not None and a.speed in speeds) or (a.service_tier is not None and a.service_tier in tiers)


def choose(policy: Policy, a: Asked, inflight: Mapping[str, int]) -> Choice:
    if not a.anything:
        return STANDARD_LANE
    if a.header == STANDARD:
        return Choice(STANDARD, "standard", STANDARD)
    name = next((n for n, lane in policy.lanes.items() if _wants(n, lane, a)), None)
    if name is None:
        if a.header is not None:
            known = ", ".join([STANDARD, *policy.lanes])
            raise BadRequest(f"Unknown lane {a.header[:100]!r} in {LANE_HEADER} (lanes: {known}).", param=LANE_HEADER)
        return Choice(STANDARD, "standard", UNKNOWN)  # not the value itself: clients choose those
    lane = policy.lanes[name]
    if lane.refuse:
        return Choice(STANDARD, "refused", name)
    if lane.max_concurrent is not None and inflight.get(name, 0) >= lane.max_concurrent:
        return Choice(STANDARD, "busy" if lane.over_limit == "refuse" else "capped", name)
    return Choice(name, "served", name)


def lane_policy(policy: Policy, lane: Lane) -> Policy:
    """`policy` with every reference to a tier the lane swaps replaced by its variant."""

    def swap(tier: Any) -> Any:
        if isinstance(tier, list):
            return [swap(t) for t in tier]
        return lane.tiers.get(tier, tier) if isinstance(tier, str) else tier

    def route(r: Any) -> Any:
        update: dict[str, Any] = {"use": swap(r.use)}
        for option, field in (("hedge", "tier"), ("adaptive", "to"), ("verify", "tier")):
            if (spec := getattr(r, option)) is not None:
                update[option] = spec.model_copy(update={field: swap(getattr(spec, field))})
        return r.model_copy(update=update)

    update: dict[str, Any] = {"to": swap(policy.escalation.to)}
    if (repeat := policy.escalation.repeat) is not None and repeat.tier is not None:
        update["repeat"] = repeat.model_copy(update={"tier": swap(repeat.tier)})
    escalation = policy.escalation.model_copy(update=update)
    aliases = {k: swap(v) for k, v in policy.aliases.items()}
    return policy.model_copy(update={"routes": [route(r) for r in policy.routes], "escalation": escalation,
                                     "aliases": aliases})  # fmt: skip


def lane_call(call: Call, lane: Lane | None) -> Call:
    """The call as it goes upstream on `lane` (None: the standard lane after a capped request)."""
    forward = lane is not None and lane.forward
    params = lane.params if lane is not None else {}

    def body_of(body: dict[str, Any]) -> dict[str, Any]:
        kept = body if forward else {k: v for k, v in body.items() if k not in LANE_FIELDS}
        return {**kept, **params} if params else kept

    native = call.native
    if native is not None:
        native = dataclasses.replace(native, body=body_of(native.body))
    return dataclasses.replace(call, body=body_of(call.body), native=native)


class Lanes:
    """Calls in flight per lane, and each policy's lane views (rebuilt when the policy changes).
    `count` is told every choice of a call that asked for a lane, refusals included."""

    def __init__(self, count: Callable[[Choice], None]) -> None:
        self.count = count
        self.inflight: dict[str, int] = {}
        self._views: dict[str, Policy] = {}
        self._for: Policy | None = None

    def enter(self, call: Call, policy: Policy) -> tuple[Choice, Call, Policy]:
        a = asked(call)
        if not a.anything:
            return STANDARD_LANE, call, policy
        choice = choose(policy, a, self.inflight)
        self.count(choice)
        if choice.outcome == "refused":
            raise LaneRefused(f"The lane {choice.asked!r} is not available through this router.")
        if choice.outcome == "busy":
            raise LaneBusy(f"The lane {choice.asked!r} is at its limit of calls in flight; retry shortly.")
        if choice.outcome == "standard":
            return choice, call, policy
        if choice.outcome == "capped":
            return choice, lane_call(call, None), policy
        self.inflight[choice.name] = self.inflight.get(choice.name, 0) + 1
        lane = policy.lanes[choice.name]
        return choice, lane_call(call, lane), self._view(policy, choice.name, lane)

    def leave(self, choice: Choice) -> None:
        if choice.outcome == "served":
            self.inflight[choice.name] -= 1

    def _view(self, policy: Policy, name: str, lane: Lane) -> Policy:
        if not lane.tiers:
            return policy
        if self._for is not policy:
            self._views, self._for = {}, policy
        view = self._views.get(name)
        if view is None:
            view = self._views[name] = lane_policy(policy, lane)
        return view
