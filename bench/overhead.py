"""Proxy overhead, side by side with LiteLLM's proxy: `python -m bench.overhead [--quick] [--profile]`.

One run, one machine. Starts the fake upstream, agent-router (`bench/policies/bench.yaml`, and with
tools: validation on and off) and LiteLLM's proxy (installed into `bench/.env-litellm/` when
missing), then loads one target at a time while the others idle: the fake directly, each proxy.
Every target gets the same closed-loop load from its own aiohttp session:

  c=1    non-streaming, p50/p99 latency       c=16   non-streaming, req/s and p50
  c=8    streaming, time to the first content delta (or tool-call delta with tools)
  RSS    of the proxy (and its children) idle after 10 requests, and after the load
  CPU    of the proxy per request (user + system, from /proc)

The phases run in rounds, each round going over every target, and the rounds' samples are pooled,
so that a change in the machine's background load touches every target alike.
"Added" = proxy p50 - direct p50. The targets are ratios agent-router : LiteLLM (see `verdicts`).
`--candidate NAME=DIR` adds agent-router run from another source tree (a before/after of a change), on
both loads, with a table of its CPU per call against this tree's (the ratio a cut is judged by).
Writes bench/results/overhead.md and overhead.png; `--profile` also records agent-router with
py-spy under the c=16 JSON and c=8 stream loads (bench/results/profile-*.svg, summary in the .md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import importlib.metadata
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from rich.console import Console
from rich.table import Table

from bench import profile
from bench.harness import Cluster, CpuMeter, Proc, StartError, free_port, wait_healthy
from bench.load import First, Result, closed_loop
from bench.validate import TOOLS

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
POLICIES = BENCH / "policies"
LITELLM_ENV = BENCH / ".env-litellm"
# 1.106.2: the newest release whose `[proxy]` extras resolve from this machine's registry (newer
# ones need a certifi release it does not have). Same pin as pyproject's `litellm` extra.
LITELLM_SPEC = "litellm[proxy]==1.106.2"
LITELLM_VERSION = "1.106.2"
PYSPY_SPEC = "py-spy==0.4.1"

QUICK_OUT = Path(tempfile.gettempdir()) / "bench-overhead-quick"
console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)


class PhaseTimeout(RuntimeError):
    """A phase overran its hard time limit; the run stops and every process is ended."""


# ----------------------------------------------------------------------------------------- config


@dataclass(frozen=True)
class Counts:
    warm: int  # warm-up requests before the c=1 loop (not counted)
    warm_load: int  # warm-up requests before the c=16 and stream loops
    c1: int  # non-streaming at concurrency 1 (all rounds together)
    c16: int  # non-streaming at concurrency 16
    stream: int  # streaming at concurrency 8
    budget: float  # seconds per phase and target (all rounds): a loop stops taking requests once its
    # share is spent (soft); a loop aborts the run after 2x its share + 30 s (hard)
    rounds: int  # every phase runs `rounds` times over all targets, interleaved; samples are pooled
    profile_seconds: int = 10


NORMAL = Counts(warm=200, warm_load=100, c1=2100, c16=5100, stream=1500, budget=45.0, rounds=3)
QUICK = Counts(warm=30, warm_load=30, c1=200, c16=500, stream=200, budget=15.0, rounds=1, profile_seconds=5)
MESSAGES = [
    {"role": "system", "content": "You are a coding agent. Answer briefly."},
    {"role": "user", "content": "Say hello to the benchmark in about a dozen words."},
]
CHAT: dict[str, Any] = {"model": "fake", "messages": MESSAGES, "max_tokens": 64}
TOOL_CHAT: dict[str, Any] = {**CHAT, "tools": TOOLS, "tool_choice": "auto"}
HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-bench-dummy"}
IDLE_WARMUP = 10  # requests before the idle RSS reading


@dataclass(frozen=True)
class Target:
    key: str
    label: str
    tools: bool  # the tool-calling load instead of the plain one


@dataclass
class Measured:
    target: Target
    c1: Result
    c16: Result
    stream: Result
    rss_idle: float | None = None  # MiB
    rss_after: float | None = None
    startup: float | None = None  # seconds until healthy
    cpu_ms: dict[str, float] = field(default_factory=dict)  # phase → CPU ms per request of the subject
    others: dict[str, float] = field(default_factory=dict)  # phase → cores used by unrelated processes


@dataclass
class Run:
    counts: Counts
    started: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    measured: dict[str, Measured] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    profile: list[str] = field(default_factory=list)  # markdown lines
    seconds: float = 0.0
    candidates: list[tuple[Target, Path]] = field(default_factory=list)  # agent-router from other trees, both loads
    out: Path = RESULTS  # where the report, the plot and the flame graphs go
    litellm: bool = True  # --no-litellm: agent-router alone (no comparison, no verdicts, no plot)
    spans: int | None = None  # spans the OTLP sink received from the traced agent-router

    def order(self) -> list[str]:
        """Row order: plain load (direct, LiteLLM, agent-router, traced, candidates), then the tool load
        (direct, agent-router, candidates)."""
        keys = [DIRECT.key, *([LITELLM.key] if self.litellm else []), ROUTER.key, QUIET.key, TRACED.key]
        keys += [t.key for t, _ in self.candidates if not t.tools]
        return [*keys, DIRECT_TOOLS.key, ROUTER_ON.key, *[t.key for t, _ in self.candidates if t.tools]]


# ------------------------------------------------------------------------------------ LiteLLM env


def _env_python() -> Path:
    return LITELLM_ENV / "bin" / "python"


def _installed_version(python: Path, dist: str) -> str | None:
    if not python.exists():
        return None
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60, check=False)
    return out.stdout.strip() if out.returncode == 0 else None


def _pip(args: list[str], what: str, log: Path, timeout: float = 1200) -> None:
    status = console.status(f"[bold]installing {what}[/] into {LITELLM_ENV.relative_to(ROOT)} (log: {log})")
    with status, log.open("ab") as out:
        proc = subprocess.run(
            [str(_env_python()), "-m", "pip", "install", "--disable-pip-version-check", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise SystemExit(f"pip install {' '.join(args)} failed (exit {proc.returncode}):\n{tail}")


def ensure_litellm(log_dir: Path) -> str:
    """Create bench/.env-litellm with LiteLLM's proxy unless the pinned version is already there."""
    have = _installed_version(_env_python(), "litellm")
    if have == LITELLM_VERSION and (LITELLM_ENV / "bin" / "litellm").exists():
        console.print(f"[green]✓[/] LiteLLM {have} found in {LITELLM_ENV.relative_to(ROOT)}")
        return have
    if not _env_python().exists():
        with console.status(f"creating venv {LITELLM_ENV.relative_to(ROOT)}"):
            subprocess.run([sys.executable, "-m", "venv", str(LITELLM_ENV)], check=True, timeout=300)
    started = time.monotonic()
    _pip([LITELLM_SPEC], LITELLM_SPEC, log_dir / "pip-litellm.log")
    have = _installed_version(_env_python(), "litellm") or "?"
    console.print(f"[green]✓[/] installed LiteLLM {have} in {time.monotonic() - started:.0f}s")
    return have


