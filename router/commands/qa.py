"""`agent-router qa`: distillation QA — are a route's answers from the fast tier as good as the full tier's?

    agent-router qa --policy policies/local.yaml --route simple-tool-call --samples 100 --pass-rate 0.9

Where the calls come from: the samples in the store `serve` opens (`--store URL`, else
AGENT_ROUTER_STORE, else the policy's `store:`; Redis keys under AGENT_ROUTER_STORE_PREFIX) — the
SQLite file or Redis a running `agent-router serve` writes for routes with a `shadow` option
(router/core/live/shadow.py). So qa needs no running proxy and sees what every replica kept. A `memory://`
store lives inside the serving process and cannot be read from here: use SQLite (the default) or
Redis when you mean to run qa.

Which tiers answer: the policy's own, called directly through the upstream clients `serve` uses
(router/upstream). For each of a route's newest `--samples` samples:
  * a sample that already holds a verdict (shadow mode `judge`) counts as it is, unless `--rejudge`;
  * otherwise the reference tier answers the sample's request — unless the sample holds that tier's
    answer already — and the judge tier compares the two answers with router/core/live/shadow.py's `compare`
    (the comparison shadow mode makes: correctness, instruction following, safety; a JSON verdict
    with score, pass, reason, difference). The verdict is written back into the sample (redacted),
    and a sample's first verdict is counted in the stats' `shadow` key, so the next run reuses it.
Reference tier: `--tier`, else the route's `shadow.tier`, else the last tier of `escalation.to`.
Judge tier: `--judge`, else the route's `shadow.judge`, else the reference tier.

Per route: samples, judged (passed + failed; `unsure` verdicts and failed reference calls are not
judged), pass rate = passed / judged, mean score, and a recommendation:
  * the sampled tier (e.g. `fast`) when the pass rate is at least `--pass-rate` (default 0.9) over
    at least `--min-samples` (default 20) judged samples: route the route there;
  * the reference tier (e.g. `full`) when it is below;
  * none ("more samples") with fewer judged samples than that.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from router.core.checks.compare import Comparison, compare, message_of
from router.core.live.shadow import scrub
from router.errors import UpstreamError
from router.policy.loader import PolicyError, load_policy
from router.policy.model import Policy
from router.policy.route import Shadow
from router.settings import Settings
from router.store import Event, Store, open_store
from router.store.base import SHADOW_PREFIX, Sample
from router.upstream import Upstreams


@dataclass(frozen=True)
class Options:
    samples: int = 100  # newest samples per route
    pass_rate: float = 0.9
    min_samples: int = 20  # judged samples needed before recommending
    tier: str | None = None  # reference tier override
    judge: str | None = None  # judge tier override
    rejudge: bool = False
    concurrency: int = 4
    timeout: float = 120.0  # seconds per sample (reference answer + verdict)


@dataclass
class RouteReport:
    route: str
    tier: str  # the tier whose answers were sampled
    reference: str
    min_samples: int
    pass_rate_needed: float
    samples: int = 0
    passed: int = 0
    failed: int = 0
    unsure: int = 0
    errors: int = 0
    scores: list[int] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)

    @property
    def judged(self) -> int:
        return self.passed + self.failed

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.judged if self.judged else None

    @property
    def mean_score(self) -> float | None:
        return sum(self.scores) / len(self.scores) if self.scores else None

    @property
    def recommendation(self) -> str | None:
        """The tier to route this route to, or None while fewer than `min_samples` are judged."""
        rate = self.pass_rate
        if rate is None or self.judged < self.min_samples:
            return None
        return self.tier if rate >= self.pass_rate_needed else self.reference

    def add(self, sample: Sample, verdict: Comparison | None) -> None:
        self.samples += 1
        if verdict is None:
            self.errors += 1
            return
        if verdict.unsure:
            self.unsure += 1
            return
        if verdict.score is not None:
            self.scores.append(verdict.score)
        if verdict.passed:
            self.passed += 1
            return
        self.failed += 1
        self.failures.append({"id": sample.id, **verdict.to_json()})

    def to_json(self) -> dict[str, Any]:
        rate, mean = self.pass_rate, self.mean_score
        return {
            "route": self.route,
            "tier": self.tier,
            "reference": self.reference,
            "samples": self.samples,
            "judged": self.judged,
            "passed": self.passed,
            "failed": self.failed,
            "unsure": self.unsure,
            "errors": self.errors,
            "pass_rate": None if rate is None else round(rate, 4),
            "mean_score": None if mean is None else round(mean, 1),
            "recommendation": self.recommendation,
            "failures": self.failures,
        }


class QA:
    def __init__(self, policy: Policy, store: Store, upstreams: Upstreams, options: Options) -> None:
        self.policy, self.store, self.upstreams, self.options = policy, store, upstreams, options
        self._secrets = policy.secrets()

    def _spec(self, route: str) -> Shadow | None:
        return next((r.shadow for r in self.policy.routes if r.name == route), None)

    def tiers(self, route: str) -> tuple[str | None, str | None]:
        """(reference tier, judge tier) of a route."""
        spec = self._spec(route)
        chain = self.policy.escalation.chain
        reference = self.options.tier or (spec.tier if spec else None) or (chain[-1] if chain else None)
        return reference, self.options.judge or (spec.judge if spec else None) or reference

    async def samples(self, route: str, reference: str) -> list[Sample]:
        """The route's newest samples that another tier than `reference` answered."""
        return [s for s in await self.store.samples_get(route, self.options.samples) if s.tier != reference]

    async def route(self, route: str, done: Callable[[], None] = lambda: None) -> RouteReport:
        """Judge the route's samples (`done()` after each one)."""
        reference, judge = self.tiers(route)
        if reference is None or judge is None:
            raise QAError(f"route {route!r}: no reference tier (pass --tier, or set escalation.to)")
        samples = await self.samples(route, reference)
        tier = samples[0].tier if samples else "-"
        report = RouteReport(route, tier, reference, self.options.min_samples, self.options.pass_rate)
        gate = asyncio.Semaphore(self.options.concurrency)

        async def one(sample: Sample) -> tuple[Sample, Comparison | None]:
            async with gate:
                verdict = await self.check(sample, reference, judge)
            done()
            return sample, verdict

        for sample, verdict in await asyncio.gather(*(one(s) for s in samples)):
            report.add(sample, verdict)
        return report

    async def check(self, sample: Sample, reference_tier: str, judge_tier: str) -> Comparison | None:
        """The sample's verdict: the stored one, or a new one (written back). None: no reference answer."""
        if sample.verdict is not None and not self.options.rejudge:
            return Comparison.from_json(sample.verdict)
        deadline = asyncio.get_running_loop().time() + self.options.timeout
        reference = sample.reference if sample.reference_tier == reference_tier else None
        try:
            if reference is None:
                reply = await self.upstreams[reference_tier].complete(dict(sample.request), deadline)
                reference = message_of(reply)
            judge = self.upstreams[judge_tier]
        except (UpstreamError, KeyError):
            return None
        spec = self._spec(sample.route)
        max_tokens = spec.max_tokens if spec else Shadow().max_tokens
        verdict = await compare(judge, sample.request, sample.answer, reference, deadline, max_tokens)
        judged = replace(
            sample,
            reference_tier=reference_tier,
            reference=scrub(reference, self._secrets),
            verdict=scrub(verdict.to_json(), self._secrets),
        )
        await self.store.samples_put(judged)
        if sample.verdict is None:
            self.store.record([Event(sample.tier, sample.route, kind=f"{SHADOW_PREFIX}{verdict.outcome}")])
        return verdict


