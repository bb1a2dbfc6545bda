"""Shadow mode (a route's `shadow` option) and the answer comparison `agent-router qa` shares.

    routes:
      - name: simple-tool-call
        use: fast
        shadow: {rate: 0.05, tier: full, judge: full}     # mode: judge (default) | record

On the request path (`Trace.delivered` → `Shadower.offer`) there is a random draw against `rate`,
a check of the in-flight bound and one background task (`Router.background`) — nothing that can
wait or raise into the call. Calls answered by the reference tier itself are not shadowed.

In the background, bounded by `shadow_max_inflight` comparisons (a sampled call beyond it is dropped
and counted: `router_shadow_dropped_total{route, reason="busy"}`) and `shadow_timeout` seconds
(router/settings.py):
  1. a request larger than `shadow_max_sample_bytes` as JSON is dropped (reason "too_large");
  2. mode `judge`: the reference tier answers the same request (not streamed) and `compare` asks the
     judge tier for a verdict. The outcome is counted per route — store events of kind
     shadow_agree / shadow_disagree / shadow_unsure / shadow_error (the `"shadow"` key of
     `/v1/router/stats`, never calls or mistakes) and `router_shadow_total{route, outcome}`;
     mode `record`: nothing is asked now; `agent-router qa` answers and judges the sample later;
  3. the request and the answers are redacted (`scrub`) and kept as a `Sample`
     (`store.samples_put`; the newest `max_samples_per_route` per route, none older than
     `sample_max_age`: StoreOptions).

`compare(judge, request, answer, reference, …)`: answers that are the same — the same tool calls
with the same normalised arguments (router/verify.py's `call_key`), or the same text — pass without
asking. Otherwise the judge tier sees the offered tools, the system prompt, the last messages and
both answers, and must answer JSON `{"score": 0-100, "pass": bool, "reason": str, "difference":
str}` (`response_format: json_object`, temperature 0). A missing `pass` is read from the score
(≥ PASS_SCORE); an answer without either, or a failing judge, is `unsure`: neither a pass nor a
fail, counted apart.

`scrub` redacts with router/errors.py's `redact` (the policy's secrets, bearer tokens, key=…
parameters, sk-… keys, URL credentials) plus token shapes common in agent traffic (GitHub, AWS,
Slack, JWTs, private key blocks) and `name: value` / `name=value` pairs named like credentials, in
every string of the sample; string fields named like credentials (api_key, token, secret, password,
authorization, …) are replaced whole.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import orjson

from router.errors import UpstreamError, redact
from router.policy.model import Policy, Shadow
from router.store.base import SHADOW_PREFIX, Event, Sample
from router.upstream.base import Reply, Upstream
from router.verify import ask_json, call_key, json_object, last_user_text, normalised, tool_lines

if TYPE_CHECKING:
    from router.app import Router
    from router.escalation import Trace
    from router.metrics import Metrics
    from router.settings import Settings

log = logging.getLogger("router.shadow")

PASS_SCORE = 70  # a verdict with a score but no readable `pass` passes at this score or above
_TEXT_MAX = 1500  # characters of one answer or message shown to the judge
_CONTEXT_MESSAGES = 6  # last messages of the conversation shown to the judge
COMPARE_SYSTEM = (
    "You compare two answers to the same request. Answer A comes from a fast model, answer B from a "
    "stronger reference model. Decide whether A is as good as B: correct (the right tool with the "
    "right argument values, or a right reply), following the instructions, and safe. Wording may "
    'differ. Answer with JSON only: {"score": <0-100>, "pass": true or false, "reason": "<at most '
    '20 words>", "difference": "<the main difference between A and B, at most 20 words, or empty>"}.'
)


@dataclass(frozen=True, slots=True)
class Comparison:
    passed: bool
    score: int | None
    reason: str
    difference: str = ""
    judge: str = ""  # the judging tier, or "identical" when no judge was needed
    unsure: bool = False

    @property
    def outcome(self) -> str:
        return "unsure" if self.unsure else "agree" if self.passed else "disagree"

    def to_json(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "pass": self.passed,
            "reason": self.reason,
            "difference": self.difference,
            "judge": self.judge,
            "unsure": self.unsure,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Comparison:
        score = data.get("score")
        return cls(
            passed=data.get("pass") is True,
            score=score if isinstance(score, int) else None,
            reason=str(data.get("reason") or ""),
            difference=str(data.get("difference") or ""),
            judge=str(data.get("judge") or ""),
            unsure=data.get("unsure") is True,
        )


# -- the comparison -------------------------------------------------------------------------------
def message_of(reply: Reply) -> dict[str, Any]:
    """choices[0].message of a whole answer ({} when there is none)."""
    choices = reply.data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message")
    return message if isinstance(message, dict) else {}


def _text(content: Any) -> str:
    if isinstance(content, list):
        content = " ".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return str(content or "")


def render(message: Mapping[str, Any]) -> str:
    """An answer as the judge reads it: its text, then each tool call as name(arguments)."""
    parts = [_text(message.get("content")).strip()]
    for c in message.get("tool_calls") or ():
        fn = (c.get("function") if isinstance(c, dict) else None) or {}
        parts.append(f"call {fn.get('name')}({str(fn.get('arguments') or '')[:_TEXT_MAX]})")
    return "\n".join(p for p in parts if p)[:_TEXT_MAX] or "(empty answer)"


def _conversation(request: Mapping[str, Any]) -> list[str]:
    messages = [m for m in request.get("messages") or () if isinstance(m, dict)]
    system = next((m for m in messages if m.get("role") in ("system", "developer")), None)
    lines = [f"System prompt: {_text(system.get('content'))[:_TEXT_MAX]}", ""] if system else []
    for m in messages[-_CONTEXT_MESSAGES:]:
        if m is not system:
            lines.append(f"[{m.get('role')}] {render(m)[:600]}")
    return lines


def compare_messages(
    request: Mapping[str, Any], answer: Mapping[str, Any], reference: Mapping[str, Any]
) -> list[dict[str, str]]:
    tools = tool_lines(request)
    prompt = "\n".join(
        [
            *(["Tools offered:", *tools, ""] if tools else []),
            *_conversation(request),
            "",
            f"Last user request: {last_user_text(request)}",
            "",
            f"Answer A (fast model):\n{render(answer)}",
            "",
            f"Answer B (reference model):\n{render(reference)}",
            "",
            "Is A as good as B? JSON only.",
        ]
    )
    return [{"role": "system", "content": COMPARE_SYSTEM}, {"role": "user", "content": prompt}]


def same_answer(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """The same tool calls with the same normalised arguments, or the same (non-empty) text."""
    calls_a, calls_b = a.get("tool_calls") or [], b.get("tool_calls") or []
    if calls_a or calls_b:
        keys = [[call_key({"tool_calls": [c]}) for c in calls] for calls in (calls_a, calls_b)]
        return keys[0] == keys[1]
    text_a = normalised(_text(a.get("content")))
    return bool(text_a) and text_a == normalised(_text(b.get("content")))


def _score(value: Any) -> int | None:
    if isinstance(value, str):
        try:
            value = float(value.strip().rstrip("%"))
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:  # NaN
        return None
    return int(max(0, min(100, round(value))))


def _flag(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "pass", "false", "no", "fail"):
        return value.strip().lower() in ("true", "yes", "pass")
    return None


def read_comparison(content: str) -> Comparison:
    """The judge's JSON answer → Comparison (unsure when it says neither pass nor a score)."""
    data = json_object(content)
    if data is None:
        return Comparison(False, None, f"judge answer unreadable: {content.strip()[:60]!r}", unsure=True)
    score, passed = _score(data.get("score")), _flag(data.get("pass"))
    if passed is None and score is None:
        return Comparison(False, None, f"judge answer has no verdict: {content.strip()[:60]!r}", unsure=True)
    if passed is None:
        passed = score is not None and score >= PASS_SCORE
    return Comparison(passed, score, str(data.get("reason") or "")[:300], str(data.get("difference") or "")[:300])