def ensure_pyspy(log_dir: Path) -> Path:
    exe = LITELLM_ENV / "bin" / "py-spy"
    if not exe.exists():
        _pip([PYSPY_SPEC], PYSPY_SPEC, log_dir / "pip-pyspy.log", timeout=600)
    return exe


# ----------------------------------------------------------------------------------- processes


def _router_cmd(*args: str) -> list[str]:
    exe = Path(sys.executable).parent / "agent-router"
    return [str(exe), *args] if exe.exists() else [sys.executable, "-m", "router", *args]


def _litellm_config(path: Path, fake_port: int) -> Path:
    """One model, every optional feature off (no DB, no callbacks, no spend or error logs)."""
    text = f"""\
model_list:
  - model_name: fake
    litellm_params:
      model: openai/fake-model
      api_base: http://127.0.0.1:{fake_port}/v1
      api_key: dummy
litellm_settings:
  telemetry: false
  set_verbose: false
  json_logs: false
  drop_params: true
  turn_off_message_logging: true
  callbacks: []
  success_callback: []
  failure_callback: []
  cache: false
general_settings:
  disable_spend_logs: true
  disable_error_logs: true
  disable_adding_master_key_hash_to_db: true
  allow_requests_on_db_unavailable: true
  background_health_checks: false
  store_model_in_db: false
"""
    path.write_text(text)
    return path


LITELLM_ENVIRON: dict[str, str | None] = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOG": "ERROR",
    "LITELLM_TELEMETRY": "False",
    "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True",
    "DISABLE_SCHEMA_UPDATE": "True",
    "DATABASE_URL": None,  # unset: no database at all
    # no client auth, like agent-router's bench policy (no client_keys); this release refuses to
    # start without a master key unless told so
    "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
    "STORE_MODEL_IN_DB": "False",
    "NO_DOCS": "True",
    "NO_REDOC": "True",
    "TOKENIZERS_PARALLELISM": "false",
}


@contextlib.asynccontextmanager
async def started(
    cluster: Cluster,
    name: str,
    cmd: list[str],
    port: int,
    health: str,
    limit: float,
    env: dict[str, str | None] | None = None,
) -> AsyncIterator[tuple[Proc, float]]:
    with console.status(f"starting {name} on :{port}"):
        proc = cluster.start(name, cmd, port, env)
        took = await wait_healthy(proc, f"http://127.0.0.1:{port}{health}", limit)
    console.print(f"[green]✓[/] {name} healthy on :{port} after {took:.1f}s (pid {proc.pid})")
    try:
        yield proc, took
    finally:
        cluster.stop(proc)


# ---------------------------------------------------------------------------------------- load


