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
"Added" = proxy p50 - direct p50. The targets are ratios agent-router : LiteLLM (`verdicts`, in
bench/overhead_report.py, which writes the report; LiteLLM's venv and config: bench/litellm_env.py).
`--candidate NAME=DIR` adds agent-router run from another source tree (a before/after of a change), on
both loads, with a table of its CPU per call against this tree's (the ratio a cut is judged by).
Writes bench/results/overhead.md and overhead.png; `--profile` also records agent-router with
py-spy under the c=16 JSON and c=8 stream loads (bench/results/profile-*.svg, summary in the .md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench import profile
from bench.harness import Cluster, CpuMeter, Proc, StartError, free_port, wait_healthy
from bench.litellm_env import LITELLM_ENV, LITELLM_ENVIRON, ensure_litellm, ensure_pyspy, litellm_config
from bench.load import First, Result, closed_loop
from bench.overhead_model import (
    CHAT,
    DIRECT,
    DIRECT_TOOLS,
    HEADERS,
    IDLE_WARMUP,
    LITELLM,
    NORMAL,
    POLICIES,
    QUICK,
    QUICK_OUT,
    QUIET,
    RESULTS,
    ROOT,
    ROUTER,
    ROUTER_ON,
    TOOL_CHAT,
    TRACED,
    Counts,
    Measured,
    Run,
    Target,
    console,
)
from bench.overhead_report import git_rev, print_summary, verdicts, write_markdown, write_plot


class PhaseTimeout(RuntimeError):
    """A phase overran its hard time limit; the run stops and every process is ended."""


# ----------------------------------------------------------------------------------- processes


def _router_cmd(*args: str) -> list[str]:
    exe = Path(sys.executable).parent / "agent-router"
    return [str(exe), *args] if exe.exists() else [sys.executable, "-m", "router", *args]


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
            cfg = litellm_config(log_dir / "litellm.yaml", fake_port)
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
            "git": git_rev(),
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