class QAError(Exception):
    """Why qa cannot run (printed as one line; exit status 1)."""


async def open_samples(policy: Policy, settings: Settings, store_url: str | None) -> Store:
    """The store `serve` would open (`--store`, else AGENT_ROUTER_STORE, else the policy's; Redis
    keys under AGENT_ROUTER_STORE_PREFIX), started and reachable."""
    url = store_url or settings.store or policy.store
    scheme = url.partition("://")[0].lower()
    if scheme == "memory":
        raise QAError("a memory:// store lives inside the serving process: use sqlite or redis to keep samples")
    try:
        redis: dict[str, Any] = {"prefix": settings.store_prefix} if scheme in ("redis", "rediss") else {}
        store = open_store(url, None, **redis)
    except ValueError as exc:
        raise QAError(str(exc)) from None
    await store.start()
    if not (await store.stats())["store"].get("healthy", True):
        await store.close()
        raise QAError(f"the store {store!r} is unreachable")
    return store


async def run(
    policy: Policy, store: Store, routes: Sequence[str], options: Options, console: Console
) -> list[RouteReport]:
    """Judge every route's samples against the policy's tiers, with a progress bar on `console`."""
    upstreams = Upstreams(warm=False)
    await upstreams.apply(policy)
    qa = QA(policy, store, upstreams, options)
    reports = []
    try:
        with Progress(console=console, transient=True) as progress:
            for route in routes:
                task = progress.add_task(route, total=None)
                reports.append(await qa.route(route, functools.partial(progress.advance, task)))
    finally:
        await upstreams.close()
    return reports


