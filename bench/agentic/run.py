"""Running a configuration: which router it runs against, each task through each loop, one JSONL
line per finished task (so a stopped run resumes where it stopped).

A configuration is a policy (CONFIGS). The router it runs against is one of:

    --base URL            a router already serving that configuration's policy (started by you)
    --tiers FAST:FULL     the tiers' ports (e.g. `./scripts/up`'s llama-servers, 8081:8082, or two
                          fake upstreams): a proxy with the configuration's policy is started in
                          front of them on a free port, and stopped afterwards
    (neither)             the local tiers are started as `up` starts them (router/commands/local.py's
                          local_children: llama.cpp Qwen2.5-Coder-0.5B and -1.5B) with the
                          configuration's policy, and stopped afterwards

Results go to OUT/CONFIG/LOOP.jsonl (OUT: bench/results/agentic, or --out). A task whose line is
there is skipped; a task that could not reach the router at all writes nothing (and three such in a
row stop the run), so it runs again next time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.agentic.env import Environment, Stats
from bench.agentic.loops import LOOPS, Wire, looks_like_text_call, run_loop
from bench.agentic.tasks import Task
from router.mistakes import SIGNS

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "results" / "agentic"
POLICIES = Path(__file__).with_name("policies")
MAX_STEPS = 12  # model calls per task, every loop
TASK_TIMEOUT = 1800.0  # seconds per task (a cold 1.5B prefill of a long file on CPU takes minutes)
INFRA_LIMIT = 3  # tasks in a row that could not reach the router: the run stops
SAMPLED_TIER = "full-resample"  # full's sampled variant (policies/local.yaml): repeats and samples run there
FULL_MODEL = ("full", SAMPLED_TIER)  # the tiers of the 1.5B


@dataclass(frozen=True)
class Config:
    name: str
    policy: Path
    what: str


CONFIGS: dict[str, Config] = {
    c.name: c
    for c in (
        Config("fast-only", POLICIES / "fast-only.yaml", "every call on fast (Qwen2.5-Coder-0.5B), as written"),
        Config("full-only", POLICIES / "full-only.yaml", "every call on full (Qwen2.5-Coder-1.5B), as written"),
        Config("routed", ROOT / "policies" / "local.yaml",
               "policies/local.yaml as is: checks, salvage, repair, escalation to full, sticky sessions"),
        Config("routed-judge", POLICIES / "routed-judge.yaml", "routed + the judge verifier (full judges calls)"),
        Config("routed-score", POLICIES / "routed-score.yaml", "routed + the score verifier (full's logprobs, -0.67)"),
        Config("routed-adaptive", POLICIES / "routed-adaptive.yaml",
               "routed + adaptive routes (a tool fumbled over 25% of the time on fast goes to full)"),
        Config("routed-learned", POLICIES / "routed-learned.yaml",
               "routed + the route learned from the train half: a task's opening turn on full"),
        Config("routed-hedged", POLICIES / "routed-hedged.yaml",
               "routed + a hedge: full raced on every fast call after 0.1 s, the first valid answer kept"),
    )
}  # fmt: skip


def finished(failures: list[str], error: str | None) -> bool:
    """A task succeeds when every check passes and the loop ended with the agent's answer: one cut
    off (a timeout, the step limit, an error) did not finish, whatever state it left."""
    return not failures and error is None


def results_path(out: Path, config: str, loop: str) -> Path:
    return out / config / f"{loop}.jsonl"


def done(path: Path) -> set[str]:
    """Task ids with a line in `path` (a torn last line, from a run killed mid-write, is ignored)."""
    if not path.exists():
        return set()
    ids = set()
    for line in path.read_bytes().splitlines():
        try:
            ids.add(orjson.loads(line)["task"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            continue
    return ids


def append(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as f:
        f.write(orjson.dumps(record) + b"\n")
        f.flush()
        os.fsync(f.fileno())


def mistakes(
    calls: list[dict[str, Any]], stats: Stats, answer: str, error: str | None
) -> tuple[Counter[str], Counter[str]]:
    """(mistakes the router caught — in answers it did not deliver —, mistakes that reached the
    agent), each by kind. Reached, as the router says it: an answer delivered with its mistakes
    (x-router-exhausted: with one attempt, all of them its own), a sign the router only moves on from
    (`repeated_call`, `tool_spray`) in the answer delivered (x-router-signs; in runs from before the
    router said so, in an answer not escalated), an error status the client got (`http_<status>`);
    as the agent's side sees it: malformed calls the tools received (invalid_json,
    bad_arguments, unknown_tool), an unknown tool the SDK refused, a final answer that is a tool
    call written as text. The same mistake is often seen from both sides: per kind, the larger count."""
    caught: Counter[str] = Counter()
    said: Counter[str] = Counter()
    for c in calls:
        if c["status"] >= 400:
            said[f"http_{c['status']}"] += 1
        elif c["exhausted"]:
            said.update(c["mistakes"])
        else:
            kept = c.get("signs")  # delivered as the last tier (or its sample) wrote it
            if kept is None:
                kept = [] if c["escalated"] else [k for k in c["mistakes"] if k in SIGNS]
            said.update(kept)
            caught.update((Counter(c["mistakes"]) - Counter(kept)).elements())
    seen: Counter[str] = Counter(stats.malformed)
    if error and "not found in agent" in error:
        seen["unknown_tool"] += 1
    if looks_like_text_call(answer):
        seen["text_tool_call"] += 1
    reached = Counter({k: max(said[k], seen[k]) for k in said.keys() | seen.keys()})
    return caught, reached


async def run_task(
    task: Task, config: str, loop: str, base: str, *, upstream: str, max_steps: int = MAX_STEPS,
    seconds: float = TASK_TIMEOUT,
) -> tuple[dict[str, Any], bool]:  # fmt: skip
    """One task through one loop: (its record, whether the router was unreachable)."""
    from bench.agentic.checks import failed

    env, wire = Environment(task.tools), Wire()
    session = f"agentic-{config}-{loop}-{task.id}-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    try:
        outcome = await asyncio.wait_for(
            run_loop(loop, task, env, base, wire, session, max_steps=max_steps, http_timeout=seconds), seconds
        )
        answer, error, infra = outcome.answer, outcome.error, outcome.infra
    except TimeoutError:
        answer, error, infra = "", f"Timeout: the task took more than {seconds:.0f} s", False
    elapsed = time.monotonic() - started
    failures = failed(task.checks, env, answer)
    stats = Stats.of(env.log)
    calls = [asdict(c) for c in wire.calls]
    caught, reached = mistakes(calls, stats, answer, error)
    record = {
        "task": task.id, "config": config, "loop": loop, "upstream": upstream, "kinds": list(task.kinds),
        "level": task.level, "ok": finished(failures, error), "failed_checks": failures, "answer": answer[:2000],
        "error": error,
        "seconds": round(elapsed, 3), "steps": sum(1 for c in calls if c["status"] < 400), "calls": calls,
        "tool_calls": stats.calls, "tool_errors": stats.errors, "recovered": stats.recovered,
        "caught": dict(caught), "reached": dict(reached),
        "escalated": sum(c["escalated"] for c in calls), "sticky": sum(c["route"] == "sticky" for c in calls),
        "on_full": sum(c["tier"] in FULL_MODEL for c in calls if c["status"] < 400),
        "tokens": {"input": sum(c["input_tokens"] for c in calls), "output": sum(c["output_tokens"] for c in calls)},
        "changes": env.changes()[:20], "tools_used": [e.tool for e in env.log][:40],
        "session": session, "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }  # fmt: skip
    return record, infra


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def router_for(config: Config, base: str | None, tiers: str | None, logs: Path) -> Iterator[str]:
    """The base URL (no /v1) of a router serving `config`: given, in front of given tiers, or with
    the local tiers started here. What is started here is stopped on the way out."""
    if base:
        yield base.rstrip("/").removesuffix("/v1")
        return
    from router.commands.llama import Child

    port = free_port()
    # nothing kept from one run to the next (a flag: `serve` does not read AGENT_ROUTER_STORE)
    store = ["--store", "memory://"]
    if tiers:
        fast_port, full_port = (int(p) for p in tiers.split(":"))
        argv = [sys.executable, "-m", "router", "serve", "--policy", str(config.policy), "--port", str(port),
                "--log-level", "warning", *store]  # fmt: skip
        env = {
            **os.environ,
            "FAST_API_BASE": f"http://127.0.0.1:{fast_port}/v1",
            "FULL_API_BASE": f"http://127.0.0.1:{full_port}/v1",
        }
        children = [Child("proxy", argv, f"http://127.0.0.1:{port}/healthz", logs / "router.log", env=env)]
    else:  # the local tiers, as `agent-router up` runs them (written for the full runs; not run in CI)
        from router.commands.local import local_children
        from router.commands.models import QWEN25_CODER_0_5B, QWEN25_CODER_1_5B, ensure

        children = list(local_children(
            config.policy, port, free_port(), free_port(),
            fast_model=ensure(QWEN25_CODER_0_5B), full_model=ensure(QWEN25_CODER_1_5B), log_dir=logs,
        ))  # fmt: skip
        children[-1].argv += store  # the proxy
    try:
        for child in children:
            child.start()
        for child in children:
            child.wait_ready(600.0)
        yield f"http://127.0.0.1:{port}"
    finally:
        for child in reversed(children):
            child.stop()


async def router_stats(base: str) -> dict[str, Any] | None:
    """The router's /v1/router/stats, or None (not a router, or it asks for a key we lack)."""
    try:
        async with httpx.AsyncClient(timeout=10.0) as client:
            r = await client.get(f"{base}/v1/router/stats")
        if r.status_code != 200:
            return None
        stats: dict[str, Any] = r.json()
        return stats
    except (httpx.HTTPError, ValueError):
        return None


