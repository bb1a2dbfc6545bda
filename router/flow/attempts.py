"""One call's journey across tiers: the state of its attempts and the step each one ends with.

The pipeline's one loop (router/flow/pipeline.py) asks `next_attempt()` for a tier and a body, runs
the attempt, and does what its `Step` says (router/flow/steps.py): the checks (`judge`), the route's
verifier (`verify`) and a tier's failure (`failed`) return one. Which tier comes next is a pure
function of the policy and this history (router/flow/next_tier.py); every side effect goes to the
call's `Record` (router/flow/record.py); what the call did is read as its frozen `Outcome`
(router/flow/outcome.py), never from here.

Every tier's answer is checked, the chain's last one's too. While an attempt is allowed (count and
deadline) the next goes to a stronger tier or, on the chain's last tier, to the same tier: a repair
(`tool_choice` pinned to the tool meant) or a fresh sample; where the greedy last tier would answer
the same, a sample on the repeat tier (router/flow/steps.py says how signs, samples, held answers
and repeats run). With no attempt left, an answer with mistakes the policy escalates on never
reaches the client: `Fail(ChecksFailed)` (a retryable 502; `escalation.on_exhausted: deliver` hands
it over instead), saying what the client has: nothing, or (a stream) the text already sent.

A tier whose breaker is open (router/core/live/breaker.py) is skipped, `tier_open` among the mistakes;
with none left the call ends with `TierOpen` (a retryable 503 with Retry-After). Upstream errors of a
tier's making open its breaker; answers, however wrong, close the count. A tier whose context the
prompt does not fit (`ContextExceeded`) is not at fault: the call goes on, while an attempt is left,
to the first tier of the chain with a larger (or unknown) window, else ends with the client's own
context error (router/core/live/context.py learns the window).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from router.core.call import Call
from router.core.checks.offered import ToolSet
from router.core.checks.verify import Proposal, verify
from router.core.live import repeats
from router.core.live.lanes import STANDARD_LANE, Choice
from router.core.live.ledger import Worth
from router.core.live.repeats import Resampling, Seen, resampled
from router.errors import ChecksFailed, ChecksFailedRepeatedly, ContextExceeded, TierOpen, UpstreamError, UpstreamStatus
from router.flow import next_tier
from router.flow.outcome import Account, Tried
from router.flow.record import Record
from router.flow.steps import DELIVER, Deliver, Fail, Held, Repeat, Retry, Sample, Step, Why
from router.mistakes import CONTEXT_EXCEEDED, SIGNS, TIER_OPEN, VERIFIER_REJECT, Mistake
from router.policy.decide import Decision
from router.policy.model import Breaker, Policy

if TYPE_CHECKING:
    from router.runtime import Parts


log = logging.getLogger("router.escalation")
_BACKOFF_FIRST, _BACKOFF_MAX, _BACKOFF_JITTER = 0.1, 2.0, 0.2  # seconds: doubling from the first, plus jitter


class Attempts(Account):
    """One routed call's attempts: its `Account` (router/flow/outcome.py) and what decides the next."""

    def __init__(
        self,
        parts: Parts,
        call: Call,
        policy: Policy,
        decision: Decision,
        lane: Choice = STANDARD_LANE,
        context_tokens: int = 0,
        seen: Seen | None = None,
    ) -> None:
        record = Record(parts, call, decision.route)
        super().__init__(record, decision.reason, lane, decision.tier, call.session.id)
        self.parts = parts
        self.call = call
        self.policy = policy
        self.decision = decision
        self.context_tokens = context_tokens  # the estimated prompt (messages and tool definitions) a context holds
        self.seen = seen if seen is not None else Seen(call)  # the request's earlier runs (router/core/live/repeats.py)
        self.resampling = Resampling.of(policy, decision.tier)  # None: repeats run as they come
        self.sample = Sample.OFF  # where the call stands with sampling; `why` it went on sampled
        self.why: Why | None = None
        self.held: Held | None = None  # the greedy answer whose sign is sampled, delivered should the sample fail
        self._repair_tool: str | None = None
        self._repaired_on: set[str] = set()  # tiers that had their one repair
        self._fitting: str | None = None  # the next attempt's tier, after one whose context was too small
        self._too_small: set[str] = set()  # tiers whose context did not take the prompt
        self.route_spec = next((r for r in policy.routes if r.name == decision.route), None)  # None: no route matched
        self.admitted: tuple[Any, ToolSet] | None = None  # the offered tools and the validator's reading of them
        self.deadline = self.started + policy.escalation.deadline
        if (resampling := self.resampling) is not None and self.seen.runs:
            if self.seen.runs > resampling.runs:
                self.repeat = Repeat.REFUSED
            else:
                self.repeat = Repeat.RESAMPLED
                self.call = resampled(call, resampling.temperature)
                self.tier = resampling.tier
            self.record.repeat(self.repeat)

    def worth(self, tried: tuple[Tried, ...]) -> Worth:
        """The call's cost and its baseline, at the policy's prices (router/core/live/ledger.py)."""
        ledger = self.parts.ledger
        standard = frozenset(t for t, speed in self.speeds.items() if speed.fallback)  # fast refused: standard
        return ledger.worth(ledger.prices(self.policy), self.session, tried, self.tier, standard)

    def refused(self) -> ChecksFailedRepeatedly:
        """The error of a repeat that is not run (`repeat` is `REFUSED`)."""
        return repeats.refused(self.seen.runs, self.resampling, self.tier)

    # -- the next attempt -------------------------------------------------------------------------
    def next_attempt(self) -> tuple[str, dict[str, Any]] | Fail:
        """The tier and body of the next attempt: routed tier, repair on the same tier, or stronger
        (or, after the greedy last tier's sign or mistake, the repeat tier, sampled); `Fail(TierOpen)`
        when every tier it could go to is skipped for a while."""
        last = self.tried[-1] if self.tried else None
        body = self.call.body
        if self.sample is Sample.NEXT and self.resampling is not None:  # the greedy last tier's answer, sampled
            self.call = resampled(self.seen.call, self.resampling.temperature)
            self.tier, self._repair_tool, self._fitting = self.resampling.tier, None, None
            self.sample, self.sampled = Sample.ON, str(self.why)
            self.record.sampled(self.sampled, "sampled")
            body = self.call.body
        elif self._repair_tool is not None:
            body = {**body, "tool_choice": {"type": "function", "function": {"name": self._repair_tool}}}
            self._repair_tool = None
        elif self._fitting is not None:
            self.tier, self._fitting = self._fitting, None
        elif last is not None and self.repeat is not Repeat.RESAMPLED and self.sample is not Sample.ON:
            self.tier = self._stronger(last)
        mistakes_from = len(self.mistakes)  # a tier skipped as open is this attempt's mistake
        tier = self._past_open(self.tier)
        if isinstance(tier, Fail):
            return tier
        self.tier = tier
        if last is not None and tier != last:
            self.record.escalated(last)
        self.tried.append(tier)
        self.timeline.started(tier, mistakes_from, self.now())
        spec = self.route_spec.verify if self.route_spec else None
        if spec is not None and spec.kind == "logprobs" and self.verifiable(tier) and not self.call.stream:
            body = {**body, "logprobs": True}
        return tier, body

    def first_token(self) -> None:
        """The running attempt's first chunk (or whole answer) is out."""
        self.timeline.first_token(self.now())

    def ended(self, how: str) -> None:
        """The running attempt is over (`Step.how`, or "cancelled")."""
        self.timeline.ended(self.tier, how, self.now())

    def backoff(self) -> float:
        """The wait before the same tier is asked again after its upstream error: doubling from 0.1 s
        with each attempt, at most 2 s, plus up to 0.2 s of jitter; never past the call's deadline."""
        wait = min(_BACKOFF_MAX, _BACKOFF_FIRST * 2 ** (len(self.timeline) - 1)) + random.uniform(0, _BACKOFF_JITTER)
        return float(max(0.0, min(wait, self.deadline - asyncio.get_running_loop().time())))

    def verifiable(self, tier: str) -> bool:
        """A route's verifier judges this tier's calls: a stronger tier is there to answer instead
        (not a sample's: a sampled call stays on its tier)."""
        return self._stronger(tier) != tier

    def _stronger(self, tier: str) -> str:
        return next_tier.stronger(self.policy, tier, sampled=self.sample is Sample.ON)

    def _breaker(self, tier: str) -> Breaker:
        model = self.policy.models.get(tier)
        return model.breaker if model is not None else Breaker()

    def _past_open(self, tier: str) -> str | Fail:
        """`tier`, or the first stronger tier its breaker lets the call go to; `Fail(TierOpen)` if none."""
        breakers = self.parts.breakers
        skipped: list[str] = []
        while not breakers.allow(tier, self._breaker(tier)):
            skipped.append(tier)
            stronger = self._stronger(tier)
            if stronger in skipped or stronger == tier:
                self.record.refused(TIER_OPEN)
                wait = breakers.retry_after(skipped)
                return Fail(TierOpen(
                    f"No tier can take this call now: {', '.join(skipped)} failed repeatedly and "
                    f"{'is' if len(skipped) == 1 else 'are'} skipped for a while. Retry in {wait} s.",
                    retry_after=wait,
                ))  # fmt: skip
            tier = stronger
        self.skipped += skipped
        self.mistakes += [TIER_OPEN] * len(skipped)
        return tier

    def _may_retry(self) -> bool:
        return (
            len(self.tried) < self.policy.escalation.max_attempts and asyncio.get_running_loop().time() < self.deadline
        )

    # -- steps ------------------------------------------------------------------------------------
    def judge(self, tier: str, message: Mapping[str, Any], finish_reason: str | None, answer: Any) -> Step:
        """Check `tier`'s answer (`answer`: what would be delivered, held if its sign is sampled) and
        record it; the step it warrants."""
        self.signs = []
        read = self.admitted[1] if self.admitted and self.admitted[0] is self.call.body.get("tools") else None
        found = self.parts.validator.check(message, self.call.body, finish_reason=finish_reason, tool_set=read)
        tools = [str((c.get("function") or {}).get("name", "")) for c in message.get("tool_calls") or ()]
        kinds = tuple(m.kind for m in found)
        self.mistakes.extend(kinds)
        self.record.attempt(tier, tools, found)
        signs = [k for k in kinds if k in SIGNS]
        escalating = set(kinds) & set(self.policy.escalation.on)
        if not escalating:
            self.signs = signs
            return DELIVER
        if self.held is not None:  # the sign's sample: delivered, a sign and all; else the held answer
            if escalating <= SIGNS:
                self.signs = signs
                return DELIVER
            return self._fall_back()
        if escalating <= SIGNS and not (self._may_retry() and self._moves_up(tier)):
            if self._samples(tier):  # held meanwhile, and delivered should the sample fail
                self.held = Held(tier, tuple(signs), message, answer)
                self.sample, self.why = Sample.NEXT, Why.SIGN
                return Retry(kinds)
            self.signs = signs
            return DELIVER  # a sign for a stronger tier or a sample, where there is one; never a refusal
        if self._may_retry():
            offered = self.call.features.tool_names
            sampled = self.sample is Sample.ON
            tool = next_tier.repairable(self.policy, self.route_spec, tier, self._repaired_on, found, offered, sampled)
            if tool is not None:
                self._repair_tool, self.repaired = tool, True
                self._repaired_on.add(tier)
                return Retry(kinds)
            if not self._same_answer_again(tier):
                return Retry(kinds)
            if self._samples(tier):  # asked again greedily it would fail the same way: sampled instead
                self.sample, self.why = Sample.NEXT, Why.MISTAKE
                return Retry(kinds)
        self.exhausted = True
        if self.policy.escalation.on_exhausted == "deliver":
            self.signs = signs
            return DELIVER
        self.record.exhausted(tier)
        return Fail(self._checks_failed(tier))

    def _fall_back(self) -> Deliver:
        """The sample failed: the held answer is delivered, its tier and signs the call's again."""
        held = self.held
        assert held is not None
        self.tier, self.signs = held.tier, list(held.signs)
        return Deliver(held)

    def _checks_failed(self, tier: str) -> ChecksFailed:
        """No attempt left: the request is remembered for its repeats (router/core/live/repeats.py)."""
        runs = self.record.remembered(self.seen) if self.resampling is not None else 0
        log.warning(
            "route %s: no attempt left after %s (tiers %s, run %d of this request); answering with an error",
            self.route, ",".join(self.mistakes), ",".join(self.tried), max(runs, 1),
        )  # fmt: skip
        return repeats.checks_failed(self.mistakes, self.streamed, self.resampling, runs, tier)

    async def verify(self, tier: str, body: Mapping[str, Any], choice: Mapping[str, Any]) -> Step:
        """The route's verifier on a well-formed call of a checked tier: `Retry` on a rejection while
        an attempt is left."""
        spec = self.route_spec.verify if self.route_spec else None
        message = choice.get("message") or {}
        if spec is None or not self.verifiable(tier) or not message.get("tool_calls"):
            return DELIVER
        loop = asyncio.get_running_loop()
        started = loop.time()
        proposal = Proposal(tier, body, choice, self.deadline, self.call.session)
        verdict = await verify(self.parts.upstreams, self.parts.verdicts, spec, proposal, self.policy.escalation.chain)
        outcome = "unsure" if verdict.unsure else "accept" if verdict.accept else "reject"
        self.record.verdict(spec.kind, outcome, verdict.cached, loop.time() - started)
        self.verdicts.append(f"{spec.kind}:{outcome}")
        if verdict.accept:
            return DELIVER
        tool = str((message["tool_calls"][0].get("function") or {}).get("name", ""))
        tool = tool if tool in self.call.features.tool_names else ""
        self.mistakes.append(VERIFIER_REJECT)
        self.signs = []
        self.record.rejected(tier, tool)
        log.debug("route %s: the %s verifier rejected a call of tier %s", self.route, spec.kind, tier)
        return Retry((VERIFIER_REJECT,)) if self._may_retry() else DELIVER

    def _moves_up(self, tier: str) -> bool:
        """The next attempt after `tier`'s would go to a stronger tier that takes calls now."""
        stronger = self._stronger(tier)
        sampled = self.repeat is Repeat.RESAMPLED or self.sample is Sample.ON
        return not sampled and stronger != tier and self.parts.breakers.closed(stronger)

    def _samples(self, tier: str) -> bool:
        """The chain's last tier, answering greedily, would answer the same again: its sign (a greedy
        model that wrote its last call again writes it every turn after) or its mistake (an empty
        answer, a call it cannot write) is asked again on the repeat tier, sampled, rather than
        delivered or refused — within the call, as the agent's retry would be run anyway
        (router/core/live/repeats.py): not in a repeat's run, not once text was streamed, not on a
        hedged route, within the attempts."""
        sampling = self.resampling
        if sampling is None or sampling.greedy or self.repeat is not None or self.sample is not Sample.OFF:
            return False
        if self.streamed or self._stronger(tier) != tier or sampling.tier == tier or not self._same_answer_again(tier):
            return False
        hedged = self.route_spec is not None and self.route_spec.hedge is not None
        return not hedged and self._may_retry() and self.parts.breakers.closed(sampling.tier)

    def _same_answer_again(self, tier: str) -> bool:
        if self._fitting is not None:
            return False
        sampled = self.sample is Sample.ON
        return next_tier.same_answer_again(self.policy, tier, self.call.body.get("temperature"), sampled)

    def failed(self, tier: str, exc: UpstreamError) -> Step:
        """An upstream error of `tier`, recorded: `Retry` (after a backoff if the same tier is asked
        again) if the policy escalates on it and an attempt is left, else `Fail(exc)`; the held
        answer if this was a sign's sample."""
        exc.__traceback__ = None  # held by the step in a frame its traceback holds: a cycle; raised anew if it fails
        step = self._failed(tier, exc)
        return self._fall_back() if self.held is not None else step

    def _failed(self, tier: str, exc: UpstreamError) -> Step:
        if isinstance(exc, ContextExceeded):
            return self._too_long(tier, exc)
        self.mistakes.append(exc.mistake)
        self.record.attempt(tier, [], [Mistake(exc.mistake)], answered=False)
        client_fault = getattr(exc, "client_fault", False)
        if client_fault or not exc.tier_fault:
            self.released(tier)  # the request's fault, or the router's (a missing extra): not the tier's
        else:
            reason = f"HTTP {exc.upstream_status}" if isinstance(exc, UpstreamStatus) else exc.message
            self.record.failed(tier, self._breaker(tier), reason)
        if not client_fault and exc.mistake in self.policy.escalation.on and self._may_retry():
            # the same tier again (the chain's last) after a while if it failed; at once if not its fault
            return Retry((exc.mistake,), backoff=exc.tier_fault and self._stronger(tier) == tier)
        return Fail(exc)

    def _too_long(self, tier: str, exc: ContextExceeded) -> Step:
        """`tier`'s context did not take the prompt: on to a tier it fits, else the client's context error."""
        self.released(tier)  # its breaker: as if the call had not been made
        self.record.window(tier, exc.window)
        known = self.parts.windows.known()
        window = exc.window or known.get(tier)
        # the prompt's size: as the tier counted it, else at least the window it did not fit
        need = exc.prompt_tokens or max(window or 0, self.context_tokens)
        self._too_small.add(tier)
        fitting = next_tier.fitting(self.policy, tier, need, known, self._too_small)
        if fitting is not None and self._may_retry():
            self.record.context(tier, "escalated")
            log.info("route %s: the prompt (%d tokens) does not fit tier %s (%s); on to %s",
                     self.route, need, tier, window or "its window", fitting)  # fmt: skip
            self._fitting = fitting
            return Retry((CONTEXT_EXCEEDED,))
        self.record.context(tier, "refused")
        return Fail(exc.known(exc.prompt_tokens or self.context_tokens, window))

    # -- hedges and the end ------------------------------------------------------------------------
    def hedge_for(self, tier: str) -> tuple[str, float] | None:
        """(hedge tier, delay) when the route hedges this call's first attempt."""
        hedge = self.route_spec.hedge if self.route_spec else None
        if hedge is None or len(self.tried) != 1 or self.repeat is not None:
            return None
        other = hedge.tier or self._stronger(tier)
        return (other, hedge.after) if other != tier and self.parts.breakers.closed(other) else None

    def hedging(self, tier: str) -> None:
        self.tried.append(tier)

    def won(self, tier: str) -> None:
        """The hedge race is decided: `tier` answers (an escalation if it is the hedge)."""
        if tier != self.tier:
            self.record.escalated(self.tier)
        self.tier = tier

    async def delivered(self, tier: str, message: Mapping[str, Any]) -> None:
        """`tier`'s answer (or the held one) goes to the client: recorded and offered (`Record.delivered`),
        its tool calls in the store before the answer's end is sent."""
        await self.record.delivered(self.policy, tier, message, self.seen)
        self.held = None  # a sign's sample answered, or the held answer is this one
        if self.sample is Sample.ON:  # the sample's answer, or (a sign's sample failed) the one it was to better
            answered = self.resampling is not None and tier == self.resampling.tier
            self.record.sampled(str(self.why), "answered" if answered else "fell_back")
        if self.seen.key is not None and self.repeat is Repeat.RESAMPLED:
            self.record.repeat("answered")
