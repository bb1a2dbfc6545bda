"""Abuse: `python -m bench.abuse [--seconds 8] [--rounds 3] [--load 0.5 | --rate N | --closed] [--out PATH]`.

One `agent-router serve` per setup (default settings, SQLite store, open-file limit 1,024 as in the issue it
answers) in front of four fake upstreams on loopback: `fast` (healthy, checked, escalates to
`full`), `full`, `hostile` (every answer endless: a JSON body, or tool-call arguments, that never
end) and `hanging` (answers after 60 s). Legitimate agents — chat calls with a tool, JSON and SSE
alternately, keep-alive connections, 10 s timeout each (bench/abuse_load.py) — run through each
attack, one at a time, `--seconds` each, and through a quiet phase as long just before it (its
reference), `--rounds` times per attack. The attacks (bench/abuse_attacks.py), each from a process
of its own:

    endless-json     20 calls/s (at most 4 at a time) routed (by a header) to `hostile`, JSON: cut at
                     upstream_max_body_bytes, escalated; after 5 cuts in a row the tier's breaker skips
                     it (10 s, then a trial call, 20 s, ...)
    endless-args     the same, streams whose tool-call arguments never end (tier `hostile-sse`: the same
                     fake, a breaker of its own)
    slow-headers     300 connections sending their headers at 1 byte/s
    silent           1,100 connections that send nothing (more than the open-file limit); with
                     `defer_accept` (on by default) the kernel holds them until they send
    slow-bodies      520 clients sending their body at 1 byte/s
    abandon          50 calls/s to `hanging`, each given up after 0.3 s (paced, as the others)
    hostile-schemas  100 calls/s offering schemas with `^(a+)+$` (checked in linear time) and a pattern
                     too large to compile (400), alternately: paced, so what is measured is what the
                     schemas cost, not a flood of calls (overload, which no content limit can stop)

The legitimate load is an OPEN loop by default: calls start at a fixed rate (Poisson arrivals, or
`--arrivals even`), whether or not earlier ones have ended, and each call's latency runs from its
scheduled start (no coordinated omission); at most `--max-inflight` are open at once. The rate is
the one at which the proxy uses `--load` (default 0.5) of a core: at the start of each setup the
capacity is measured (the calls/s that `--clients` closed loops get through in
`--capacity-seconds`), then the open loop runs at `--load` x that for as long and its rate is scaled
by the proxy's CPU there (closed loops share the event loop's wake-ups: an open loop at half their
rate kept one proxy 60-80% busy); or `--rate` calls/s. A proxy in production is not run at 100% CPU
by its legitimate load; with `--closed`, the agents are
`--clients` closed loops instead (the figures before the open loop): they keep the proxy busy, and
then any CPU an attack costs it shows in their latency one for one.

For each phase: legitimate calls, their success rate, p50 and p99 latency, and p99 against the
quiet phase, plus the proxy's RSS, what tripped (router_limits_tripped, and the tiers' breakers
opened) and the CPU of each process (the proxy, the agents, the attacker, the fakes, everything
else). Per attack (goal: ≥ 99% success, p99 ≤ 2 x quiet): success over its rounds, and the p99 of
all its rounds' calls against that of all their quiet phases' — a stall of the machine now and
then decides one phase's p99, not a pooled one. Every phase runs in two setups (`setups()`):
`shared` (every process on every core, as all figures before) and `apart` (the proxy on a core of
its own, the attacker and hostile fakes niced beside the agents on the other — as if on machines
of their own), each with a proxy of its own (breakers closed). `--profile PY_SPY`
records the proxy in each phase (diagnosis). Bounded in time and count; loopback only. Writes
bench/results/abuse.md (or `--out`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import math
import multiprocessing
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import aiohttp

from bench import abuse_load, profile
from bench.abuse_attacks import ATTACKS, attacker
from bench.abuse_load import Load, Phase
from bench.abuse_report import FD_LIMIT, OPENED, Options, Run, Setup, load_average, report
from bench.harness import Cluster, CpuMeter, Proc, free_port, wait_healthy

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
WARM_UP = 1.0  # seconds of each phase not counted: the legitimate agents open their connections


def policy(ports: dict[str, int], db: Path) -> str:
    tiers = "".join(
        f"  {name}:\n    model: openai/{name}\n    api_base: http://127.0.0.1:{port}/v1\n    warm_connections: 2\n"
        f"    timeouts: {{connect: 2, first_token: 30, total: 60}}\n"
        for name, port in {**ports, "hostile-sse": ports["hostile"]}.items()  # the same fake, a breaker of its own
    )
    return (
        f"version: 1\nmodels:\n{tiers}"
        "routes:\n"
        "  - {name: hostile, when: {headers: {x-attack: endless}}, use: hostile}\n"
        "  - {name: hostile-sse, when: {headers: {x-attack: endless-sse}}, use: hostile-sse}\n"
        "  - {name: hanging, when: {headers: {x-attack: hang}}, use: hanging}\n"
        "  - {name: tools, when: {tools: {present: true}}, use: fast}\n"
        "  - {name: default, use: full}\n"
        "escalation: {to: full, max_attempts: 2}\n"
        f"store: sqlite:///{db}\n"
    )


# -- the run ------------------------------------------------------------------------------------


async def tripped(base: str) -> dict[str, float]:
    async with aiohttp.ClientSession() as s, s.get(base + "/metrics") as r:
        text = await r.text()
    found = {m[0]: float(m[1]) for m in re.findall(r'^router_limits_tripped_total\{limit="(\w+)"\} (\S+)$', text, re.M)}
    opened = re.findall(r'^router_tier_openings_total\{tier="([\w-]+)"\} (\S+)$', text, re.M)
    return found | {f"{OPENED}{m[0]}": float(m[1]) for m in opened}


@dataclass
class Attacker:
    name: str
    pid: int


def setups() -> list[Setup]:
    cpus = sorted(os.sched_getaffinity(0))
    shared = Setup(
        "shared", set(cpus), set(cpus), 0,
        "every process on every core at the same priority (the setup of the figures before this one): the "
        "attacker and the hostile fakes take CPU from the proxy and from the legitimate agents.",
    )  # fmt: skip
    if len(cpus) < 2:
        return [shared]
    apart = Setup(
        "apart", {cpus[0]}, set(cpus[1:]), 10,
        f"the proxy alone on CPU {cpus[0]}; the legitimate agents, the fakes and the attacker on the other "
        f"core{'s' if len(cpus) > 2 else ''}, the attacker and the hostile and hanging fakes at nice 10 — as "
        "if the attacker and the hostile upstreams were on machines of their own. The proxy still receives "
        "and pays for every byte and connection of the attack (`tripped` shows its size); only their own "
        "CPU no longer competes with the proxy's and the legitimate agents'.",
    )  # fmt: skip
    return [shared, apart]


HOSTILE_FAKES = ("hostile", "hanging")


def place(setup: Setup, proxy: Proc, fakes: list[Proc]) -> None:
    """Apply `setup` to the running processes (every thread of each) and to this one."""
    _pin(proxy.pid, setup.proxy_cpus)
    _pin(os.getpid(), setup.others_cpus)
    for fake in fakes:
        _pin(fake.pid, setup.others_cpus)
        if fake.name in HOSTILE_FAKES:
            for tid in _threads(fake.pid):
                os.setpriority(os.PRIO_PROCESS, tid, setup.attacker_nice)


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def _pin(pid: int, cpus: set[int]) -> None:
    for tid in _threads(pid):
        with contextlib.suppress(OSError):  # a thread that just ended
            os.sched_setaffinity(tid, cpus)


async def run_phase(
    name: str,
    setup: Setup,
    base: str,
    load: Load,
    seconds: float,
    proxy: Proc,
    fakes: list[Proc],
    pyspy: Path | None = None,
) -> Phase:
    phase = Phase(name, since=math.inf)
    before = await tripped(base)
    attack = None
    watched: list[Proc | Attacker] = [proxy, *fakes]
    if name in ATTACKS:  # it runs on for a moment after the measurement, so its CPU can be read
        args = (name, base, 2.0 + WARM_UP + seconds + 1.0, setup.attacker_nice)
        attack = multiprocessing.get_context("spawn").Process(target=attacker, args=args)
        attack.start()
        assert attack.pid is not None
        watched.append(Attacker("attacker", attack.pid))
        await asyncio.sleep(2.0)  # the attack is under way before measuring
    done = asyncio.Event()
    gc.collect()
    gc.freeze()  # this process's collections scan only what the phase allocates: no pauses counted as latency
    meter = CpuMeter(watched)  # its scan of /proc before the agents start: it holds this process's loop
    agents = asyncio.create_task(abuse_load.run(base + "/v1/chat/completions", phase, done, load))
    await asyncio.sleep(WARM_UP)
    phase.since = asyncio.get_running_loop().time()
    with meter:
        if pyspy is not None:  # diagnosis only: py-spy's sampling costs CPU too
            raw = Path(tempfile.gettempdir()) / f"abuse-profile-{name}.txt"
            code, err = await profile.record(pyspy, proxy.pid, max(1, int(seconds) - 1), "raw", raw)
            phase.profile = profile.summarize(raw, top=12) if code == 0 else [f"py-spy failed: {err[-300:]}"]
        await asyncio.sleep(seconds - (time.monotonic() - meter.started))
        phase.rss = proxy.rss_mib(tree=False)  # one process (`exec`): no scan of /proc
    done.set()
    await agents
    phase.wall = meter.wall
    used = {k: v / meter.wall for k, v in meter.used.items()}
    phase.cpu = {
        "proxy": used.pop("proxy"),
        "agents": meter.own / meter.wall,
        "attacker": used.pop("attacker", 0.0),
        "fakes": sum(used.values()),
        "others": meter.others,
    }
    if attack is not None:
        await asyncio.to_thread(attack.join, 20)
        if attack.is_alive():
            attack.kill()
    await asyncio.sleep(1.0)
    after = await tripped(base)
    phase.tripped = {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}
    return phase


async def main(opts: Options, pyspy: Path | None = None) -> str:
    load0 = load_average()
    work = Path(tempfile.mkdtemp(prefix="agent-router-abuse-"))
    cluster = Cluster(work)
    ports = {name: free_port() for name in ("fast", "full", "hostile", "hanging")}
    flags = {"fast": [], "full": ["--seed", "2"], "hostile": ["--endless"], "hanging": ["--delay-ms", "60000"]}
    started = time.monotonic()
    fakes = []
    try:
        for name, port in ports.items():
            cmd = [sys.executable, "-m", "router", "fake-upstream", "--port", str(port), *flags[name]]
            fakes.append(fake := cluster.start(name, cmd, port))
            await wait_healthy(fake, f"http://127.0.0.1:{port}/health", 30)
        (work / "policy.yaml").write_text(policy(ports, work / "state.db"))
        runs: list[Run] = []
        for setup in setups() if opts.setup is None else [s for s in setups() if s.name == opts.setup]:
            # a proxy of its own per setup: its breakers start closed (what one setup's attack opened
            # would otherwise still be open, or grown, in the next's)
            port = free_port()
            line = f"{sys.executable} -m router serve --policy {work / 'policy.yaml'} --port {port} --log-level warning"
            serve = f"ulimit -n {FD_LIMIT} && exec {line}"
            proxy = cluster.start("proxy", ["bash", "-c", serve], port, {"AGENT_ROUTER_RELOAD_POLICY": "false"})
            await wait_healthy(proxy, f"http://127.0.0.1:{port}/readyz", 60)
            base = f"http://127.0.0.1:{port}"
            place(setup, proxy, fakes)
            closed = Load(opts.clients)
            capacity = await run_phase("capacity", setup, base, closed, opts.capacity_seconds, proxy, fakes)
            load, calibration = opts.legit(capacity.rate()), None
            if load.open and not opts.rate:  # the rate at which the proxy uses `opts.load` of a core
                calibration = await run_phase("calibration", setup, base, load, opts.capacity_seconds, proxy, fakes)
                load = replace(load, rate=load.rate * opts.load / calibration.cpu["proxy"])
            print(f"{setup.name}: capacity {capacity.rate():.0f} calls/s; legitimate load {load.text()}", flush=True)
            run = Run(setup, capacity, load, [], calibration)
            for attack, _round in itertools.product(opts.attacks or ATTACKS, range(opts.rounds)):
                for name in ("quiet", attack):
                    phase = await run_phase(name, setup, base, load, opts.seconds, proxy, fakes, pyspy)
                    cpu = " ".join(f"{k} {v:.2f}" for k, v in phase.cpu.items())
                    print(f"{setup.name} {name}: {phase.calls} calls, {len(phase.latencies)} ok, "
                          f"p99 {phase.p(99):.1f} ms; cores: {cpu}", flush=True)  # fmt: skip
                    run.phases.append(phase)
            runs.append(run)
            cluster.stop(proxy)
        if pyspy is not None:
            profiles = [f"# py-spy on the proxy during each phase of `{opts.command()}`", ""]
            for run in runs:
                for ph in run.phases:
                    profiles += [f"## {run.setup.name}: {ph.name}", "", *ph.profile, ""]
            (RESULTS / "abuse-profile.md").write_text("\n".join(profiles), encoding="utf-8")
        return report(runs, opts, time.monotonic() - started, load0)
    finally:
        cluster.stop_all()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--seconds", type=float, default=8.0, help="seconds of each attack (and of the quiet phase before it)",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="quiet + attack rounds per attack")
    parser.add_argument("--clients", type=int, default=4, help="closed loops measuring capacity (and with --closed)")
    parser.add_argument("--load", type=float, default=0.5, help="open loop: share of a core the proxy is to use")
    parser.add_argument("--rate", type=float, default=0.0, help="open-loop rate in calls/s (instead of --load)")
    parser.add_argument("--arrivals", choices=("poisson", "even"), default="poisson", help="open-loop arrivals")
    parser.add_argument("--max-inflight", type=int, default=64, help="open loop: calls open at once, at most")
    parser.add_argument("--capacity-seconds", type=float, default=5.0, help="seconds measuring capacity per setup")
    parser.add_argument("--closed", action="store_true", help="the legitimate load as --clients closed loops")
    parser.add_argument(
        "--profile", type=Path, metavar="PY_SPY", help="record the proxy with this py-spy in each phase "
        "(bench/results/abuse-profile.md; diagnosis only: sampling costs CPU)",
    )  # fmt: skip
    parser.add_argument("--setup", choices=("shared", "apart"), help="run one setup only (default: both)")
    parser.add_argument("--attacks", nargs="+", choices=list(ATTACKS), help="these attacks only (default: all)")
    parser.add_argument("--out", type=Path, default=RESULTS / "abuse.md", help="where the report goes")
    args = parser.parse_args()
    default_out = args.out == RESULTS / "abuse.md"
    options = Options(
        seconds=args.seconds, rounds=args.rounds, clients=args.clients, load=args.load, rate=args.rate,
        closed=args.closed, arrivals=args.arrivals, max_inflight=args.max_inflight,
        capacity_seconds=args.capacity_seconds, setup=args.setup, attacks=tuple(args.attacks or ()),
        out=None if default_out else os.path.relpath(args.out, ROOT),
    )  # fmt: skip
    text = asyncio.run(main(options, args.profile))
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