async def wait_reachable(base: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(timeout=2.0) as client:
        while True:
            try:
                if (await client.get(f"{base}/healthz")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"no router answers at {base}/healthz")
            await asyncio.sleep(0.5)


def loops_of(names: list[str] | None) -> list[str]:
    chosen = names or list(LOOPS)
    unknown = [n for n in chosen if n not in LOOPS]
    if unknown:
        raise ValueError(f"unknown loop(s) {unknown}; loops: {', '.join(LOOPS)}")
    return chosen


async def run_config(
    config: Config, loops: list[str], tasks: list[Task], base: str, out: Path, *, upstream: str,
    max_steps: int = MAX_STEPS, seconds: float = TASK_TIMEOUT, on_done: Any = None,
) -> dict[str, int]:  # fmt: skip
    """Every pending task of `tasks` through every loop against `base`; one JSONL line each.
    `on_done(record)` is called after each. Returns counts: run, skipped, unreachable."""
    await wait_reachable(base)
    counts = {"run": 0, "skipped": 0, "unreachable": 0}
    meta_path = out / config.name / "runs.jsonl"
    in_a_row = 0
    for loop in loops:
        path = results_path(out, config.name, loop)
        finished = done(path)
        pending = [t for t in tasks if t.id not in finished]
        counts["skipped"] += len(tasks) - len(pending)
        before, started = await router_stats(base), time.time()
        for task in pending:
            record, infra = await run_task(
                task, config.name, loop, base, upstream=upstream, max_steps=max_steps, seconds=seconds
            )
            if infra:
                counts["unreachable"] += 1
                in_a_row += 1
                if in_a_row >= INFRA_LIMIT:
                    raise RuntimeError(f"the router at {base} was unreachable for {INFRA_LIMIT} tasks in a row: "
                                       f"{record['error']}")  # fmt: skip
                continue
            in_a_row = 0
            append(path, record)
            counts["run"] += 1
            if on_done is not None:
                on_done(record)
        if pending:  # what this session of the run was: where, when, the router's own counts around it
            append(
                meta_path,
                {
                    "config": config.name,
                    "policy": str(config.policy),
                    "loop": loop,
                    "base": base,
                    "upstream": upstream,
                    "tasks": len(pending),
                    "started": started,
                    "ended": time.time(),
                    "stats_before": before,
                    "stats_after": await router_stats(base),
                },
            )
    return counts
