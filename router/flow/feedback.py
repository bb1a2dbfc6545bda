"""Errors the agent reports afterwards, and the sticky sessions they cause.

A call's newest tool results (its newest turn, router/core/checks/turns.py) answer tool calls the router
delivered in the previous turn. When one reports failure — Anthropic-style `is_error`, a policy
failure pattern (a traceback, an `Error:` prefix, a non-zero exit code), or the model repeating an
earlier turn's call (the same tool and arguments, as JSON) — the router records
`agent_reported_error` against the tier and tool that made that call, and the session's next
`sticky_calls` calls go to the escalation tier.
Only the newest results are read, and a routed call is forgotten once its failure is counted, so a
failure is counted once although every later call of the conversation repeats it, and although a
client may send the same request again.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from router.core.call import Call
from router.core.checks.turns import Turn, call_key, newest_turn, tool_calls
from router.mistakes import AGENT_REPORTED_ERROR
from router.policy.decide import routed_by_policy
from router.policy.model import AfterAgentError, Policy
from router.store.base import MISTAKEN, Event, RoutedCall

if TYPE_CHECKING:
    from router.metrics import Metrics
    from router.store import Store

log = logging.getLogger("router.feedback")


class Feedback(NamedTuple):
    sticky: str | None  # the tier this call must go to, while its session is sticky
    reported: int  # routed calls this request reports failed (mistakes that reached the agent)


async def read(store: Store, metrics: Metrics, call: Call, policy: Policy) -> Feedback:
    """Record newly reported failures, then say whether this call must go to a stronger tier."""
    rules = policy.escalation.after_agent_error
    sticky = rules.sticky_calls if policy.escalation.chain else 0
    turn = newest_turn(call.body.get("messages"))
    failed = [fid async for fid in _failed_calls(store, call, rules, turn)] if turn.results else []
    if failed:
        s = call.session.id
        store.record(
            [
                event
                for c in failed
                for event in (
                    Event(c.tier, c.route, tool=c.tool, kind=AGENT_REPORTED_ERROR, session=s),
                    Event(c.tier, c.route, kind=MISTAKEN, session=s),
                    *([Event(c.tier, c.route, tool=c.tool, kind=MISTAKEN, session=s)] if c.tool else []),
                )
            ]
        )
        metrics.observe_agent_errors(failed)
        log.info("session %s: agent reported %d failed tool call(s)", call.session.id[:16], len(failed))
        if sticky:  # this call is the first of the sticky ones, when the policy routes it: no round trip
            to, routed = policy.escalation.chain[-1], routed_by_policy(call.features, policy)
            await store.sticky_set(call.session.id, to, sticky - 1 if routed else sticky)
            return Feedback(to if routed else None, len(failed))
    if not sticky or not routed_by_policy(call.features, policy):
        return Feedback(None, len(failed))
    tier = await store.sticky_take(call.session.id)
    return Feedback(tier if tier in policy.models else None, len(failed))


async def _failed_calls(
    store: Store,
    call: Call,
    rules: AfterAgentError,
    turn: Turn,
) -> AsyncIterator[RoutedCall]:
    """The routed calls the newest turn's tool results (and a repeated call) say failed."""
    messages = call.body.get("messages") or ()
    for result in turn.results:
        if str(result.get("tool_call_id")) in call.reported_errors or _reports_failure(result, rules):
            routed = await store.routed_take(call.session.id, str(result.get("tool_call_id")))
            if routed is not None:
                yield routed
    if rules.repeated_call:
        seen = {call_key(c): c for m in turn.earlier for c in tool_calls(m)}
        for c in turn.calls:
            prior = seen.get(call_key(c))
            if prior is None or prior.get("id") == c.get("id") or _reported(messages, prior.get("id"), rules):
                continue
            routed_prior = await store.routed_take(call.session.id, str(prior.get("id")))
            if routed_prior is not None:
                yield routed_prior


def _reported(messages: Any, call_id: Any, rules: AfterAgentError) -> bool:
    """Its own result already reported the call failed (counted when that result was newest)."""
    return any(
        isinstance(m, dict) and m.get("tool_call_id") == call_id and _reports_failure(m, rules) for m in messages
    )


def _reports_failure(result: dict[str, Any], rules: AfterAgentError) -> bool:
    content = result.get("content")
    parts = content if isinstance(content, list) else ()
    if result.get("is_error") is True or any(isinstance(p, dict) and p.get("is_error") is True for p in parts):
        return True
    return any(p.search(text) for text in _texts(content) for p in rules.patterns)


def _texts(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content[:4000]
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield part["text"][:4000]
