"""Mistake kinds: one name for each way an answer, or an attempt at one, went wrong — owned here.

Every other place names a kind through this module: the checks (router/core/checks/validate.py), a tier's
errors (router/errors.py, `UpstreamError.mistake`), the flow (router/flow/attempts.py: repair,
verifier, skipped tiers, context), agents' reports (router/flow/feedback.py), the policy
(`escalation.on`, router/policy/model.py), the store's and metrics' labels (router/flow/record.py,
router/metrics.py) and the fake upstream's deliberate defects (router/fake/tools.py). They reach
clients in `x-router-mistakes`; a policy can name every one of them (tests/test_mistakes.py).

    kind                  what went wrong                                              found by
    invalid_json          a call's arguments are not JSON                              the checks
    unknown_tool          a call of a tool the request did not offer                   the checks
    schema_violation      a call's arguments fail its tool's JSON schema               the checks
    missing_tool_call     a call was required or announced, and none was made          the checks
    text_tool_call        a call written into the text instead of made                 the checks
    empty_response        no text and no call                                          the checks
    tool_sweep            the answer calls the offered tools one after another in the  the checks
                          order offered: a sweep, not a choice
    tool_spray            the answer calls one tool 8 times or more: values sprayed,   the checks
                          not chosen (seen: 18 create_event calls, one an hour)
    repeated_call         the answer's calls, every one, are the agent's last turn's,  the checks
                          word for word, its results just in: going round, not on
    upstream_error        the tier failed: refused, reset, 5xx, malformed              the tier's client
    timeout               the tier did not answer in time                              the tier's client
    verifier_reject       the route's verifier rejected the answer                     the verifier
    agent_reported_error  the agent's next call reports a failed result of a call      feedback
                          the router delivered (known only after delivery)
    tier_open             the tier was skipped: its breaker is open                    the breaker
    context_exceeded      the prompt does not fit the tier's context window            the context check

The last two are no defect of an answer: a call always moves on from them to the next tier
(`MOVES_ON`), whatever `escalation.on` says. The checks' kinds a repair can mend are `REPAIRABLE`.
A `tool_spray` or a `repeated_call` is a sign, not a defect: agents read many files at once, and poll
(a job's output, a terminal) by calling again. It sends a call on to a stronger tier, or from the
greedy last tier to one sampled attempt on the repeat tier, but no call is refused for it
(`SIGNS`): the chain's last tier's answer, a resampled run's or a sample's, or one with no
attempt left is delivered with it.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Final, Literal

MistakeKind = Literal[
    "invalid_json",
    "unknown_tool",
    "schema_violation",
    "missing_tool_call",
    "text_tool_call",
    "empty_response",
    "tool_sweep",
    "tool_spray",
    "repeated_call",
    "upstream_error",
    "timeout",
    "agent_reported_error",
    "verifier_reject",
    "tier_open",
    "context_exceeded",
]
MISTAKE_KINDS: Final[tuple[MistakeKind, ...]] = typing.get_args(MistakeKind)

INVALID_JSON: Final = "invalid_json"
UNKNOWN_TOOL: Final = "unknown_tool"
SCHEMA_VIOLATION: Final = "schema_violation"
MISSING_TOOL_CALL: Final = "missing_tool_call"
TEXT_TOOL_CALL: Final = "text_tool_call"
EMPTY_RESPONSE: Final = "empty_response"
TOOL_SWEEP: Final = "tool_sweep"
TOOL_SPRAY: Final = "tool_spray"
REPEATED_CALL: Final = "repeated_call"
UPSTREAM_ERROR: Final = "upstream_error"
TIMEOUT: Final = "timeout"
VERIFIER_REJECT: Final = "verifier_reject"
AGENT_REPORTED_ERROR: Final = "agent_reported_error"
TIER_OPEN: Final = "tier_open"
CONTEXT_EXCEEDED: Final = "context_exceeded"

# what the checks find in an answer (router/core/checks/validate.py)
ANSWER_KINDS: Final = (
    INVALID_JSON, UNKNOWN_TOOL, SCHEMA_VIOLATION, MISSING_TOOL_CALL, TEXT_TOOL_CALL, EMPTY_RESPONSE, TOOL_SWEEP,
    TOOL_SPRAY, REPEATED_CALL,
)  # fmt: skip
# a call the model fumbled, which the same tier may get right with the tool pinned (a route's `repair`);
# not a sweep: it means no one tool, so there is none to pin
REPAIRABLE: Final = frozenset({INVALID_JSON, SCHEMA_VIOLATION, TEXT_TOOL_CALL, MISSING_TOOL_CALL})
# signs, not defects: on to a stronger tier, or a sample of the greedy last tier; no call is refused for them
SIGNS: Final = frozenset({TOOL_SPRAY, REPEATED_CALL})
MOVES_ON: Final = frozenset({TIER_OPEN, CONTEXT_EXCEEDED})  # never the answer's: on to the next tier regardless
# `escalation.on` by default: every kind but agent_reported_error, known only after delivery (and
# those that move on anyway)
ESCALATE_BY_DEFAULT: Final[tuple[MistakeKind, ...]] = tuple(
    k for k in MISTAKE_KINDS if k != AGENT_REPORTED_ERROR and k not in MOVES_ON
)


@dataclass(frozen=True, slots=True)
class Mistake:
    """One defect found in an answer (router/core/checks/validate.py) or an attempt: its kind, the tool it
    concerns ("" for the answer as a whole) and what was seen."""

    kind: str
    tool: str = ""
    detail: str = ""