def _session(concurrency: int = 16) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=concurrency * 2, limit_per_host=0, keepalive_timeout=60)
    return aiohttp.ClientSession(
        connector=connector, headers=HEADERS, timeout=aiohttp.ClientTimeout(total=30, sock_connect=5)
    )


@dataclass(frozen=True)
class Load:
    """Where the load goes and whose CPU is watched: `subject` (the proxy, or the fake when direct)."""

    session: aiohttp.ClientSession
    url: str
    counts: Counts
    subject: Proc
    watched: list[Proc]


@dataclass(frozen=True)
class Sample:
    """One measured loop: the result, the subject's CPU seconds, the cores other processes used."""

    res: Result
    cpu: float
    others: float

    @staticmethod
    def pooled(parts: list[Sample]) -> tuple[Result, float, float]:
        """(merged result, subject's CPU ms per request, others' cores averaged over the wall time)."""
        res = Result.merge([p.res for p in parts])
        cpu_ms = 1000 * sum(p.cpu for p in parts) / max(res.requests, 1)
        others = sum(p.others * p.res.wall for p in parts) / max(res.wall, 1e-9)
        return res, cpu_ms, others


async def phase(
    name: str,
    load: Load,
    body: dict[str, Any],
    concurrency: int,
    count: int,
    stream: First | None = None,
    warm: int = 0,
) -> Sample:
    """One measured loop of `count` requests (after `warm` unmeasured ones) on one target."""
    session, url, counts = load.session, load.url, load.counts
    payload = orjson.dumps({**body, "stream": True} if stream else body)
    budget = counts.budget / counts.rounds
    hard = budget * 2 + 30

    async def loop(n: int) -> Result:
        return await closed_loop(
            session, url, payload, concurrency=concurrency, count=n, budget=budget, stream=stream
        )

    try:
        async with asyncio.timeout(hard):
            if warm:
                with console.status(f"  {name}: warm-up {warm}"):
                    await loop(warm)
            with console.status(f"  {name}: {count} requests"), CpuMeter(load.watched) as meter:
                res = await loop(count)
    except TimeoutError:
        raise PhaseTimeout(f"{name}: no result within {hard:.0f}s; stopping") from None
    cpu_ms = 1000 * meter.used[load.subject.name] / max(res.requests, 1)
    line = f"  {name:<38} n={res.requests} p50 {res.p(50):.2f} ms  p99 {res.p(99):.2f} ms  {res.rps:.0f} req/s"
    if stream:
        line += f"  first {stream} delta p50 {res.p(50, ttft=True):.2f} ms"
    if res.errors:
        line += f"  [red]{res.errors} errors[/]"
    if res.truncated:
        line += "  [yellow](time budget reached)[/]"
    line += f"  CPU {cpu_ms:.2f} ms/req"
    if meter.others > 0.2:
        line += f"  [yellow]other processes used {meter.others:.1f} cores[/]"
    console.print(line)
    if res.requests == 0:
        raise PhaseTimeout(f"{name}: every request failed ({res.errors} errors)")
    return Sample(res, meter.used[load.subject.name], meter.others)


@dataclass
class Live:
    """A running target: its URL, its process (None for the fake itself) and its client session."""

    target: Target
    url: str
    proc: Proc | None
    load: Load
    startup: float | None
    samples: dict[str, list[Sample]] = field(default_factory=dict)  # phase key → one per round
    rss_idle: float | None = None

    @property
    def body(self) -> dict[str, Any]:
        return TOOL_CHAT if self.target.tools else CHAT

    @property
    def first(self) -> First:
        return "tool_calls" if self.target.tools else "content"


PHASES: list[tuple[str, str, int, bool]] = [  # key, label, concurrency, streaming
    ("c1", "c=1 JSON", 1, False),
    ("c16", "c=16 JSON", 16, False),
    ("stream", "c=8 stream", 8, True),
]


async def idle_rss(live: Live) -> None:
    """Warm a proxy up with a few requests, let it settle, read its RSS."""
    assert live.proc is not None
    warm = await closed_loop(live.load.session, live.url, orjson.dumps(live.body), concurrency=1,
                             count=IDLE_WARMUP, budget=live.load.counts.budget)
    if warm.errors:
        raise StartError(f"{live.target.label}: {warm.errors}/{IDLE_WARMUP} warm-up requests failed:\n"
                         f"{live.proc.log_tail()}")
    await asyncio.sleep(1.0)
    live.rss_idle = live.proc.rss_mib()
    console.print(f"  {live.target.label}: RSS idle (after {IDLE_WARMUP} requests) {live.rss_idle:.1f} MiB")


def measured(live: Live) -> Measured:
    (c1, cpu1, oth1), (c16, cpu16, oth16), (st, cpus, oths) = (Sample.pooled(live.samples[k]) for k, *_ in PHASES)
    return Measured(
        live.target, c1, c16, st,
        rss_idle=live.rss_idle,
        rss_after=live.proc.rss_mib() if live.proc is not None else None,
        startup=live.startup,
        cpu_ms={"c1": cpu1, "c16": cpu16, "stream": cpus},
        others={"c1": oth1, "c16": oth16, "stream": oths},
    )


