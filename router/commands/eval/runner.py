"""Running the eval: every case sent to an OpenAI base URL, each answer scored, the run summarised.

Run summary: accuracy (correct / cases), false-accept rate (false accepts / cases), escalation
rate (`x-router-escalated: true`), full-tier share (`x-router-tier` equal to `--full-tier`),
latency p50/p95 (client-side, whole call). Headers are absent when talking to a tier directly:
those rates are then null, unless `--assume-tier TIER` names the tier answering.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from router.commands.eval.cases import FALSE_ACCEPTS, OUTCOMES, Case, score
from router.core.checks.compare import first_call


@dataclass
class Result:
    id: str
    outcome: str
    detail: str
    seconds: float
    tier: str | None = None
    escalated: bool | None = None
    mistakes: str = ""
    call: str = ""  # the first call as name(args), shortened


@dataclass
class Run:
    label: str
    url: str
    cases: int = 0
    accuracy: float = 0.0
    false_accept_rate: float = 0.0
    escalation_rate: float | None = None
    full_tier_share: float | None = None
    p50: float = 0.0
    p95: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)
    results: list[Result] = field(default_factory=list)


def request_body(
    case: Case, model: str, max_tokens: int | None, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {**(extra or {}), "model": model, "messages": case.messages}
    if case.tools:
        body["tools"] = case.tools
    if case.tool_choice is not None:
        body["tool_choice"] = case.tool_choice
    if max_tokens:
        body["max_tokens"] = max_tokens
    return body


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summarize(run: Run, full_tier: str) -> Run:
    results = run.results
    n = len(results)
    counts = Counter(r.outcome for r in results)
    run.cases = n
    run.outcomes = {k: counts.get(k, 0) for k in OUTCOMES}
    run.accuracy = counts["correct"] / n if n else 0.0
    run.false_accept_rate = sum(counts[k] for k in FALSE_ACCEPTS) / n if n else 0.0
    with_headers = [r for r in results if r.tier is not None]
    if with_headers:
        run.escalation_rate = sum(bool(r.escalated) for r in with_headers) / len(with_headers)
        run.full_tier_share = sum(r.tier == full_tier for r in with_headers) / len(with_headers)
    else:
        run.escalation_rate = run.full_tier_share = None
    seconds = [r.seconds for r in results if r.outcome != "error"]
    run.p50, run.p95 = percentile(seconds, 0.5), percentile(seconds, 0.95)
    return run


async def run_cases(
    cases: Sequence[Case],
    url: str,
    *,
    label: str,
    model: str = "auto",
    key: str | None = None,
    max_tokens: int | None = 128,
    call_timeout: float = 120.0,
    concurrency: int = 1,
    full_tier: str = "full",
    assume_tier: str | None = None,
    extra: Mapping[str, Any] | None = None,
    on_result: Callable[[Result], None] | None = None,
) -> Run:
    """Send every case to `url` (an OpenAI base URL ending in /v1) and score the answers."""
    import aiohttp

    endpoint = url.rstrip("/") + "/chat/completions"
    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    run = Run(label=label, url=url)
    slots = asyncio.Semaphore(concurrency)

    async def one(session: aiohttp.ClientSession, case: Case) -> Result:
        async with slots:
            started = time.perf_counter()
            message: dict[str, Any] | None = None
            tier = escalated = None
            mistakes = detail = ""
            try:
                body = orjson.dumps(request_body(case, model, max_tokens, extra))
                async with session.post(endpoint, data=body, headers=headers) as resp:
                    raw = await resp.read()
                    tier = resp.headers.get("x-router-tier", assume_tier)
                    if "x-router-escalated" in resp.headers:
                        escalated = resp.headers["x-router-escalated"] == "true"
                    mistakes = resp.headers.get("x-router-mistakes", "")
                    if resp.status == 200:
                        data = orjson.loads(raw)
                        message = data["choices"][0]["message"]
                    else:
                        detail = f"HTTP {resp.status}: {raw[:100].decode('utf-8', 'replace')}"
            except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
                detail = f"{type(exc).__name__}: {exc}"[:120]
            seconds = time.perf_counter() - started
        outcome = score(case, message)
        first = first_call(message) if message is not None else None
        result = Result(
            id=case.id,
            outcome=outcome.kind,
            detail=detail or outcome.detail,
            seconds=round(seconds, 4),
            tier=tier,
            escalated=escalated,
            mistakes=mistakes,
            call=f"{first[0]}({first[1]})"[:160] if first else "",
        )
        if on_result is not None:
            on_result(result)
        return result

    client_timeout = aiohttp.ClientTimeout(total=call_timeout)
    async with aiohttp.ClientSession(timeout=client_timeout) as session:
        run.results = list(await asyncio.gather(*(one(session, c) for c in cases)))
    return summarize(run, full_tier)


def run_with_progress(cases: Sequence[Case], url: str, **kwargs: Any) -> Run:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
    ) as progress:
        task = progress.add_task(str(kwargs.get("label", "eval")), total=len(cases), status="")
        counts: Counter[str] = Counter()

        def advance(r: Result) -> None:
            counts[r.outcome] += 1
            progress.update(task, advance=1, status=f"correct {counts['correct']}")

        return asyncio.run(run_cases(cases, url, on_result=advance, **kwargs))
