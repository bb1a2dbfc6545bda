"""Which tier a call's next attempt goes to, and with what: pure functions of the policy and the
call's history (router/flow/attempts.py keeps the history and asks these; tests/flow/test_next_tier.py
runs them without a runtime).

    stronger(policy, tier, sampled)           the chain's next tier after `tier` (itself on the last,
                                              or when the call runs sampled and stays where it is)
    same_answer_again(policy, tier, t)        greedy `tier` on the chain's last would answer the same
    repairable(policy, route, tier, ...)      the one offered tool to pin in a repair, if any
    fitting(policy, tier, need, windows, ...) the first tier past `tier` whose window takes the prompt
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from router.mistakes import REPAIRABLE, Mistake
from router.policy.decide import fits
from router.policy.model import Policy
from router.policy.route import Route


def stronger(policy: Policy, tier: str, sampled: bool = False) -> str:
    """The tier after `tier` in the escalation chain: itself on the chain's last tier or when the
    call runs sampled (it stays on the repeat tier); a tier off the chain goes to the chain's first."""
    chain = policy.escalation.chain
    if sampled:
        return tier
    if tier in chain:
        i = chain.index(tier)
        return chain[i + 1] if i + 1 < len(chain) else tier
    return chain[0] if chain else tier


def same_answer_again(policy: Policy, tier: str, temperature: Any, sampled: bool = False) -> bool:
    """Asked again (the chain's last tier, no repair), greedy `tier` would give the same answer: its
    params pin temperature 0, or they pin none and the request's `temperature` is 0."""
    if stronger(policy, tier, sampled) != tier:
        return False
    model = policy.models.get(tier)
    pinned = model.pinned_temperature if model is not None else None
    return (pinned if pinned is not None else temperature) == 0


def repairable(
    policy: Policy,
    route: Route | None,
    tier: str,
    repaired_on: Collection[str],
    found: Sequence[Mistake],
    offered: Collection[str],
    sampled: bool = False,
) -> str | None:
    """The one offered tool `tier`'s answer fumbled, if that tier may be repaired: once per tier, on a
    route that asks for it, or on the chain's last tier (where the next try is the same tier)."""
    if tier in repaired_on or not ((route and route.repair) or stronger(policy, tier, sampled) == tier):
        return None
    tools = {m.tool for m in found if m.kind in REPAIRABLE and m.tool}
    if len(tools) != 1 or any(m.kind not in REPAIRABLE for m in found):
        return None
    tool = tools.pop()
    return tool if tool in offered else None


def fitting(
    policy: Policy, tier: str, need: int, windows: Mapping[str, int | None], too_small: Collection[str]
) -> str | None:
    """The first tier past `tier` (`escalation.beyond`) not yet too small whose known window takes
    `need` tokens (or whose window is unknown)."""
    return next((t for t in policy.escalation.beyond(tier) if t not in too_small and fits(need, windows.get(t))), None)
