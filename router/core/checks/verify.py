"""Semantic verifiers: is a well-formed tool call also the RIGHT call? A route's `verify` option.

    verdict = await verify(tiers, verdicts, spec, proposal, chain)

runs on answers that passed the format checks and hold a tool call (streamed ones too, held until
the verdict), of a tier with a stronger one after it in the chain (see `Attempts.verify`). Each
verifier returns a `Verdict`:

    judge     ask a tier (default: the escalation tier) a short, output-constrained question —
              JSON {"accept": bool} via `response_format: json_object` — about the proposed call,
              given the offered tools with their parameters (a cacheable prefix), the last user
              message and the call.
              Verdicts are cached in a `VerdictCache` by (call, context) hash, bounded LRU.
    agree     `samples - 1` more answers from the same tier (same body, `temperature`, seeds
              1..n-1), sent together; every one that answers must call the same tool with the same
              normalised arguments (keys sorted, strings stripped and case-folded, numbers as
              floats).
    logprobs  the answer's `choices[0].logprobs.content` (the request asked for `logprobs: true`);
              the mean (or min) token logprob must reach `threshold`. llama-cpp-python 0.3.36
              returns `logprobs: null` for tool calls (auto or named tool_choice; measured), so on
              that server this verifier can never decide: `if_unsure` applies.
    score     one prefill on a scoring tier (default: the escalation tier): the log-probability of
              the proposed call given the request, in that model's prompt format, from its
              server (router/upstream/scoring.py, in the session's slot; `via`: echo on
              llama-cpp-python, forced on llama-server); the mean (or min) must reach `threshold`.

When no verdict is possible (the judge failed or answered nonsense, no logprobs, every extra sample
failed) the verdict is `unsure` and `if_unsure` (default accept) decides. Verifier failures never
reach the client.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from router.constants import JUDGE_TEXT_MAX, JUDGE_TOOLS_MAX, VERDICT_CACHE_ENTRIES
from router.core.checks.compare import (
    ask_json,
    call_key,
    first_call,
    function_parameter_lines,
    json_object,
    last_user_text,
    parameter_lines,
    tool_functions,
    tool_line,
    tool_lines,
)
from router.errors import UpstreamError
from router.policy.route import Verify
from router.sessions import Session
from router.upstream.base import scores
from router.upstream.scoring import measure

if TYPE_CHECKING:
    from router.upstream.base import Tiers

# The verdict only: a reason after it cannot change it (greedy, left to right) and costs ~15 decode
# steps of the judging model — about 2 s on 2 CPU cores.
JUDGE_SYSTEM = (
    "You check one tool call an assistant proposes. Accept it only if it is the right tool for the "
    "user's request and its argument values match what the user asked for. Answer with JSON only: "
    '{"accept": true} or {"accept": false}.'
)


@dataclass(frozen=True, slots=True)
class Proposal:
    """The call a verifier judges: `tier`'s answer (`choice`, choices[0]) to `body`, in `session`, by `deadline`."""

    tier: str
    body: Mapping[str, Any]
    choice: Mapping[str, Any]
    deadline: float
    session: Session | None = None

    @property
    def message(self) -> Mapping[str, Any]:
        return self.choice.get("message") or {}


@dataclass(frozen=True, slots=True)
class Verdict:
    accept: bool
    reason: str
    unsure: bool = False
    cached: bool = False


class VerdictCache:
    """A bounded LRU of judge verdicts (one per running proxy, router/runtime.py)."""

    def __init__(self, size: int = VERDICT_CACHE_ENTRIES) -> None:
        self.size = size
        self._items: OrderedDict[bytes, Verdict] = OrderedDict()

    def get(self, key: bytes) -> Verdict | None:
        v = self._items.get(key)
        if v is not None:
            self._items.move_to_end(key)
        return v

    def put(self, key: bytes, verdict: Verdict) -> None:
        self._items[key] = verdict
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


def judge_messages(body: Mapping[str, Any], message: Mapping[str, Any]) -> list[dict[str, str]]:
    """The judge's prompt. It opens with what stays the same from call to call — the instructions and
    the offered tools with their parameters — so that a llama.cpp server's prompt cache holds it and
    each verdict reads only the request and the call (a few dozen tokens). Tools over
    `JUDGE_TOOLS_MAX` characters are listed without parameters; the called tool's then follow the call."""
    name, args = first_call(message) or ("", "")
    fns = tool_functions(body)
    tools, after, size = [], [], 0
    for fn in fns:
        block = [tool_line(fn), *(f"  {line}" for line in function_parameter_lines(fn))]
        size += sum(len(line) + 1 for line in block)
        if size > JUDGE_TOOLS_MAX:  # too many to detail: names and descriptions, the called tool's parameters
            tools = [tool_line(fn) for fn in fns]
            if params := parameter_lines(body, name):
                after = [f"Parameters of {name}:", *params]
            break
        tools += block
    prompt = "\n".join(
        [
            "Tools offered:",
            *tools,
            "",
            f"User request: {last_user_text(body)}",
            "",
            f"Proposed call: {name}({args[:JUDGE_TEXT_MAX]})",
            *after,
            "",
            "Is this the right call? JSON only.",
        ]
    )
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": prompt}]