async def compare(
    judge: Upstream,
    request: Mapping[str, Any],
    answer: Mapping[str, Any],
    reference: Mapping[str, Any],
    deadline: float,
    max_tokens: int,
) -> Comparison:
    """Is `answer` as good as `reference` (two answers to `request`)? Never raises."""
    if same_answer(answer, reference):
        return Comparison(True, 100, "the same answer", judge="identical")
    try:
        content = await ask_json(judge, compare_messages(request, answer, reference), max_tokens, deadline)
    except UpstreamError as exc:
        return Comparison(False, None, f"judge failed: {exc.mistake}", judge=judge.tier, unsure=True)
    return replace(read_comparison(content), judge=judge.tier)


# -- redaction ------------------------------------------------------------------------------------
_TOKEN_SHAPES = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----",
    re.S,
)
# `name: value`, `name=value`, `"name": "value"` (also JSON-escaped inside a string), numbers spared
_NAMED_VALUE = re.compile(
    r"(?i)(?<![A-Za-z])((?:api[_-]?key|apikey|access[_-]?token|auth[_-]?token|token|secret|password|passwd"
    r'|authorization)\\?"?\s*[:=]\s*\\?"?)(?!\[redacted\]|bearer\s|basic\s)(?![0-9.]+(?:[\s"\\,;&}]|$))[^\s"\\,;&}]{4,}'
)
# a field whose string value is a credential, whatever it looks like
_CREDENTIAL_FIELD = re.compile(
    r"(?i)(x-)?(api[_-]?key|apikey|((access|auth|refresh|id)[_-]?)?token|(client[_-]?)?secret|password|passwd"
    r"|authorization|credentials?|private[_-]?key)"
)