# ----------------------------------------------------------------------------------- profiling


async def profile_router(
    session: aiohttp.ClientSession, url: str, proc: Proc, counts: Counts, log_dir: Path, run: Run
) -> None:
    """py-spy on agent-router under the c=16 JSON load and the c=8 stream load: SVG flame graphs
    (bench/results/profile-json.svg, profile-stream.svg) and a summary in overhead.md."""
    pyspy = ensure_pyspy(log_dir)
    secs = counts.profile_seconds
    loads: list[tuple[str, str, bytes, int, First | None]] = [
        ("json", "c=16 JSON", orjson.dumps(CHAT), 16, None),
        ("stream", "c=8 stream", orjson.dumps({**CHAT, "stream": True}), 8, "content"),
    ]
    for key, label, payload, concurrency, stream in loads:
        raw = log_dir / f"profile-{key}.raw.txt"
        for fmt, out in (("flamegraph", run.out / f"profile-{key}.svg"), ("raw", raw)):
            with console.status(f"  py-spy ({fmt}) for {secs}s under the {label} load"):
                load = asyncio.create_task(
                    closed_loop(session, url, payload, concurrency=concurrency, count=10**7,
                                budget=float(secs + 1.5), stream=stream)
                )
                await asyncio.sleep(0.5)  # the load is running before py-spy attaches
                try:
                    code, err = await profile.record(pyspy, proc.pid, secs, fmt, out)
                finally:
                    res = await load
            if code != 0:
                console.print(f"[yellow]py-spy failed ({code}): {err[-500:]}[/]")
                run.profile = [f"py-spy failed: `{err.strip()[-300:]}`"]
                return
            console.print(f"  profiled {label} ({fmt}): {res.rps:.0f} req/s while recording → {out}")
        run.profile += [f"### {label} — [flame graph](profile-{key}.svg)", "", *profile.summarize(raw), ""]


# --------------------------------------------------------------------------------------- the run


DIRECT = Target("direct", "direct to the fake", tools=False)
DIRECT_TOOLS = Target("direct-tools", "direct to the fake, tools", tools=True)
ROUTER = Target("agent-router", "agent-router", tools=False)
TRACED = Target("agent-router-traced", "agent-router, OTel traces on", tools=False)
QUIET = Target("agent-router-quiet", "agent-router, access log off", tools=False)
ROUTER_ON = Target("agent-router-validate", "agent-router, tools", tools=True)
LITELLM = Target("litellm", "LiteLLM proxy", tools=False)


