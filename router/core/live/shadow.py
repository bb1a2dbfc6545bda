"""Shadow mode (a route's `shadow` option) and the answer comparison `agent-router qa` shares.

    routes:
      - name: simple-tool-call
        use: fast
        shadow: {rate: 0.05, tier: full, judge: full}     # mode: judge (default) | record

On the request path (`Attempts.delivered` → `Shadower.offer`) there is a random draw against `rate`,
a check of the in-flight bound and one background task (`Runtime.background`) — nothing that can
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

The comparison itself (`compare`, `Comparison`) is router/core/checks/compare.py's, shared with `agent-router qa`.

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
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from router.core.checks.compare import Comparison, compare, message_of
from router.errors import UpstreamError, redact
from router.policy.model import Policy
from router.policy.route import Shadow
from router.store.base import SHADOW_PREFIX, Event, Sample

if TYPE_CHECKING:
    from router.metrics import Metrics
    from router.settings import Settings
    from router.store import Store
    from router.upstream.base import Tiers

Background = Callable[[Coroutine[Any, Any, Any]], None]  # runs a coroutine off the request path

log = logging.getLogger("router.shadow")

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
    """Samples answered calls of routes with a `shadow` option and compares them in the background:
    the reference tier and judge from `tiers`, samples and counts to `store`."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        store: Store,
        tiers: Tiers,
        background: Background,
        seed: int | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.store = store
        self.tiers = tiers
        self.background = background
        self.rng = random.Random(seed)
        self.inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def offer(
        self, policy: Policy, route: str, body: Mapping[str, Any], tier: str, message: Mapping[str, Any]
    ) -> None:
        """On the request path, for `tier`'s answer `message` to the client's request `body` on
        `route`: maybe start one background comparison. Never raises."""
        try:
            self._offer(policy, route, body, tier, message)
        except Exception as exc:  # a bug here must never reach the client
            log.warning("shadow: a call was not sampled (%s)", type(exc).__name__)

    def _offer(
        self, policy: Policy, route: str, body: Mapping[str, Any], tier: str, message: Mapping[str, Any]
    ) -> None:
        spec = next((r.shadow for r in policy.routes if r.name == route), None)
        if spec is None or spec.rate <= 0:
            return
        chain = policy.escalation.chain
        reference = spec.tier or (chain[-1] if chain else None)
        if reference == tier or self.rng.random() >= spec.rate:
            return
        if reference is None:
            return self._drop(route, "no_tier")
        if self.inflight >= self.settings.shadow_max_inflight:
            return self._drop(route, "busy")
        request = dict(body)  # the client's request, as it was (repairs pin a copy)
        if isinstance(messages := request.get("messages"), list):
            request["messages"] = list(messages)
        job = _Job(route, tier, request, dict(message), spec, reference, policy)
        self.inflight += 1
        self._idle.clear()
        self.metrics.shadow_inflight.set(self.inflight)
        self.background(self._run(job))

    def _drop(self, route: str, reason: str) -> None:
        self.metrics.shadow_dropped.labels(route, reason).inc()

    async def drain(self) -> None:
        """Wait until no comparison is in flight (tests, benchmarks, shutdown)."""
        await self._idle.wait()

    async def _run(self, job: _Job) -> None:
        try:
            async with asyncio.timeout(self.settings.shadow_timeout):
                await self._shadow(job)
        except TimeoutError:
            self._count(job, "error")
        finally:
            self.inflight -= 1
            self.metrics.shadow_inflight.set(self.inflight)
            if not self.inflight:
                self._idle.set()

    async def _shadow(self, job: _Job) -> None:
        if len(orjson.dumps(job.request)) > self.settings.shadow_max_sample_bytes:
            return self._drop(job.route, "too_large")
        reference: dict[str, Any] | None = None
        verdict: Comparison | None = None
        if job.spec.mode == "record":
            self.metrics.shadow.labels(job.route, "recorded").inc()
        else:
            deadline = asyncio.get_running_loop().time() + self.settings.shadow_timeout
            try:
                reference = message_of(await self.tiers[job.reference].complete(job.request, deadline))
                judge = self.tiers[job.spec.judge or job.reference]
            except (UpstreamError, KeyError) as exc:  # KeyError: a reload removed the tier
                log.info("shadow: tier %s did not answer (%s)", job.reference, type(exc).__name__)
                self._count(job, "error")
            else:
                verdict = await compare(judge, job.request, job.answer, reference, deadline, job.spec.max_tokens)
                self._count(job, verdict.outcome)
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
        await self.store.samples_put(sample)

    def _count(self, job: _Job, outcome: str) -> None:
        self.store.record([Event(job.tier, job.route, kind=f"{SHADOW_PREFIX}{outcome}")])
        self.metrics.shadow.labels(job.route, outcome).inc()