async def main(policy_path: Path, store_url: str | None, routes: Sequence[str], options: Options, as_json: bool) -> int:
    """`agent-router qa`: the exit status (1: nothing to check, or qa cannot run)."""
    console = Console(stderr=as_json)
    try:
        settings = Settings(policy=policy_path)  # the process knobs `serve` would read (AGENT_ROUTER_*)
        policy = load_policy(policy_path)
        store = await open_samples(policy, settings, store_url)
    except (PolicyError, QAError, ValidationError) as exc:
        console.print(str(exc), highlight=False, markup=False)
        return 1
    try:
        routes = list(routes) or await store.samples_routes()
        if not routes:
            console.print("no samples in the store: give a route a `shadow` option and serve some calls first")
            return 1
        reports = await run(policy, store, routes, options, console)
    except QAError as exc:
        console.print(str(exc), highlight=False, markup=False)
        return 1
    finally:
        await store.close()  # writes the counters of new verdicts
    if as_json:
        print(orjson.dumps([r.to_json() for r in reports], option=orjson.OPT_INDENT_2).decode())
    else:
        console.print(table(reports))
        print_failures(console, reports)
    return 0 if any(r.samples for r in reports) else 1


def table(reports: Sequence[RouteReport]) -> Table:
    least = reports[0].min_samples if reports else 0
    caption = f"use: the tier to route to (-: fewer than {least} judged); pass: passed / judged"
    t = Table(title="distillation QA: sampled answers vs the reference tier", caption=caption)
    for col in ("route", "tiers", "samples", "judged", "passed", "unsure", "errors", "pass", "score", "use"):
        t.add_column(col, justify="left" if col in ("route", "tiers", "use") else "right")
    for r in reports:
        rate, mean, use = r.pass_rate, r.mean_score, r.recommendation
        style = "" if use is None else "green" if use == r.tier else "red"
        t.add_row(
            r.route,
            f"{r.tier}→{r.reference}",
            *(str(n) for n in (r.samples, r.judged, r.passed, r.unsure, r.errors)),
            "-" if rate is None else f"{rate:.1%}",
            "-" if mean is None else f"{mean:.0f}",
            use or "-",
            style=style,
        )
    return t


def print_failures(console: Console, reports: Sequence[RouteReport], most: int = 5) -> None:
    for r in reports:
        for f in r.failures[:most]:
            detail = f"{f['reason']}" + (f" — differs: {f['difference']}" if f.get("difference") else "")
            console.print(f"[red]✗[/red] {r.route} {f['id'][:8]} score {f['score']}: {detail}", highlight=False)