async def run_all(cluster: Cluster, counts: Counts, log_dir: Path, run: Run, profile: bool) -> None:
    """Start the fake and every proxy, then run each phase on one target after the other (the
    others idle), so that drifts in the machine's background load touch every target alike."""
    async with contextlib.AsyncExitStack() as stack:
        fake_port = free_port()
        fake_cmd = _router_cmd("fake-upstream", "--port", str(fake_port), "--bad-tool-rate", "0")
        fake, _ = await stack.enter_async_context(started(cluster, "fake upstream", fake_cmd, fake_port, "/health", 30))
        fake_url = f"http://127.0.0.1:{fake_port}/v1/chat/completions"
        lives: list[Live] = []

        async def add(target: Target, url: str, proc: Proc | None, startup: float | None) -> None:
            session = await stack.enter_async_context(_session())
            watched = [fake] if proc is None else [proc, fake]
            lives.append(Live(target, url, proc, Load(session, url, counts, proc or fake, watched), startup))

        await add(DIRECT, fake_url, None, None)
        await add(DIRECT_TOOLS, fake_url, None, None)
        env: dict[str, str | None] = {"BENCH_FAKE_PORT": str(fake_port)}
        # agent-router as it runs by default (an access-log line per request, written to its log file),
        # then without the access log (the log level that also leaves uvicorn's lines out)
        for target, policy, flags in ((ROUTER, "bench.yaml", ()), (QUIET, "bench.yaml", ("--log-level", "warning")),
                                      (ROUTER_ON, "bench-validate.yaml", ())):
            port = free_port()
            cmd = _router_cmd("serve", "--policy", str(POLICIES / policy), "--port", str(port), *flags)
            proc, took = await stack.enter_async_context(started(cluster, target.label, cmd, port, "/healthz", 60, env))
            await add(target, f"http://127.0.0.1:{port}/v1/chat/completions", proc, took)
        # the same as ROUTER, exporting a span per call and one per attempt to an OTLP/HTTP sink
        sink_port = free_port()
        sink_cmd = [sys.executable, "-m", "bench.otlp_sink", "--port", str(sink_port)]
        await stack.enter_async_context(started(cluster, "OTLP sink", sink_cmd, sink_port, "/count", 30))
        port = free_port()
        cmd = _router_cmd("serve", "--policy", str(POLICIES / "bench.yaml"), "--port", str(port),
                          "--log-level", "warning")
        traced_env: dict[str, str | None] = {
            **env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{sink_port}/v1/traces",
            "OTEL_SERVICE_NAME": "bench-overhead", "OTEL_TRACES_EXPORTER": None, "OTEL_SDK_DISABLED": None,
        }  # fmt: skip
        proc, took = await stack.enter_async_context(
            started(cluster, TRACED.label, cmd, port, "/healthz", 60, traced_env)
        )
        await add(TRACED, f"http://127.0.0.1:{port}/v1/chat/completions", proc, took)
        for target, tree in run.candidates:  # as ROUTER / ROUTER_ON, with `router` imported from `tree`
            port = free_port()
            policy = "bench-validate.yaml" if target.tools else "bench.yaml"
            # `python -P -m router`: the console script imports the module path of this tree's CLI,
            # which an older tree may not have; -P keeps the working directory's `router` out of the way
            cmd = [sys.executable, "-P", "-m", "router", "serve", "--policy", str(POLICIES / policy)]
            cmd += ["--port", str(port)]
            cand_env: dict[str, str | None] = {**env, "PYTHONPATH": str(tree)}
            proc, took = await stack.enter_async_context(
                started(cluster, target.label, cmd, port, "/healthz", 60, cand_env)
            )
            await add(target, f"http://127.0.0.1:{port}/v1/chat/completions", proc, took)
        if run.litellm:
            port = free_port()
            cfg = _litellm_config(log_dir / "litellm.yaml", fake_port)
            cmd = [str(LITELLM_ENV / "bin" / "litellm"), "--config", str(cfg), "--host", "127.0.0.1",
                   "--port", str(port), "--num_workers", "1", "--telemetry", "False"]
            proc, took = await stack.enter_async_context(
                started(cluster, LITELLM.label, cmd, port, "/health/liveliness", 180, LITELLM_ENVIRON)
            )
            await add(LITELLM, f"http://127.0.0.1:{port}/v1/chat/completions", proc, took)

        console.rule("[bold]idle")
        for live in lives:
            if live.proc is not None:
                await idle_rss(live)
        for round_ in range(counts.rounds):
            for key, label, concurrency, streaming in PHASES:
                console.rule(f"[bold]{label}" + (f", round {round_ + 1}/{counts.rounds}" if counts.rounds > 1 else ""))
                count = -(-{"c1": counts.c1, "c16": counts.c16, "stream": counts.stream}[key] // counts.rounds)
                warm = 0 if round_ else counts.warm if concurrency == 1 else counts.warm_load
                for live in lives:
                    stream = live.first if streaming else None
                    sample = await phase(live.target.label, live.load, live.body, concurrency, count, stream, warm)
                    live.samples.setdefault(key, []).append(sample)
        for live in lives:
            run.measured[live.target.key] = measured(live)
        traced = next(live for live in lives if live.target is TRACED)
        await asyncio.sleep(6)  # the batch exporter sends every 5 s
        async with traced.load.session.get(f"http://127.0.0.1:{sink_port}/count") as resp:
            run.spans = int((await resp.json())["spans"])
        if profile:
            console.rule("[bold]profile")
            router = next(live for live in lives if live.target is ROUTER)
            assert router.proc is not None
            await profile_router(router.load.session, router.url, router.proc, counts, log_dir, run)


# ------------------------------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class Verdict:
    name: str
    value: float
    target: str
    ok: bool
    detail: str


def verdicts(run: Run, key: str = ROUTER.key) -> list[Verdict]:
    m = run.measured
    d, r, ll = m[DIRECT.key], m[key], m[LITELLM.key]
    added_r = r.c1.p(50) - d.c1.p(50)
    added_l = ll.c1.p(50) - d.c1.p(50)
    ttft_r = r.stream.p(50, True) - d.stream.p(50, True)
    ttft_l = ll.stream.p(50, True) - d.stream.p(50, True)
    out = []

    def ratio(a: float, b: float) -> float:
        return a / b if b > 0 else math.inf

    x = ratio(added_r, added_l)
    out.append(Verdict("added p50 at c=1, agent-router / LiteLLM", x, "≤ 0.1", x <= 0.1,
                       f"{added_r:.2f} ms / {added_l:.2f} ms"))
    x = ratio(r.c16.rps, ll.c16.rps)
    out.append(Verdict("req/s at c=16, agent-router / LiteLLM", x, "≥ 10", x >= 10,
                       f"{r.c16.rps:.0f} / {ll.c16.rps:.0f}"))
    x = ratio(ttft_r, ttft_l)
    out.append(Verdict("added stream TTFT p50 at c=8, agent-router / LiteLLM", x, "≤ 0.05", x <= 0.05,
                       f"{ttft_r:.2f} ms / {ttft_l:.2f} ms"))
    x = ratio(r.rss_idle or 0.0, ll.rss_idle or 0.0)
    out.append(Verdict("idle RSS, agent-router / LiteLLM", x, "≤ 0.5", x <= 0.5,
                       f"{r.rss_idle or 0:.0f} MiB / {ll.rss_idle or 0:.0f} MiB"))
    return out


# --------------------------------------------------------------------------------------- report


def _f(x: float | None, digits: int = 2) -> str:
    if x is None or math.isnan(x):
        return "-"
    return f"{x:.{digits}f}"


def machine() -> str:
    return (f"{os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), "
            f"{platform.system()} {platform.machine()}, Python {platform.python_version()}")


def _others(run: Run) -> str:
    values = [v for m in run.measured.values() for v in m.others.values()]
    if not values:
        return "-"
    return f"{sum(values) / len(values):.2f} cores on average (max {max(values):.2f})"


def _noisy(run: Run) -> str:
    values = [v for m in run.measured.values() for v in m.others.values()]
    if values and sum(values) / len(values) > 0.25:
        return (": **the machine was shared with other work during this run, so latencies are inflated and "
                "noisy; CPU ms/req is the steadier figure**")
    return ""


def _git_rev() -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=False)
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=False)
    except OSError:
        return "?"
    rev = out.stdout.strip() or "?"
    return rev + ("+dirty" if dirty.stdout.strip() else "")


