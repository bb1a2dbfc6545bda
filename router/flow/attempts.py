"""One call's journey across tiers: which tier to try next, and what went wrong.

Its attempts run in tenacity's loop, retried while `Escalate` is raised, the first outside it
(router/flow/retries.py). Every tier's answer is checked, the chain's last one's too. While an attempt
is allowed (count and deadline) the next goes to a stronger tier or, on the chain's last tier, to the
same tier: a repair (`tool_choice` pinned to the tool meant) or a fresh sample. A greedy last tier
would answer the same: its mistake goes on, sampled, to the repeat tier (`escalation.repeat`), where
the call's later attempts stay — the run the agent's retry would get, without the round trip. A sign
(`repeated_call`: the agent's last calls again; `tool_spray`) only moves a call on: to a stronger
tier, or from the greedy last tier to one sampled attempt on the repeat tier while the pipeline holds
the greedy answer (`Held`). The sample's answer is delivered, a sign and all; should it fail (a
mistake, an upstream error), the held answer is, with its sign. Where neither can run, the answer
is delivered with its sign. With no attempt left, an answer
with mistakes the policy escalates on never reaches the client: `ChecksFailed` (a retryable 502;
`escalation.on_exhausted: deliver` hands it over instead), saying what the client has: nothing, or
(a stream) the text already sent.

Such a request is remembered (router/core/repeats.py): a repeat of it — the agent's retry — is
resampled (every attempt on the repeat tier, at the repeat temperature) while `repeat.resample`
allows, else refused at once with `ChecksFailedRepeatedly` (non-retryable), also the error of the
last resampled run that fails (of the first run, if the repeat tier is greedy: `Resampling`).

A tier whose breaker is open (router/core/breaker.py) is skipped, `tier_open` among the mistakes;
with none left the call ends with `TierOpen` (a retryable 503 with Retry-After). Upstream errors of a
tier's making open its breaker; answers, however wrong, close the count. A tier whose context the
prompt does not fit (`ContextExceeded`) is not at fault: the call goes on, while an attempt is left,
to the first tier of the chain with a larger (or unknown) window, else ends with the client's own
context error (router/core/context.py learns the window).

An `Attempts` decides; its `Record` (router/core/record.py) writes the events and counts down, the
transports tell the client (router/flow/summary.py). Of the running proxy it holds only its `Parts`
(router/runtime.py): the tiers, their breakers and windows, the checks, the store and the metrics.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tenacity import AsyncRetrying, AttemptManager

from router.core.call import Call
from router.core.escalate import Escalate
from router.core.lanes import STANDARD_LANE, Choice
from router.core.offered import ToolSet
from router.core.record import Record
from router.core.repeats import Resampling, Seen, resampled
from router.core.verify import verify
from router.errors import ChecksFailed, ChecksFailedRepeatedly, ContextExceeded, TierOpen, UpstreamError, UpstreamStatus
from router.flow import retries
from router.mistakes import CONTEXT_EXCEEDED, REPAIRABLE, STRONGER_ONLY, TIER_OPEN, VERIFIER_REJECT, Mistake
from router.policy.decide import Decision, fits
from router.policy.model import Breaker, Policy
from router.upstream.base import Prompt, Speed

if TYPE_CHECKING:
    from router.runtime import Parts


log = logging.getLogger("router.escalation")


@dataclass(frozen=True, slots=True)
class Held:
    """The greedy last tier's answer with a sign, kept while its sample runs: what the pipeline
    delivers should the sample fail (`payload`: a whole `Reply`, or the `Gate` holding a stream's calls)."""

    tier: str
    signs: list[str]
    message: Mapping[str, Any]
    payload: Any


class Attempts:
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
        self.parts = parts
        self.record = Record(parts.store, parts.metrics, parts.background, call, decision.route)
        self.lane = lane
        self.call = call
        self.policy = policy
        self.decision = decision
        self.context_tokens = context_tokens  # the estimated prompt (messages and tool definitions) a context holds
        self.route = decision.route
        self.tier = decision.tier
        self.tried: list[str] = []
        self.skipped: list[str] = []  # tiers passed over because their breaker was open
        self.mistakes: list[str] = []
        self.repaired = False
        self.exhausted = False  # every attempt failed the checks (and the answer was refused or delivered)
        self.signs: list[str] = []  # the signs (`STRONGER_ONLY`) of the answer judged deliverable
        self.salvaged = False  # a call written as text was made structured (router/flow/salvage.py)
        self.looped = False  # an answer went round in a loop and was stopped (router/upstream/loops.py)
        self.verdicts: list[str] = []  # "kind:accept|reject|unsure" per verified answer
        self.prompt_evaluated = 0  # prompt tokens the tiers' servers evaluated, by their own count
        self.prompt_reused = 0  # prompt tokens they reused from their cache (a session's kept prefix)
        self.streamed = False  # a stream's client has part of the answer (text, which is not held)
        self.seen = seen if seen is not None else Seen(call)  # the request's earlier runs (router/core/repeats.py)
        self.repeat: str | None = None  # how this repeat of an exhausted request runs: "resampled", "refused"
        self.resampling = Resampling.of(policy, decision.tier)  # None: repeats run as they come
        self._native: dict[str, bool] = {}  # tier → its latest attempt got the client's own request
        self._speeds: dict[str, Speed] = {}  # tier → the speed its latest attempt is served at, as it says
        self._repair_tool: str | None = None
        self._repaired_on: set[str] = set()  # tiers that had their one repair
        self._fitting: str | None = None  # the next attempt's tier, after one whose context was too small
        self._too_small: set[str] = set()  # tiers whose context did not take the prompt
        self._sign_from: str | None = None  # the chain's last tier, whose sign a sampled attempt tries to better
        self._sample_next = False  # the next attempt samples the greedy last tier's answer (a sign or a mistake)
        self.sampled: str | None = None  # why the call went on sampled, on the repeat tier: "sign", "mistake"
        self.held: Held | None = None  # its answer, delivered should the sample fail
        self._held_signs: list[str] = []  # that answer's signs
        self.falls_back = False  # the sample failed: the held answer is delivered (`fall_back`)
        self.route_spec = next((r for r in policy.routes if r.name == decision.route), None)  # None: no route matched
        self.admitted: tuple[Any, ToolSet] | None = None  # the offered tools and the validator's reading of them
        self.started = asyncio.get_running_loop().time()
        self.deadline = self.started + policy.escalation.deadline
        if (resampling := self.resampling) is not None and self.seen.runs:
            if self.seen.runs > resampling.runs:
                self.repeat = "refused"
            else:
                self.repeat = "resampled"
                self.call = resampled(call, resampling.temperature)
                self.tier = resampling.tier
            parts.metrics.repeats.labels(self.route, self.repeat).inc()

    def refused(self) -> ChecksFailedRepeatedly:
        """The error of a repeat that is not run (`repeat == "refused"`)."""
        runs, stop = self.seen.runs, self.resampling.stop if self.resampling is not None else ""
        failed = "in its last run" if runs == 1 else f"in each of its last {runs} runs"
        return ChecksFailedRepeatedly(f"This request failed the router's checks {failed}; it was not run again. {stop}",
                                      tier=self.tier)  # fmt: skip

    # -- the loop ---------------------------------------------------------------------------
    def attempts(self) -> AsyncRetrying:
        """Tenacity's loop for this call: the policy's attempts, within its deadline."""
        return retries.loop(self.policy.escalation.max_attempts, self.deadline)

    def retries(self, first: Escalate) -> AsyncIterator[AttemptManager]:
        """The attempts after a first one, run outside tenacity, that raised `first`: tenacity's loop
        (`attempts()`) with `first` as its first attempt's outcome, so it stops, waits and retries
        exactly as if it had run that attempt too."""
        return retries.after_first(self.attempts(), first)

    def next_attempt(self) -> tuple[str, dict[str, Any]]:
        """The tier and body of the next attempt: routed tier, repair on the same tier, or stronger
        (or, after the greedy last tier's sign or mistake, the repeat tier, sampled)."""
        last = self.tried[-1] if self.tried else None
        body = self.call.body
        if self._sample_next and self.resampling is not None:  # the greedy last tier's answer, sampled
            self.call = resampled(self.seen.call, self.resampling.temperature)
            self.tier, self._repair_tool, self._fitting = self.resampling.tier, None, None
            self._sample_next, self.sampled = False, "sign" if self._sign_from is not None else "mistake"
            self.parts.metrics.samples.labels(self.route, self.sampled, "sampled").inc()
            body = self.call.body
        elif self._repair_tool is not None:
            body = {**body, "tool_choice": {"type": "function", "function": {"name": self._repair_tool}}}
            self._repair_tool = None
        elif self._fitting is not None:
            self.tier, self._fitting = self._fitting, None
        elif last is not None and self.repeat != "resampled" and self.sampled is None:  # sampled, a call stays there
            self.tier = self._stronger(last)
        self.tier = self._past_open(self.tier)
        if last is not None and self.tier != last:
            self.record.escalated(last)
        self.tried.append(self.tier)
        spec = self.route_spec.verify if self.route_spec else None
        if spec is not None and spec.kind == "logprobs" and self.verifiable(self.tier) and not self.call.stream:
            body = {**body, "logprobs": True}
        return self.tier, body

    def hold(self, tier: str, message: Mapping[str, Any], payload: Any) -> None:
        """`tier`'s answer raised `Escalate`: kept if it is the answer whose sign is sampled next."""
        if tier == self._sign_from and self.held is None:
            self.held = Held(tier, self._held_signs, message, payload)

    def sample_failed(self, tier: str, exc: UpstreamError) -> bool:
        """The sign's sample met an upstream error: recorded, and the held answer is delivered (True);
        False when this is no sample (the caller raises `failed(tier, exc)`)."""
        if self.held is None:
            return False
        self.failed(tier, exc)
        self.falls_back = True
        return True

    def fall_back(self) -> Held:
        """The sample failed: the held answer, its tier and signs the call's again."""
        held = self.held
        if held is None:  # nothing held (both pipelines hold what they sample): no answer to give
            raise self._checks_failed(self.tier)
        self.tier, self.signs, self.held, self.falls_back = held.tier, held.signs, None, False
        return held

    @property
    def escalated(self) -> bool:
        return any(t != self.decision.tier for t in self.tried)

    def verifiable(self, tier: str) -> bool:
        """A route's verifier judges this tier's calls: a stronger tier is there to answer instead
        (not a sample's: a sampled call stays on its tier, `_stronger`)."""
        return self._stronger(tier) != tier

    def _stronger(self, tier: str) -> str:
        chain = self.policy.escalation.chain
        if self.sampled is not None:
            return tier  # the call went on sampled, on the repeat tier: it stays there
        if tier in chain:
            i = chain.index(tier)
            return chain[i + 1] if i + 1 < len(chain) else tier
        return chain[0] if chain else tier

    def _breaker(self, tier: str) -> Breaker:
        model = self.policy.models.get(tier)
        return model.breaker if model is not None else Breaker()

    def _past_open(self, tier: str) -> str:
        """`tier`, or the first stronger tier its breaker lets the call go to; `TierOpen` if none."""
        breakers = self.parts.breakers
        skipped: list[str] = []
        while not breakers.allow(tier, self._breaker(tier)):
            skipped.append(tier)
            stronger = self._stronger(tier)
            if stronger in skipped or stronger == tier:
                self.parts.metrics.refused.labels(TIER_OPEN).inc()
                wait = breakers.retry_after(skipped)
                raise TierOpen(
                    f"No tier can take this call now: {', '.join(skipped)} failed repeatedly and "
                    f"{'is' if len(skipped) == 1 else 'are'} skipped for a while. Retry in {wait} s.",
                    retry_after=wait,
                )
            tier = stronger
        self.skipped += skipped
        self.mistakes += [TIER_OPEN] * len(skipped)
        return tier

    def answered(self, tier: str, prompt: Prompt | None = None) -> None:
        """`tier` sent a whole answer (right or wrong): its breaker's count of failures starts over;
        `prompt`, the server's count of the prompt it read (evaluated, reused), and its speed are recorded."""
        self.parts.breakers.succeeded(tier)
        self.parts.warming.live_ended(tier)
        if (speed := self._speeds.get(tier)) is not None:
            self.record.speed(tier, speed)
        if prompt is not None:
            self.prompt_evaluated += prompt.evaluated
            self.prompt_reused += prompt.reused
            self.record.prompt(tier, prompt.evaluated, prompt.reused)

    def released(self, tier: str) -> None:
        """A call to `tier` ended neither way (cancelled: the client left, a hedge lost)."""
        self.parts.breakers.released(tier)
        self.parts.warming.live_ended(tier)

    def _may_retry(self) -> bool:
        return (
            len(self.tried) < self.policy.escalation.max_attempts and asyncio.get_running_loop().time() < self.deadline
        )

    # -- verdicts -----------------------------------------------------------------------------
    def judge(self, tier: str, message: Mapping[str, Any], finish_reason: str | None) -> list[Mistake]:
        """Check an answer and record it. Raise Escalate when its mistakes warrant another attempt
        and one is left, ChecksFailed when none is; return the mistakes the answer is delivered with
        (its signs in `signs`)."""
        self.signs = []
        found = self._judged(tier, message, finish_reason)
        self.signs = [m.kind for m in found if m.kind in STRONGER_ONLY]
        return found

    def _judged(self, tier: str, message: Mapping[str, Any], finish_reason: str | None) -> list[Mistake]:
        read = self.admitted[1] if self.admitted and self.admitted[0] is self.call.body.get("tools") else None
        found = self.parts.validator.check(message, self.call.body, finish_reason=finish_reason, tool_set=read)
        tools = [str((c.get("function") or {}).get("name", "")) for c in message.get("tool_calls") or ()]
        self.mistakes.extend(m.kind for m in found)
        self.record.attempt(tier, tools, found)
        kinds = [m.kind for m in found]
        escalating = set(kinds) & set(self.policy.escalation.on)
        if not escalating:
            return found
        if self._sign_from is not None:  # the sign's sample: delivered, a sign and all; else the held answer
            self.falls_back = not escalating <= STRONGER_ONLY
            return found
        if escalating <= STRONGER_ONLY and not (self._may_retry() and self._moves_up(tier)):
            if self._samples(tier):  # held meanwhile, and delivered should the sample fail
                self._sign_from, self._held_signs = tier, [k for k in kinds if k in STRONGER_ONLY]
                self._sample_next = True
                raise Escalate(kinds)
            return found  # a sign for a stronger tier or a sample, where there is one; never a refusal
        if self._may_retry():
            if (tool := self._repairable(tier, found)) is not None:
                self._repair_tool, self.repaired = tool, True
                self._repaired_on.add(tier)
                raise Escalate(kinds)
            if not self._same_answer_again(tier):
                raise Escalate(kinds)
            if self._samples(tier):  # asked again greedily it would fail the same way: sampled instead
                self._sample_next = True
                raise Escalate(kinds)
        self.exhausted = True
        if self.policy.escalation.on_exhausted == "deliver":
            return found
        self.parts.metrics.exhausted.labels(tier, self.route).inc()
        raise self._checks_failed(tier)

    def _checks_failed(self, tier: str) -> ChecksFailed:
        """The error of a call whose every attempt failed the checks: retryable while a repeat of the
        request would be run again (resampled), else not; the request is remembered for its repeats."""
        kinds = ", ".join(dict.fromkeys(self.mistakes))
        sent = "nothing was delivered"
        if self.streamed:  # text is not held: the client has it
            sent = "no tool call was delivered, only the text already streamed"
        resampling = self.resampling
        runs = self.parts.repeats.exhausted(self.seen) if resampling is not None else 0
        log.warning(
            "route %s: no attempt left after %s (tiers %s, run %d of this request); answering with an error",
            self.route, ",".join(self.mistakes), ",".join(self.tried), max(runs, 1),
        )  # fmt: skip
        failed = f"Every answer failed the router's checks ({kinds})"
        if resampling is None:
            return ChecksFailed(f"{failed}; {sent}. Retrying may succeed.", tier=tier)
        if runs <= resampling.runs:
            retry = "A retry of this request is run again resampled, and may succeed."
            return ChecksFailed(f"{failed}; {sent}. {retry}", tier=tier)
        if runs > 1:
            failed += f", in each of its last {runs} runs"
        return ChecksFailedRepeatedly(f"{failed}; {sent}. {resampling.stop}", tier=tier)

    async def verify(self, tier: str, body: Mapping[str, Any], choice: Mapping[str, Any]) -> None:
        """Run the route's verifier on a well-formed call of a checked tier; escalate on rejection."""
        spec = self.route_spec.verify if self.route_spec else None
        message = choice.get("message") or {}
        if spec is None or not self.verifiable(tier) or not message.get("tool_calls"):
            return
        loop = asyncio.get_running_loop()
        started = loop.time()
        parts, chain = self.parts, self.policy.escalation.chain
        verdict = await verify(
            parts.upstreams, parts.verdicts, spec, tier, body, choice, self.deadline, chain, self.call.session
        )
        outcome = "unsure" if verdict.unsure else "accept" if verdict.accept else "reject"
        self.parts.metrics.observe_verdict(spec.kind, self.route, outcome, verdict.cached, loop.time() - started)
        self.verdicts.append(f"{spec.kind}:{outcome}")
        if verdict.accept:
            return
        tool = str((message["tool_calls"][0].get("function") or {}).get("name", ""))
        tool = tool if tool in self.call.features.tool_names else ""
        self.mistakes.append(VERIFIER_REJECT)
        self.signs = []
        self.record.rejected(tier, tool)
        log.debug("route %s: the %s verifier rejected a call of tier %s", self.route, spec.kind, tier)
        if self._may_retry():
            raise Escalate([VERIFIER_REJECT])

    def _moves_up(self, tier: str) -> bool:
        """The next attempt after `tier`'s would go to a stronger tier that takes calls now."""
        stronger = self._stronger(tier)
        sampled = self.repeat == "resampled" or self.sampled is not None
        return not sampled and stronger != tier and self.parts.breakers.closed(stronger)

    def _samples(self, tier: str) -> bool:
        """The chain's last tier, answering greedily, would answer the same again: its sign (a greedy
        model that wrote its last call again writes it every turn after) or its mistake (an empty
        answer, a call it cannot write) is asked again on the repeat tier, sampled, rather than
        delivered or refused — within the call, as the agent's retry would be run anyway
        (router/core/repeats.py): not in a repeat's run, not once text was streamed, not on a
        hedged route, within the attempts."""
        sampling = self.resampling
        if sampling is None or sampling.greedy or self.repeat is not None or self.sampled is not None:
            return False
        if self.streamed or self._stronger(tier) != tier or sampling.tier == tier or not self._same_answer_again(tier):
            return False
        hedged = self.route_spec is not None and self.route_spec.hedge is not None
        return not hedged and self._may_retry() and self.parts.breakers.closed(sampling.tier)

    def _same_answer_again(self, tier: str) -> bool:
        """Asked again (the chain's last tier, no repair), greedy `tier` (temperature 0, its params' or
        the client's) would give the same answer: no attempt is made."""
        if self._stronger(tier) != tier or self._fitting is not None:
            return False
        model = self.policy.models.get(tier)
        pinned = model.pinned_temperature if model is not None else None
        return (pinned if pinned is not None else self.call.body.get("temperature")) == 0

    def _repairable(self, tier: str, found: Sequence[Mistake]) -> str | None:
        """The one offered tool the answer fumbled, if this tier may be repaired: once per tier, on
        a route that asks for it, or on the chain's last tier (where the next try is the same tier)."""
        route = self.route_spec
        if tier in self._repaired_on or not ((route and route.repair) or self._stronger(tier) == tier):
            return None
        tools = {m.tool for m in found if m.kind in REPAIRABLE and m.tool}
        offered = self.call.features.tool_names
        if len(tools) != 1 or any(m.kind not in REPAIRABLE for m in found):
            return None
        tool = tools.pop()
        return tool if tool in offered else None

    def failed(self, tier: str, exc: UpstreamError) -> Escalate | UpstreamError:
        """An upstream error: record it; what to raise (`raise trace.failed(tier, exc)`): `Escalate`
        to retry or escalate if allowed, else `exc` itself. Returned rather than raised here: this
        frame holds `exc`, and in its traceback would make a reference cycle (tests/test_cycles.py)."""
        if isinstance(exc, ContextExceeded):
            return self._too_long(tier, exc)
        self.mistakes.append(exc.mistake)
        self.record.attempt(tier, [], [Mistake(exc.mistake)], answered=False)
        client_fault = getattr(exc, "client_fault", False)
        if client_fault or not exc.tier_fault:
            self.released(tier)  # the request's fault, or the router's (a missing extra): not the tier's
        else:
            reason = f"HTTP {exc.upstream_status}" if isinstance(exc, UpstreamStatus) else exc.message
            self.parts.breakers.failed(tier, self._breaker(tier), reason)
            self.parts.warming.live_ended(tier)
        if not client_fault and exc.mistake in self.policy.escalation.on and self._may_retry():
            # the same tier again (the chain's last) after a while if it failed; at once if not its fault
            escalate = Escalate([exc.mistake], backoff=exc.tier_fault and self._stronger(tier) == tier)
            escalate.__cause__ = exc
            return escalate
        return exc

    def _too_long(self, tier: str, exc: ContextExceeded) -> Escalate | ContextExceeded:
        """`tier`'s context did not take the prompt (`failed`): on to a tier it fits, else the
        client's context error."""
        self.released(tier)  # its breaker: as if the call had not been made
        windows = self.parts.windows
        windows.learned(tier, exc.window)
        known = windows.known()
        window = exc.window or known.get(tier)
        # the prompt's size: as the tier counted it, else at least the window it did not fit
        need = exc.prompt_tokens or max(window or 0, self.context_tokens)
        self._too_small.add(tier)
        beyond = self.policy.escalation.beyond(tier)
        fitting = next((t for t in beyond if t not in self._too_small and fits(need, known.get(t))), None)
        if fitting is not None and self._may_retry():
            self.parts.metrics.context_exceeded.labels(tier, "escalated").inc()
            log.info("route %s: the prompt (%d tokens) does not fit tier %s (%s); on to %s",
                     self.route, need, tier, window or "its window", fitting)  # fmt: skip
            self._fitting = fitting
            escalate = Escalate([CONTEXT_EXCEEDED])
            escalate.__cause__ = exc
            return escalate
        self.parts.metrics.context_exceeded.labels(tier, "refused").inc()
        return exc.known(exc.prompt_tokens or self.context_tokens, window)

    def hedge_for(self, tier: str) -> tuple[str, float] | None:
        """(hedge tier, delay) when the route hedges this call's first attempt."""
        hedge = self.route_spec.hedge if self.route_spec else None
        if hedge is None or len(self.tried) != 1 or self.repeat is not None:
            return None
        other = hedge.tier or self._stronger(tier)
        return (other, hedge.after) if other != tier and self.parts.breakers.closed(other) else None

    def sent(self, tier: str, native: bool) -> None:
        """An attempt on `tier` starts: with the client's request itself (`native`) or the chat body.
        A warm-up running there gives way (router/core/warming.py)."""
        self._native[tier] = native
        self._speeds.pop(tier, None)
        self.parts.warming.live_started(tier)

    def sped(self, tier: str, speed: Speed) -> None:
        """`tier`'s answer says the speed it is served at (router/upstream/speed.py)."""
        self._speeds[tier] = speed

    @property
    def speed(self) -> Speed | None:
        """The speed of the answer of the tier answering now, where it says."""
        return self._speeds.get(self.tier)

    @property
    def answered_natively(self) -> bool:
        """The tier answering now got the client's request as it came (nothing was left out of it)."""
        return self._native.get(self.tier, False)

    def hedging(self, tier: str) -> None:
        self.tried.append(tier)

    def won(self, tier: str) -> None:
        """The hedge race is decided: `tier` answers (an escalation if it is the hedge)."""
        if tier != self.tier:
            self.record.escalated(self.tier)
        self.tier = tier

    def delivered(self, tier: str, message: Mapping[str, Any]) -> None:
        """Remember the tool calls the client got, to attribute errors it reports later; offer the
        answer to the route's shadow mode."""
        self.record.delivered(tier, message)
        self.held = None  # a sign's sample answered, or the held answer is this one
        # the session's next turn starts with this answer: the other tiers read it in the background
        self.parts.warming.offer(self.policy, self.call.session, self.call.body, tier, message)
        if self.sampled is not None:  # the sample's answer, or (a sign's sample failed) the one it was to better
            answered = self.resampling is not None and tier == self.resampling.tier
            self.parts.metrics.samples.labels(self.route, self.sampled, "answered" if answered else "fell_back").inc()
        if self.seen.key is not None:  # its shape was remembered: if the request was, it is forgotten
            self.parts.repeats.answered(self.seen)
            if self.repeat == "resampled":
                self.parts.metrics.repeats.labels(self.route, "answered").inc()
        # shadow mode (router/core/shadow.py): maybe a comparison, in the background
        self.parts.shadow.offer(self.policy, self.route, self.call.body, tier, message)
