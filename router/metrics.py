"""Prometheus metrics, in a registry owned by the app (no process-global state).

Counters mirror the stats endpoint (answers and mistakes per tier and route), plus escalations,
one counter per limit (Envoy-style: what was refused, and why), tiers' breakers (open, openings),
and latency histograms per tier and route for time-to-first-token and total time. Also the process's
standard series (`process_*` CPU, memory and descriptors, `python_gc_*` collections, `python_info`);
not under `serve --workers N`, whose exposition sums the workers' counters, which these are not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector

from router.mistakes import AGENT_REPORTED_ERROR

if TYPE_CHECKING:
    from router.store.base import RoutedCall

MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's own: values in per-process files there
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        for standard in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):  # process_*, python_info, python_gc_*
            r.register(standard)
        self.answers = Counter("router_answers", "Upstream answers per tier and route", ["tier", "route"], registry=r)
        self.mistakes = Counter(
            "router_mistakes", "Mistakes per tier, route and kind", ["tier", "route", "kind"], registry=r
        )
        self.calls = Counter(
            "router_calls", "Client calls served, by final tier and route", ["tier", "route", "escalated"], registry=r
        )
        self.refused = Counter("router_refused", "Client calls refused, by limit or reason", ["reason"], registry=r)
        self.exhausted = Counter(
            "router_exhausted",
            "Client calls answered with a retryable error: every attempt failed the checks",
            ["tier", "route"],
            registry=r,
        )
        self.loops_cut = Counter(  # router/upstream/loops.py
            "router_loops_cut",
            "Answers stopped where they went round in a loop, by tier and route",
            ["tier", "route"],
            registry=r,
        )
        self.repeats = Counter(  # router/core/live/repeats.py
            "router_repeats",
            "Repeats of requests whose every attempt failed the checks, by route and outcome: resampled (run "
            "again differently), answered (a resampled run passed), refused (answered at once, not run)",
            ["route", "outcome"],
            registry=r,
        )
        self.cost = Counter(  # router/core/live/ledger.py
            "router_cost_usd",
            "USD the calls cost at their tiers' prices (every attempt), by answering tier and route",
            ["tier", "route"],
            registry=r,
        )
        self.baseline_cost = Counter(
            "router_baseline_cost_usd",
            "USD the same calls would have cost on the baseline tier, by answering tier and route (calls whose "
            "cost or baseline is not known are left out of both)",
            ["tier", "route"],
            registry=r,
        )
        self.samples = Counter(  # router/flow/attempts.py
            "router_samples",
            "Calls that went on sampled on the repeat tier after the greedy last tier's sign or mistake, by "
            "route, after (sign, mistake) and outcome: sampled, answered (the sample's answer delivered), "
            "fell_back (a sign's sample failed: the greedy answer delivered)",
            ["route", "after", "outcome"],
            registry=r,
        )
        self.limits = Counter(  # router/settings.py: the limits against slow, silent and hostile peers
            "router_limits_tripped",
            "Limits that tripped (header_timeout, header_too_large, body_timeout, connections_evicted, "
            "connections_refused, idle_closed, client_gone, upstream_body, upstream_answer, schema_too_costly, "
            "shutdown_cut)",
            ["limit"],
            registry=r,
        )
        self.context_exceeded = Counter(  # router/flow/attempts.py
            "router_context_exceeded",
            "Prompts a tier's context did not take, by tier and outcome (escalated: on to a larger tier; "
            "refused: the client got its context error)",
            ["tier", "outcome"],
            registry=r,
        )
        self.ttft = Histogram(
            "router_ttft_seconds",
            "Time to the first byte sent",
            ["tier", "route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.total = Histogram(
            "router_call_seconds", "Whole call time", ["tier", "route"], buckets=_LATENCY_BUCKETS, registry=r
        )
        self.verdicts = Counter(
            "router_verifier_verdicts",
            "Verifier verdicts by verifier, route and outcome (accept, reject, unsure)",
            ["verifier", "route", "outcome", "cached"],
            registry=r,
        )
        self.verify_seconds = Histogram(
            "router_verifier_seconds",
            "Latency a verifier added to a call",
            ["verifier", "route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.lanes = Counter(
            "router_lanes",
            "Client calls by the lane asked for and outcome (served, standard, capped, refused, busy)",
            ["lane", "outcome"],
            registry=r,
        )
        self.reloads = Counter("router_policy_reloads", "Policy reloads by outcome", ["outcome"], registry=r)
        self.response_state = Counter(  # router/core/live/response_state.py
            "router_response_state",
            "previous_response_id state: lookups by where they were answered, store writes by outcome",
            ["op", "outcome"],
            registry=r,
        )
        # shadow mode (router/core/live/shadow.py)
        self.shadow = Counter(
            "router_shadow",
            "Shadow comparisons per route by outcome (agree, disagree, unsure, error, recorded)",
            ["route", "outcome"],
            registry=r,
        )
        self.shadow_dropped = Counter(
            "router_shadow_dropped",
            "Sampled calls not shadowed, by reason (busy, too_large, no_tier)",
            ["route", "reason"],
            registry=r,
        )
        self.shadow_inflight = Gauge(
            "router_shadow_inflight", "Shadow comparisons in flight", registry=r, multiprocess_mode="livesum"
        )
        self.left_out = Counter(  # router/responses/items.py, router/upstream/responses_tools.py, router/flow/record.py
            "router_left_out",
            "Parts of client requests a chat tier cannot take, left out of what it sees, by API, part and type",
            ["api", "part", "type"],
            registry=r,
        )
        self.tier_open = Gauge(  # router/core/live/breaker.py
            "router_tier_open",
            "1 while a tier's breaker is open or half-open (calls skip it); under workers, how many have it open",
            ["tier"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.tier_openings = Counter(
            "router_tier_openings", "Times a tier's breaker opened (a failed trial call included)", ["tier"], registry=r
        )
        # sessions (router/sessions, router/core/live/warming.py)
        self.prompt_tokens = Counter(
            "router_prompt_tokens",
            "Prompt tokens by tier, as its server counted them: evaluated, or reused from its cache",
            ["tier", "how"],
            registry=r,
        )
        # fast modes (router/upstream/speed.py)
        self.speeds = Counter(
            "router_speeds",
            "Upstream answers by tier and the speed they were served at, in the provider's words (Anthropic's "
            "usage.speed: fast, standard; OpenAI's service_tier: default, priority, ...)",
            ["tier", "speed"],
            registry=r,
        )
        self.fast_mode_fallbacks = Counter(
            "router_fast_mode_fallbacks",
            "Fast-mode requests answered at standard speed instead, by tier and reason (unavailable: refused "
            "for the model or organization; rate_limited: over the fast-mode rate limit)",
            ["tier", "reason"],
            registry=r,
        )
        self.warm_ups = Counter(
            "router_warm_ups",
            "Background prefills of sessions' prompts by tier and outcome (done, cancelled, failed, dropped)",
            ["tier", "outcome"],
            registry=r,
        )
        # the children of the per-call metrics, by their labels (tiers x routes: bounded by the policy)
        self._answers: dict[tuple[str, str], Counter] = {}
        self._calls: dict[tuple[str, str, bool], tuple[Counter, Histogram, Histogram]] = {}
        self._worth: dict[tuple[str, str], tuple[Counter, Counter]] = {}  # (tier, route) → cost, baseline
        self._left_out_seen: set[tuple[str, str]] = set()  # (api, "part:type") counted so far

    def observe_left_out(self, api: str, counts: Mapping[str, int]) -> list[str]:
        """`counts`: "part:type" → how many (tool:web_search, item:tool_search_call, field:thinking,
        ...); the keys counted for the first time (the types are bounded by their callers)."""
        first = []
        for key, n in counts.items():
            part, _, kind = key.partition(":")
            if (api, key) not in self._left_out_seen:
                self._left_out_seen.add((api, key))
                first.append(key)
            self.left_out.labels(api, part, kind).inc(n)
        return first

    def observe_answer(self, tier: str, route: str, answered: bool, kinds: Sequence[str]) -> None:
        if answered:
            if (answers := self._answers.get((tier, route))) is None:
                answers = self._answers[(tier, route)] = self.answers.labels(tier, route)
            answers.inc()
        for kind in kinds:
            self.mistakes.labels(tier, route, kind).inc()

    def observe_verdict(self, verifier: str, route: str, outcome: str, cached: bool, seconds: float) -> None:
        self.verdicts.labels(verifier, route, outcome, "true" if cached else "false").inc()
        self.verify_seconds.labels(verifier, route).observe(seconds)

    def observe_agent_errors(self, calls: Sequence[RoutedCall]) -> None:
        for c in calls:
            self.mistakes.labels(c.tier, c.route, AGENT_REPORTED_ERROR).inc()

    def observe_worth(self, tier: str, route: str, cost: float, baseline: float) -> None:
        if (children := self._worth.get((tier, route))) is None:
            children = (self.cost.labels(tier, route), self.baseline_cost.labels(tier, route))
            self._worth[(tier, route)] = children
        children[0].inc(cost)
        children[1].inc(baseline)

    def observe_call(self, tier: str, route: str, escalated: bool, ttft: float, total: float) -> None:
        key = (tier, route, escalated)
        if (children := self._calls.get(key)) is None:
            flag = "true" if escalated else "false"
            children = self._calls[key] = (
                self.calls.labels(tier, route, flag),
                self.ttft.labels(tier, route),
                self.total.labels(tier, route),
            )
        calls, ttft_seconds, total_seconds = children
        calls.inc()
        ttft_seconds.observe(ttft)
        total_seconds.observe(total)

    def observe_prompt(self, tier: str, evaluated: int, reused: int) -> None:
        self.prompt_tokens.labels(tier, "evaluated").inc(evaluated)
        self.prompt_tokens.labels(tier, "reused").inc(reused)

    def observe_speed(self, tier: str, speed: str, fallback: str | None) -> None:
        self.speeds.labels(tier, speed).inc()
        if fallback:
            self.fast_mode_fallbacks.labels(tier, fallback).inc()

    def observe_warm_up(self, tier: str, outcome: str) -> None:
        self.warm_ups.labels(tier, outcome).inc()

    def tripped(self, limit: str) -> None:
        self.limits.labels(limit).inc()

    def render(self) -> bytes:
        """The exposition; under `serve --workers N` (PROMETHEUS_MULTIPROC_DIR, set by the supervisor)
        the sum over every worker, whichever worker answers the scrape."""
        if path := os.environ.get(MULTIPROCESS_DIR):
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path)  # type: ignore[no-untyped-call]
            return generate_latest(registry)
        return generate_latest(self.registry)