def _rows(run: Run) -> Iterator[list[str]]:
    m = run.measured
    d, dt_ = m[DIRECT.key], m[DIRECT_TOOLS.key]
    for key in run.order():
        x = m[key]
        base = dt_ if x.target.tools else d
        direct = x is base
        added = "" if direct else _f(x.c1.p(50) - base.c1.p(50))
        added_ttft = "" if direct else _f(x.stream.p(50, True) - base.stream.p(50, True))
        first = "tool-call" if x.target.tools else "content"
        yield [
            x.target.label,
            _f(x.c1.p(50)), _f(x.c1.p(99)), added,
            _f(x.c16.rps, 0), _f(x.c16.p(50)), _f(x.cpu_ms.get("c16")),
            f"{_f(x.stream.p(50, True))} ({first})", added_ttft, _f(x.cpu_ms.get("stream")),
            _f(x.rss_idle, 1), _f(x.rss_after, 1),
            str(x.c1.errors + x.c16.errors + x.stream.errors),
        ]


COLUMNS = ["target", "c=1 p50 ms", "c=1 p99 ms", "added p50 ms", "c=16 req/s", "c=16 p50 ms",
           "c=16 CPU ms/req", "c=8 TTFT p50 ms", "added TTFT ms", "c=8 CPU ms/req", "RSS idle MiB",
           "RSS after MiB", "errors"]


