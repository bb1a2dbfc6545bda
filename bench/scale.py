"""Scale-out on one machine: `python -m bench.scale [--n 2] [--seconds 15] [--rounds 2] [--quick]`.

Three set-ups in front of one fake upstream, every one storing its counters in one Redis of our own
(a redis-server on a free port, never the shared one), each under the same load:

  1 process       `serve` (one worker)
  N workers       `serve --workers N`: one port, uvicorn's supervisor
  N replicas      N `serve` processes on N ports, sharing the Redis (the load is split evenly)

Load: `wrk` (Debian's package; one C process, 2 threads, 64 connections in all, keep-alive), time
bounded; each wrk thread is pinned to one target address, so replicas get equal shares. Reported:
calls/s, p50/p90/p99, the router's CPU per call, the cores each part used (routers, fake, Redis,
wrk, other processes), and counted/sent: the calls the shared store counted (read from every
replica: they must agree) against the calls wrk completed and issued (the calls in flight when wrk
stops may or may not reach a router, so counted lies between the two). A second, count-bounded
phase (aiohttp, 1000 calls) checks counted == sent exactly. Without wrk the time-bounded load runs
from aiohttp instead (more CPU per call on the client: noted in the results).

Writes bench/results/scale.md (--quick: a temporary directory).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError

from bench.harness import Cluster, CpuMeter, Proc, StartError, busy_seconds, descendants, free_port, wait_healthy
from bench.load import Result, closed_loop

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
POLICY = ROOT / "bench" / "policies" / "bench.yaml"
BODY = {
    "model": "fake",
    "messages": [
        {"role": "system", "content": "You are a coding agent. Answer briefly."},
        {"role": "user", "content": "Say hello to the benchmark in about a dozen words."},
    ],
    "max_tokens": 64,
}
CONNECTIONS = 64
THREADS = 2
EXACT_CALLS = 1000

WRK_SCRIPT = """\
-- written by bench/scale.py: POST one body; thread i is pinned to target i (mod the targets)
local targets = {%(targets)s}
wrk.method = "POST"
wrk.body = %(body)s
wrk.headers["Content-Type"] = "application/json"
local threads = {}
function setup(thread)
  local n = #threads + 1
  local t = targets[(n - 1) %% #targets + 1]
  thread.addr = wrk.lookup(t[1], t[2])[1]
  table.insert(threads, thread)
end
function init(args) sent = 0 end
function request() sent = sent + 1; return wrk.format() end
function done(summary, latency, requests)
  local issued = 0
  for _, t in ipairs(threads) do issued = issued + t:get("sent") end
  local e = summary.errors
  io.write(string.format("SCALE issued=%%d completed=%%d errors=%%d p50=%%.3f p90=%%.3f p99=%%.3f seconds=%%.3f\\n",
    issued, summary.requests, e.status + e.connect + e.read + e.write + e.timeout,
    latency:percentile(50) / 1000, latency:percentile(90) / 1000, latency:percentile(99) / 1000,
    summary.duration / 1e6))
end
"""


@dataclass(frozen=True)
class Setup:
    key: str
    label: str
    workers: int  # per process
    replicas: int  # processes, one port each


@dataclass
class Measured:
    setup: Setup
    rps: float
    p50: float
    p90: float
    p99: float
    errors: int
    issued: int
    completed: int
    counted: list[int]  # per replica, from its /v1/router/stats
    exact_sent: int
    exact_counted: int
    router_cpu_ms: float  # CPU ms per completed call, all router processes
    cores: dict[str, float]  # part → cores used on average during the timed load


@dataclass
class Run:
    n: int
    seconds: float
    rounds: int
    generator: str
    started: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    results: list[Measured] = field(default_factory=list)


# ------------------------------------------------------------------------------------------ load


async def wrk_load(urls: list[str], seconds: float, script_dir: Path) -> tuple[dict[str, float], float]:
    """wrk against `urls` (thread i → urls[i % len]); its SCALE line as numbers, and its CPU seconds."""
    targets = []
    for url in urls:
        host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
        targets.append(f'{{"{host}", "{port}"}}')
    script = script_dir / "scale.lua"
    body = orjson.dumps(BODY).decode().replace("\\", "\\\\").replace('"', '\\"')
    script.write_text(WRK_SCRIPT % {"targets": ", ".join(targets), "body": f'"{body}"'})
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cmd = ["wrk", "-t", str(THREADS), "-c", str(CONNECTIONS), "-d", f"{seconds:.0f}s", "--timeout", "10s",
           "-s", str(script), urls[0]]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(*cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), seconds + 60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    text = out.decode(errors="replace")
    match = re.search(r"^SCALE (.*)$", text, re.M)
    if proc.returncode != 0 or match is None:
        raise RuntimeError(f"wrk failed ({proc.returncode}):\n{text}")
    values = {k: float(v) for k, v in (kv.split("=") for kv in match.group(1).split())}
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return values, cpu


async def aiohttp_load(urls: list[str], seconds: float) -> tuple[dict[str, float], float]:
    """The same load from aiohttp in this process (when wrk is missing): closed loop, time bounded."""
    t0 = time.process_time()
    payload = orjson.dumps(BODY)
    per = CONNECTIONS // len(urls)

    async def one(url: str) -> Result:
        connector = aiohttp.TCPConnector(limit=per, keepalive_timeout=60)
        async with aiohttp.ClientSession(connector=connector, headers={"content-type": "application/json"}) as s:
            return await closed_loop(s, url, payload, concurrency=per, count=10**9, budget=seconds)

    results = await asyncio.gather(*(one(u) for u in urls))
    latency = sorted(x for r in results for x in r.latency)
    done = sum(r.requests for r in results)
    errors = sum(r.errors for r in results)
    wall = max(r.wall for r in results)

    def p(q: float) -> float:
        return latency[min(len(latency) - 1, round(q / 100 * (len(latency) - 1)))] * 1000 if latency else 0.0

    values = {"issued": done + errors, "completed": done, "errors": errors, "p50": p(50), "p90": p(90),
              "p99": p(99), "seconds": wall}  # fmt: skip
    return values, time.process_time() - t0


async def counted(bases: list[str], settle: float = 1.5, limit: float = 20.0) -> list[int]:
    """Calls counted by the store, read from every replica once the counters stopped moving (each
    process flushes every half second)."""
    deadline = time.monotonic() + limit
    last: list[int] = []
    stable_since = time.monotonic()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s:
        while True:
            now = []
            for base in bases:
                async with s.get(base + "/v1/router/stats") as resp:
                    stats = await resp.json()
                now.append(sum(int(t["calls"]) for t in stats["tiers"].values()))
            if now != last:
                last, stable_since = now, time.monotonic()
            elif time.monotonic() - stable_since >= settle or time.monotonic() > deadline:
                return last
            await asyncio.sleep(0.25)


# ------------------------------------------------------------------------------------------ run


@contextlib.asynccontextmanager
async def routers(
    cluster: Cluster, setup: Setup, redis_url: str, fake_port: int
) -> AsyncIterator[tuple[Proc, list[int]]]:
    """The set-up's `serve` processes and their ports, all in one session (one shell): the kernel's
    autogroup scheduler gives each session one share of the CPU against the machine's other work,
    so N replicas started as N sessions would get N shares where N workers get one."""
    prefix = f"bench-scale-{uuid.uuid4().hex[:8]}:"  # fresh counters for this set-up
    env: dict[str, str | None] = {"BENCH_FAKE_PORT": str(fake_port), "AGENT_ROUTER_STORE_PREFIX": prefix}
    ports = [free_port() for _ in range(setup.replicas)]
    serves = [
        shlex.join([sys.executable, "-m", "router", "serve", "--policy", str(POLICY), "--port", str(port),
                    "--store", redis_url, "--log-level", "warning", "--workers", str(setup.workers)])
        for port in ports
    ]  # fmt: skip
    proc = cluster.start(setup.key, ["bash", "-c", " & ".join(serves) + " & wait"], ports[0], env)
    try:
        for port in ports:
            await wait_healthy(proc, f"http://127.0.0.1:{port}/healthz", 60)
        yield proc, ports
    finally:
        children = descendants(proc.pid)
        cluster.stop(proc)  # SIGTERM to the session: every serve stops gracefully
        await asyncio.to_thread(_gone, children, 20.0)  # before the next set-up is measured


def _gone(pids: list[int], limit: float) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{pid}") for pid in pids):
        time.sleep(0.1)


async def measure(cluster: Cluster, setup: Setup, run: Run, redis: Proc, fake: Proc, work: Path) -> Measured:
    url_of = "http://127.0.0.1:{}/v1/chat/completions".format
    async with routers(cluster, setup, f"redis://127.0.0.1:{redis.port}/0", fake.port) as (proc, ports):
        urls = [url_of(port) for port in ports]
        bases = [f"http://127.0.0.1:{port}" for port in ports]
        load = (lambda s: wrk_load(urls, s, work)) if run.generator == "wrk" else (lambda s: aiohttp_load(urls, s))
        await load(3)  # warm-up: connections, pools, JIT-free Python's caches
        before = await counted(bases)
        busy0 = busy_seconds()
        with CpuMeter([proc, fake, redis]) as meter:
            values, gen_cpu = await load(run.seconds)
        busy = busy_seconds() - busy0
        after = await counted(bases)
        # exactness: a count-bounded phase, every call answered before the count is read
        payload = orjson.dumps(BODY)
        async with aiohttp.ClientSession(headers={"content-type": "application/json"}) as s:
            parts = await asyncio.gather(*(
                closed_loop(s, u, payload, concurrency=8, count=EXACT_CALLS // len(urls), budget=60) for u in urls
            ))  # fmt: skip
        sent = sum(p.requests for p in parts)
        final = await counted(bases)
    wall = values["seconds"]
    router_cpu = meter.used[proc.name]
    completed = int(values["completed"])
    cores = {
        "routers": router_cpu / wall,
        "fake": meter.used[fake.name] / wall,
        "redis": meter.used[redis.name] / wall,
        "load generator": gen_cpu / wall,
        "others": max(0.0, meter.others - (gen_cpu / wall if run.generator == "wrk" else 0.0)),
        "idle": max(0.0, len(os.sched_getaffinity(0)) - busy / wall),
    }
    return Measured(
        setup, completed / wall, values["p50"], values["p90"], values["p99"], int(values["errors"]),
        int(values["issued"]), completed, [a - b for a, b in zip(after, before, strict=True)],
        sent, min(f - a for f, a in zip(final, after, strict=True)), 1000 * router_cpu / max(completed, 1), cores,
    )  # fmt: skip


async def run_all(cluster: Cluster, run: Run, work: Path) -> None:
    redis_port, fake_port = free_port(), free_port()
    redis = cluster.start("redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                                    "--appendonly", "no", "--dir", str(work)], redis_port)  # fmt: skip
    fake = cluster.start("fake", [sys.executable, "-m", "router", "fake-upstream", "--port", str(fake_port),
                                  "--bad-tool-rate", "0"], fake_port)  # fmt: skip
    await wait_healthy(fake, f"http://127.0.0.1:{fake_port}/health", 30)
    client = Redis(port=redis_port, socket_timeout=1)
    try:
        for _ in range(100):
            with contextlib.suppress(RedisError):
                if await client.ping():
                    break
            await asyncio.sleep(0.1)
    finally:
        await client.aclose()
    setups = [
        Setup("one", "1 process", 1, 1),
        Setup("workers", f"{run.n} workers (--workers {run.n})", run.n, 1),
        Setup("replicas", f"{run.n} replicas on one Redis", 1, run.n),
    ]
    for round_ in range(run.rounds):
        for setup in setups:
            m = await measure(cluster, setup, run, redis, fake, work)
            run.results.append(m)
            print(f"round {round_ + 1} {setup.label:<32} {m.rps:7.0f} calls/s  p50 {m.p50:6.2f} ms  p99 {m.p99:6.2f} ms"
                  f"  router CPU {m.router_cpu_ms:.3f} ms/call  counted {m.counted} of {m.completed}..{m.issued}"
                  f"  exact {m.exact_counted}/{m.exact_sent}  errors {m.errors}", flush=True)  # fmt: skip


# --------------------------------------------------------------------------------------- report


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def write(run: Run, path: Path) -> None:
    by: dict[str, list[Measured]] = {}
    for m in run.results:
        by.setdefault(m.setup.key, []).append(m)
    base = _mean([m.rps for m in by["one"]])
    lines = [
        "# Scale-out on one machine: 1 process vs N workers vs N replicas on one Redis",
        "",
        f"`python -m bench.scale --n {run.n} --seconds {run.seconds:.0f} --rounds {run.rounds}` — "
        f"{run.started:%Y-%m-%d %H:%M UTC}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}.",
        "",
        "- the fake upstream (`agent-router fake-upstream`, no delay) and one Redis (own redis-server) behind "
        "every set-up; policy `bench/policies/bench.yaml` (one tier, nothing checked), store `redis://`",
        f"- load: {run.generator}, {CONNECTIONS} connections in all, keep-alive, {run.seconds:.0f} s per set-up "
        "and round after a 3 s warm-up; replicas get equal shares (one wrk thread per replica)"
        + ("" if run.generator == "wrk" else " — aiohttp in the bench process: it needs more CPU per call than wrk"),
        "- **everything runs on the same cores**: the routers compete with the load generator, the fake "
        "upstream and Redis (the `cores` columns say who used what), and with whatever else the machine ran "
        "(`others`); each set-up's `serve` processes run in one session, so the kernel's autogroup "
        "scheduler gives every set-up the same one share of the CPU against that other work",
        "- counted: calls the shared store counted during the timed load, read from every replica (they "
        "agree when state is shared); it lies between the calls wrk completed and issued, since those in "
        "flight when wrk stops may or may not reach a router. exact: a count-bounded phase after it "
        f"({EXACT_CALLS} calls, each answered before the count is read): counted/sent",
        "",
        "| set-up | round | calls/s | ratio to 1 process | p50 ms | p90 ms | p99 ms | errors | router CPU ms/call "
        "| counted (per replica) | completed..issued | exact counted/sent | cores: routers | fake | Redis "
        "| load gen. | others | idle |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key in ("one", "workers", "replicas"):
        for i, m in enumerate(by[key], start=1):
            c = m.cores
            lines.append(
                f"| {m.setup.label} | {i} | {m.rps:.0f} | {m.rps / base:.2f} | {m.p50:.2f} | {m.p90:.2f} | "
                f"{m.p99:.2f} | {m.errors} | {m.router_cpu_ms:.3f} | {', '.join(map(str, m.counted))} | "
                f"{m.completed}..{m.issued} | {m.exact_counted}/{m.exact_sent} | {c['routers']:.2f} | "
                f"{c['fake']:.2f} | {c['redis']:.2f} | {c['load generator']:.2f} | {c['others']:.2f} | "
                f"{c['idle']:.2f} |"
            )
    others = _mean([m.cores["others"] for m in run.results])
    idle = _mean([m.cores["idle"] for m in run.results])
    if idle < 0.1:
        lines += ["", f"**No set-up found idle CPU** (idle {idle:.2f} cores on average) while other work on the "
                  f"machine took {others:.2f} cores: every set-up ran on what that work left, so these ratios do "
                  "not show what N workers or replicas gain — that needs a quiet machine. Per-call CPU and "
                  "counted/sent hold regardless."]  # fmt: skip
    lines += ["", "Mean over the rounds:", "", "| set-up | calls/s | ratio to 1 process | p50 ms | p99 ms |",
              "|---|---:|---:|---:|---:|"]  # fmt: skip
    for key in ("one", "workers", "replicas"):
        ms = by[key]
        rps = _mean([m.rps for m in ms])
        lines.append(f"| {ms[0].setup.label} | {rps:.0f} | {rps / base:.2f} | {_mean([m.p50 for m in ms]):.2f} | "
                     f"{_mean([m.p99 for m in ms]):.2f} |")  # fmt: skip
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2, help="workers / replicas (default 2)")
    parser.add_argument("--seconds", type=float, default=15.0, help="timed load per set-up and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="5 s, one round, results in a temporary directory")
    parser.add_argument("--aiohttp", action="store_true", help="load from aiohttp even when wrk is installed")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.rounds = 5.0, 1
    generator = "wrk" if shutil.which("wrk") and not args.aiohttp else "aiohttp"
    if generator == "aiohttp" and not args.aiohttp:
        print("wrk not found (apt-get install wrk): loading from aiohttp instead", file=sys.stderr)
    if shutil.which("redis-server") is None:
        parser.error("redis-server is needed (apt-get install redis-server)")
    out = Path(tempfile.mkdtemp(prefix="bench-scale-")) if args.quick else RESULTS
    run = Run(args.n, args.seconds, args.rounds, generator)
    signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))
    work = Path(tempfile.mkdtemp(prefix="bench-scale-work-"))
    cluster = Cluster(work)
    try:
        asyncio.run(run_all(cluster, run, work))
    except KeyboardInterrupt:
        print("interrupted: stopping every process", file=sys.stderr)
        return 130
    except StartError as exc:
        print(f"aborted: {exc}\nlogs: {work}", file=sys.stderr)
        return 1
    finally:
        cluster.stop_all()
    write(run, out / "scale.md")
    print(f"wrote {out / 'scale.md'}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