def judge_key(body: Mapping[str, Any], message: Mapping[str, Any], judge_tier: str) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in (judge_tier, last_user_text(body), *tool_lines(body), *(first_call(message) or ("", ""))):
        h.update(part.encode())
        h.update(b"\0")
    return h.digest()


def read_judgement(content: str) -> Verdict:
    """The judge's JSON answer → Verdict (unsure when it is not the JSON asked for)."""
    text = content.strip()
    data = json_object(text)
    if data is None or not isinstance(data.get("accept"), bool):
        return Verdict(True, f"judge answer unreadable: {text[:60]!r}", unsure=True)
    return Verdict(data["accept"], str(data.get("reason") or "")[:200])


def logprob_measure(choice: Mapping[str, Any], measure: str) -> float | None:
    lp = choice.get("logprobs")
    content = lp.get("content") if isinstance(lp, dict) else None
    values = [
        float(t["logprob"])
        for t in content or ()
        if isinstance(t, dict) and isinstance(t.get("logprob"), int | float) and math.isfinite(t["logprob"])
    ]
    if not values:
        return None
    return min(values) if measure == "min" else sum(values) / len(values)


# -- the verifiers -------------------------------------------------------------------------------
async def judge(tiers: Tiers, verdicts: VerdictCache, spec: Verify, judge_tier: str, proposal: Proposal) -> Verdict:
    body, message, deadline = proposal.body, proposal.message, proposal.deadline
    key = judge_key(body, message, judge_tier)
    if (hit := verdicts.get(key)) is not None:
        return Verdict(hit.accept, hit.reason, hit.unsure, cached=True)
    try:
        content = await ask_json(tiers[judge_tier], judge_messages(body, message), spec.max_tokens, deadline)
    except UpstreamError as exc:
        return Verdict(True, f"judge failed: {exc.mistake}", unsure=True)
    verdict = read_judgement(content)
    if not verdict.unsure:
        verdicts.put(key, verdict)
    return verdict


async def agree(tiers: Tiers, spec: Verify, proposal: Proposal) -> Verdict:
    body, deadline = proposal.body, proposal.deadline
    original = call_key(proposal.message)
    upstream = tiers[proposal.tier]

    async def sample(seed: int) -> Mapping[str, Any] | None:
        try:
            reply = await upstream.complete({**body, "temperature": spec.temperature, "seed": seed}, deadline)
        except UpstreamError:
            return None
        choices = reply.data.get("choices") or [{}]
        msg = (choices[0] or {}).get("message")
        return msg if isinstance(msg, dict) else {}

    answers = await asyncio.gather(*(sample(seed) for seed in range(1, spec.samples)))
    keys = [call_key(a) for a in answers if a is not None]
    if not keys:
        return Verdict(True, "no extra sample answered", unsure=True)
    differ = [k for k in keys if k != original]
    if differ:
        other = differ[0][0] if differ[0] else "no call"
        return Verdict(False, f"{len(differ)} of {len(keys)} samples differ (e.g. {other})")
    return Verdict(True, f"{len(keys) + 1} samples agree")


def logprobs(spec: Verify, choice: Mapping[str, Any]) -> Verdict:
    value = logprob_measure(choice, spec.measure)
    if value is None:
        return Verdict(True, "no logprobs in the answer", unsure=True)
    ok = value >= spec.threshold
    return Verdict(ok, f"{spec.measure} logprob {value:.3f} {'>=' if ok else '<'} {spec.threshold}")


async def scored(tiers: Tiers, spec: Verify, tier: str, proposal: Proposal) -> Verdict:
    """The scoring tier's (`tier`) mean logprob of the first call (its `score_call`:
    router/upstream/scoring.py), read in the session's slot there, against `threshold`."""
    upstream = tiers[tier]
    calls = proposal.message.get("tool_calls") or []
    if not scores(upstream) or not calls:
        return Verdict(True, f"tier {tier!r} cannot score", unsure=True)
    session, deadline = proposal.session, proposal.deadline
    values = await upstream.score_call(dict(proposal.body), dict(calls[0]), deadline, session, spec.via)
    if values is None:
        return Verdict(True, "no score from the scoring tier", unsure=True)
    value = measure(values, spec.measure)
    ok = value >= spec.threshold
    return Verdict(ok, f"call {spec.measure} logprob {value:.3f} {'>=' if ok else '<'} {spec.threshold}")


async def verify(
    tiers: Tiers, verdicts: VerdictCache, spec: Verify, proposal: Proposal, chain: Sequence[str]
) -> Verdict:
    """The verdict on `proposal`, `if_unsure` applied (the judging or scoring tier: the route's, else
    the escalation chain's last)."""
    asked = spec.tier or (chain[-1] if chain else proposal.tier)
    if spec.kind == "judge":
        verdict = await judge(tiers, verdicts, spec, asked, proposal)
    elif spec.kind == "agree":
        verdict = await agree(tiers, spec, proposal)
    elif spec.kind == "score":
        verdict = await scored(tiers, spec, asked, proposal)
    else:
        verdict = logprobs(spec, proposal.choice)
    if verdict.unsure:
        return Verdict(spec.if_unsure == "accept", verdict.reason, unsure=True, cached=verdict.cached)
    return verdict