def write_markdown(run: Run, vs: list[Verdict], path: Path) -> None:
    c = run.counts
    lines = [
        "# Proxy overhead: agent-router vs LiteLLM's proxy",
        "",
        "`python -m bench.overhead` — one run, one machine; the client, the fake upstream and the proxy "
        "under test share the machine's cores (nothing pinned), one proxy running at a time.",
        "",
        f"- date: {run.started.strftime('%Y-%m-%d %H:%M UTC')}, run took {run.seconds:.0f} s",
        f"- machine: {machine()}",
        f"- agent-router {run.versions.get('agent-router', '?')} (git {run.versions.get('git', '?')}), "
        + (f"LiteLLM {run.versions.get('litellm', '?')} (proxy, `--num_workers 1`, no DB, callbacks off, "
           "`LITELLM_LOCAL_MODEL_COST_MAP=True`), " if run.litellm else "LiteLLM not run (`--no-litellm`), ")
        + f"aiohttp client {run.versions.get('aiohttp', '?')}",
        "- load: closed loop, one aiohttp session per target with keep-alive; measured requests (after "
        f"warm-up: {c.warm} before c=1, {c.warm_load} before the others): c=1: {c.c1}, c=16: {c.c16}, "
        f"streaming c=8: {c.stream}, in {c.rounds} round(s): each round runs every phase on every target "
        "in turn (one target loaded at a time, the others idle) and the samples of all rounds are pooled; "
        f"a target's loops stop early once they took {c.budget:.0f} s per phase (marked *, n below)",
        "- fake upstream: `agent-router fake-upstream --bad-tool-rate 0` (no delay; 12-word text answers, "
        f"or one valid tool call when the request has tools — {len(TOOLS)} tools here)",
        "- TTFT: to the first SSE event whose `choices[0].delta` has non-empty `content` (tool rows: "
        "`tool_calls`), not to the headers. Added = target p50 - direct p50 (same load).",
        "- RSS: VmRSS of the proxy process and its children from /proc; idle = after start-up and "
        f"{IDLE_WARMUP} requests. CPU ms/req: user+system CPU of the proxy (direct rows: of the fake) "
        "per request, during the c=16 JSON and the c=8 stream loops.",
        f"- other processes on the machine used {_others(run)} during the measured loops "
        "(busy time from /proc/stat minus this benchmark's processes)" + _noisy(run) + ".",
        *[f"- candidate {t.label.removeprefix('agent-router candidate ')}: agent-router with `router` imported "
          f"from `{tree}` (another source tree: a before/after), run as the row it is compared with"
          for t, tree in run.candidates if not t.tools],
        "- tools: `bench/policies/bench-validate.yaml` (tools → `fast`, escalation to `full`: answers "
        "checked, streamed tool calls held until valid; every tier is checked, so there is no unchecked row).",
        "- access log: agent-router runs at the default `--log-level info`, one access-log line per request "
        "to its log file, and so do the candidates; `access log off` runs at `--log-level warning` (no "
        "line), as the OTel row does.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(COLUMNS) - 1)) + "|",
    ]
    for key, row in zip(run.order(), _rows(run), strict=True):
        x = run.measured[key]
        if any(r.truncated for r in (x.c1, x.c16, x.stream)):
            row[0] += " *"
        lines.append("| " + " | ".join(row) + " |")
    for key in run.order():
        x = run.measured[key]
        if any(r.truncated for r in (x.c1, x.c16, x.stream)):
            lines.append(f"\n\\* {x.target.label}: measured n = {x.c1.requests} (c=1), {x.c16.requests} (c=16), "
                         f"{x.stream.requests} (stream) within the time budget.")
    calls = sum(r.requests + r.errors for r in (run.measured[TRACED.key].c1, run.measured[TRACED.key].c16,
                                                 run.measured[TRACED.key].stream))
    lines += ["", f"CPU ms/req is CPU-seconds per 1,000 calls. {TRACED.label}: agent-router exporting one span per "
              "call and one per attempt (OTLP/HTTP, the SDK's batch exporter) to a sink process "
              f"(`bench/otlp_sink.py`) — the sink received {run.spans} spans for the {calls} measured calls "
              "(plus warm-ups: 2 spans per call)."]  # fmt: skip
    if vs:
        lines += ["", "## Targets (agent-router : LiteLLM, same run)", "",
                  "| ratio | measured | target | result | from |", "|---|---:|---|---|---|"]
    for v in vs:
        lines.append(f"| {v.name} | {_f(v.value, 3)} | {v.target} | {'PASS' if v.ok else 'MISS'} | {v.detail} |")
    for target, tree in [(t, tree) for t, tree in run.candidates if not t.tools] if vs else []:
        lines.append(f"| *{target.label}* ({tree}) | | | | |")
        for v in verdicts(run, target.key):
            lines.append(f"| *{v.name}* | {_f(v.value, 3)} | {v.target} | {'PASS' if v.ok else 'MISS'} | {v.detail} |")
    lines += before_after(run)
    starts = [f"{run.measured[k].target.label} {_f(run.measured[k].startup, 1)} s"
              for k in (ROUTER.key, LITELLM.key) if k in run.measured and run.measured[k].startup is not None]
    lines += ["", f"Start-up until healthy: {', '.join(starts)}.", ""]
    lines += ["![overhead](overhead.png)", ""] if vs else []
    if run.profile:
        lines += ["## Profile: agent-router under load (py-spy, `--profile`)", "", *run.profile, ""]
    path.write_text("\n".join(lines))


def before_after(run: Run) -> list[str]:
    """Markdown: CPU ms per call of this tree against each candidate tree, load by load (after / before)."""
    out: list[str] = []
    for target, tree in run.candidates:
        mine = run.measured[ROUTER_ON.key if target.tools else ROUTER.key]
        theirs = run.measured[target.key]
        if not out:
            out += ["", "## CPU per call: this tree against the candidates (same run, CPU-seconds per 1,000 calls)", "",
                    "| load | candidate | candidate ms | this tree ms | this tree / candidate |",
                    "|---|---|---:|---:|---:|"]  # fmt: skip
        name = f"{target.label.removeprefix('agent-router candidate ').split(',')[0]} (`{tree}`)"
        for phase, what in (("c16", "c=16 JSON"), ("stream", "c=8 stream")):
            load = f"{what}, {'tools (validation on)' if target.tools else 'plain'}"
            before, after = theirs.cpu_ms.get(phase), mine.cpu_ms.get(phase)
            ratio = after / before if before and after is not None else None
            out.append(f"| {load} | {name} | {_f(before)} | {_f(after)} | {_f(ratio, 3)} |")
    return out