def scrub_text(text: str, secrets: tuple[str, ...] = ()) -> str:
    """`text` with secrets and credential-shaped strings replaced by [redacted]."""
    text = _TOKEN_SHAPES.sub("[redacted]", redact(text, secrets))
    return _NAMED_VALUE.sub(r"\1[redacted]", text)


def scrub(value: Any, secrets: tuple[str, ...] = ()) -> Any:
    """A copy of `value` (JSON-like) with every string scrubbed, and the string values of fields
    named like credentials replaced whole."""
    if isinstance(value, str):
        return scrub_text(value, secrets)
    if isinstance(value, list):
        return [scrub(v, secrets) for v in value]
    if isinstance(value, dict):
        return {
            k: "[redacted]" if isinstance(v, str) and v and _CREDENTIAL_FIELD.fullmatch(str(k)) else scrub(v, secrets)
            for k, v in value.items()
        }
    return value


# -- shadow mode ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Job:
    route: str
    tier: str  # answered the client
    request: dict[str, Any]
    answer: dict[str, Any]
    spec: Shadow
    reference: str
    policy: Policy


class Shadower:
    """Owned by the Router: samples answered calls of routes with a `shadow` option."""

    def __init__(self, settings: Settings, metrics: Metrics, seed: int | None = None) -> None:
        self.settings = settings
        self.metrics = metrics
        self.rng = random.Random(seed)
        self.inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def offer(self, trace: Trace, tier: str, message: Mapping[str, Any]) -> None:
        """On the request path: maybe start one background comparison. Never raises."""
        try:
            self._offer(trace, tier, message)
        except Exception as exc:  # a bug here must never reach the client
            log.warning("shadow: a call was not sampled (%s)", type(exc).__name__)

    def _offer(self, trace: Trace, tier: str, message: Mapping[str, Any]) -> None:
        policy = trace.policy
        spec = next((r.shadow for r in policy.routes if r.name == trace.route), None)
        if spec is None or spec.rate <= 0:
            return
        chain = policy.escalation.chain
        reference = spec.tier or (chain[-1] if chain else None)
        if reference == tier or self.rng.random() >= spec.rate:
            return
        if reference is None:
            return self._drop(trace.route, "no_tier")
        if self.inflight >= self.settings.shadow_max_inflight:
            return self._drop(trace.route, "busy")
        request = dict(trace.call.body)  # the client's request, as it was (repairs pin a copy)
        if isinstance(messages := request.get("messages"), list):
            request["messages"] = list(messages)
        job = _Job(trace.route, tier, request, dict(message), spec, reference, policy)
        self.inflight += 1
        self._idle.clear()
        self.metrics.shadow_inflight.set(self.inflight)
        trace.router.background(self._run(trace.router, job))

    def _drop(self, route: str, reason: str) -> None:
        self.metrics.shadow_dropped.labels(route, reason).inc()

    async def drain(self) -> None:
        """Wait until no comparison is in flight (tests, benchmarks, shutdown)."""
        await self._idle.wait()

    async def _run(self, router: Router, job: _Job) -> None:
        try:
            async with asyncio.timeout(self.settings.shadow_timeout):
                await self._shadow(router, job)
        except TimeoutError:
            self._count(router, job, "error")
        finally:
            self.inflight -= 1
            self.metrics.shadow_inflight.set(self.inflight)
            if not self.inflight:
                self._idle.set()

    async def _shadow(self, router: Router, job: _Job) -> None:
        if len(orjson.dumps(job.request)) > self.settings.shadow_max_sample_bytes:
            return self._drop(job.route, "too_large")
        reference: dict[str, Any] | None = None
        verdict: Comparison | None = None
        if job.spec.mode == "record":
            self.metrics.shadow.labels(job.route, "recorded").inc()
        else:
            deadline = asyncio.get_running_loop().time() + self.settings.shadow_timeout
            try:
                reference = message_of(await router.upstreams[job.reference].complete(job.request, deadline))
                judge = router.upstreams[job.spec.judge or job.reference]
            except (UpstreamError, KeyError) as exc:  # KeyError: a reload removed the tier
                log.info("shadow: tier %s did not answer (%s)", job.reference, type(exc).__name__)
                self._count(router, job, "error")
            else:
                verdict = await compare(judge, job.request, job.answer, reference, deadline, job.spec.max_tokens)
                self._count(router, job, verdict.outcome)
        secrets = job.policy.secrets()
        sample = Sample(
            route=job.route,
            tier=job.tier,
            request=scrub(job.request, secrets),
            answer=scrub(job.answer, secrets),
            reference_tier=job.reference if reference is not None else "",
            reference=scrub(reference, secrets),
            verdict=scrub(verdict.to_json(), secrets) if verdict is not None else None,
        )
        await router.store.samples_put(sample)

    def _count(self, router: Router, job: _Job, outcome: str) -> None:
        router.store.record([Event(job.tier, job.route, kind=f"{SHADOW_PREFIX}{outcome}")])
        self.metrics.shadow.labels(job.route, outcome).inc()