def write_plot(run: Run, vs: list[Verdict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = run.measured
    d, r, ll = m[DIRECT.key], m[ROUTER.key], m[LITELLM.key]
    panels = [
        ("added p50 latency, c=1 (ms)", ll.c1.p(50) - d.c1.p(50), r.c1.p(50) - d.c1.p(50), True),
        ("throughput, c=16 (req/s)", ll.c16.rps, r.c16.rps, True),
        ("added stream TTFT p50, c=8 (ms)", ll.stream.p(50, True) - d.stream.p(50, True),
         r.stream.p(50, True) - d.stream.p(50, True), True),
        ("idle RSS (MiB)", ll.rss_idle or 0.0, r.rss_idle or 0.0, False),
    ]
    fig, axes = plt.subplots(1, 4, figsize=(15, 4.2))
    colors = ["#9e9e9e", "#1f77b4"]
    for ax, (title, lv, rv, log), v in zip(axes, panels, vs, strict=True):
        shown = [max(lv, 1e-2), max(rv, 1e-2)] if log else [lv, rv]
        bars = ax.bar(["LiteLLM", "agent-router"], shown, color=colors)
        if log:
            ax.set_yscale("log")
        for bar, val in zip(bars, (lv, rv), strict=True):
            ax.annotate(f"{val:.3g}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=9)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(f"ratio {v.value:.3g} (target {v.target}): {'PASS' if v.ok else 'MISS'}", fontsize=9,
                      color="green" if v.ok else "red")
        ax.margins(y=0.15)
    fig.suptitle(f"Proxy overhead vs the fake upstream — {run.started:%Y-%m-%d}, {machine()}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_summary(run: Run, vs: list[Verdict]) -> None:
    table = Table(title="overhead (ms unless noted)")
    for col in COLUMNS:
        if col == "target":
            table.add_column(col, no_wrap=True)
        else:
            table.add_column(col, justify="right")
    for row in _rows(run):
        table.add_row(*row)
    console.print(table)
    for v in vs:
        mark = "[green]PASS[/]" if v.ok else "[red]MISS[/]"
        console.print(f"{mark}  {v.name}: {_f(v.value, 3)} (target {v.target}; {v.detail})")
    for target, _ in [(t, tree) for t, tree in run.candidates if not t.tools] if run.litellm else []:
        for v in verdicts(run, target.key):
            mark = "[green]PASS[/]" if v.ok else "[red]MISS[/]"
            console.print(f"  {target.label}: {mark}  {v.name}: {_f(v.value, 3)} ({v.detail})")


# ----------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke run of ~1 minute")
    parser.add_argument(
        "--profile", action="store_true",
        help="py-spy agent-router under the c=16 JSON and c=8 stream loads (flame graphs + summary)",
    )
    parser.add_argument(
        "--out", type=Path, default=None,
        help=f"where overhead.md/.png (and profile-*.svg) go; default {RESULTS.relative_to(ROOT)}, "
        f"with --quick {QUICK_OUT} (a smoke run leaves the committed results alone)",
    )
    parser.add_argument(
        "--no-litellm", action="store_true",
        help="agent-router alone (and its candidates): no LiteLLM install, no ratios, no plot",
    )
    parser.add_argument(
        "--candidate", action="append", default=[], metavar="NAME=DIR",
        help="also measure agent-router with `router` imported from DIR (a copy with a change to try), "
        "interleaved with the others in the same run; repeatable",
    )
    args = parser.parse_args(argv)
    counts = QUICK if args.quick else NORMAL
    run = Run(counts, out=args.out or (QUICK_OUT if args.quick else RESULTS), litellm=not args.no_litellm)
    run.out.mkdir(parents=True, exist_ok=True)
    for item in args.candidate:
        name, sep, tree = item.partition("=")
        if not sep or not (Path(tree) / "router" / "__init__.py").is_file():
            parser.error(f"--candidate {item!r}: expected NAME=DIR with DIR/router/__init__.py")
        run.candidates.append((Target(f"candidate-{name}", f"agent-router candidate {name}", False), Path(tree)))
        label = f"agent-router candidate {name}, tools"
        run.candidates.append((Target(f"candidate-{name}-tools", label, True), Path(tree)))
    # Ctrl-C works even when started with SIGINT ignored (a background job of a script), and
    # SIGTERM takes the same path: asyncio cancels the run, the finally below ends every child.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))
    log_dir = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    cluster = Cluster(log_dir)
    t0 = time.monotonic()
    try:
        run.versions = {
            "litellm": ensure_litellm(log_dir) if run.litellm else "not run",
            "agent-router": importlib.metadata.version("agent-router"),
            "aiohttp": importlib.metadata.version("aiohttp"),
            "git": _git_rev(),
        }
        try:
            import uvloop

            runner: Callable[..., Any] = uvloop.run
        except ImportError:
            runner = asyncio.run
        runner(run_all(cluster, counts, log_dir, run, args.profile))
    except KeyboardInterrupt:
        console.print("[red]interrupted[/]: stopping every process")
        return 130
    except (PhaseTimeout, StartError) as exc:
        console.print(f"[red]aborted:[/] {exc}\nlogs: {log_dir}")
        return 1
    finally:
        cluster.stop_all()
    run.seconds = time.monotonic() - t0
    vs = verdicts(run) if run.litellm else []
    print_summary(run, vs)
    write_markdown(run, vs, run.out / "overhead.md")
    if vs:
        try:
            write_plot(run, vs, run.out / "overhead.png")
        except ImportError:
            console.print("[yellow]no plot: matplotlib is missing (pip install -e '.[report]')[/]")
    console.print(f"wrote {run.out / 'overhead.md'} in {run.seconds:.0f}s")
    shutil.rmtree(log_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
