"""Abuse: `python -m bench.abuse [--seconds 20] [--clients 4]`.

One `agent-router serve` per setup (default settings, SQLite store, open-file limit 1,024 as in the issue it
answers) in front of four fake upstreams on loopback: `fast` (healthy, checked, escalates to
`full`), `full`, `hostile` (every answer endless: a JSON body, or tool-call arguments, that never
end) and `hanging` (answers after 60 s). Legitimate agents — `--clients` closed loops of chat calls
with a tool (JSON and SSE alternately, keep-alive connections, 10 s timeout each) — run through each
attack, one at a time, `--seconds` each, and through a quiet phase of half as long just before it
(its reference):

    endless-json     4 callers routed (by a header) to `hostile`, JSON: cut at upstream_max_body_bytes, escalated;
                     after 5 cuts in a row the tier's breaker skips it (10 s, then a trial call, 20 s, ...)
    endless-args     4 callers, streams whose tool-call arguments never end (tier `hostile-sse`: the same
                     fake, a breaker of its own)
    slow-headers     300 connections sending their headers at 1 byte/s
    silent           1,100 connections that send nothing (more than the open-file limit)
    slow-bodies      520 clients sending their body at 1 byte/s
    abandon          50 callers to `hanging` that give up after 0.3 s, again and again
    hostile-schemas  4 callers offering schemas with `^(a+)+$` and a pattern too large to compile

For each phase: legitimate calls, their success rate, p50 and p99 latency, and p99 against the
quiet phase (goal: ≥ 99% success, p99 ≤ 2 x quiet), plus the proxy's RSS, what tripped
(router_limits_tripped, and the tiers' breakers opened) and the CPU of each process (the proxy,
the agents, the attacker, the fakes, everything else). Every phase runs in two setups
(`setups()`): `shared` (every process on every core, as all figures before) and `apart` (the proxy
on a core of its own, the attacker and hostile fakes niced beside the agents on the other — as if
on machines of their own), each with a proxy of its own (breakers closed). `--profile PY_SPY`
records the proxy in each phase (diagnosis). Bounded in time and count; loopback only. Writes
bench/results/abuse.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import platform
import re
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson

from bench import profile
from bench.harness import Cluster, CpuMeter, Proc, free_port, wait_healthy

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
CALL_TIMEOUT = 10.0
FD_LIMIT = 1024
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]


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


@dataclass
class Phase:
    name: str
    latencies: list[float] = field(default_factory=list)
    failures: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    rss: float = 0.0
    tripped: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)  # cores on average: proxy, agents, attacker, fakes, others
    profile: list[str] = field(default_factory=list)  # markdown (--profile)
    wall: float = 0.0  # seconds measured

    def ms_per_call(self) -> float:
        """The proxy's CPU per legitimate call served (ms)."""
        return 1000 * self.cpu["proxy"] * self.wall / len(self.latencies) if self.latencies else float("nan")

    @property
    def calls(self) -> int:
        return len(self.latencies) + self.failures

    def p(self, q: float) -> float:
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(q / 100 * len(xs)))] * 1000 if xs else float("nan")


async def legit(session: aiohttp.ClientSession, url: str, phase: Phase, stop: asyncio.Event, n: int) -> None:
    """One agent: chat calls with a tool, back to back, JSON and SSE alternately."""
    i = n
    while not stop.is_set():
        i += 1
        body = {"model": "auto", "messages": USER, "tools": [TOOL], "stream": i % 2 == 0}
        start = time.perf_counter()
        try:
            async with session.post(url, json=body) as r:
                raw = await r.read()
            ok = r.status == 200 and (not body["stream"] or raw.rstrip().endswith(b"data: [DONE]"))
            why = f"HTTP {r.status}" if r.status != 200 else "stream without [DONE]"
        except (aiohttp.ClientError, TimeoutError) as exc:
            ok, why = False, type(exc).__name__
        if ok:
            phase.latencies.append(time.perf_counter() - start)
        else:
            phase.failures += 1
            phase.errors[why] = phase.errors.get(why, 0) + 1


# -- attacks: each runs until `stop`, bounded in count --------------------------------------------


async def callers(n: int, stop: asyncio.Event, one: Callable[[aiohttp.ClientSession], Awaitable[None]]) -> None:
    timeout = aiohttp.ClientTimeout(total=CALL_TIMEOUT)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def loop() -> None:
            while not stop.is_set():
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    await one(session)

        await asyncio.gather(*(loop() for _ in range(n)))


def endless(base: str, stream: bool) -> Callable[[asyncio.Event], Awaitable[None]]:
    async def one(session: aiohttp.ClientSession) -> None:
        body = {"model": "auto", "messages": USER, "tools": [TOOL], "stream": stream}
        attack = {"x-attack": "endless-sse" if stream else "endless"}
        async with session.post(base + "/v1/chat/completions", json=body, headers=attack) as r:
            await r.read()

    return lambda stop: callers(4, stop, one)


def abandon(base: str) -> Callable[[asyncio.Event], Awaitable[None]]:
    async def one(session: aiohttp.ClientSession) -> None:
        body = {"model": "auto", "messages": USER}
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.3):
                async with session.post(base + "/v1/chat/completions", json=body, headers={"x-attack": "hang"}) as r:
                    await r.read()

    return lambda stop: callers(50, stop, one)


def hostile_schemas(base: str) -> Callable[[asyncio.Event], Awaitable[None]]:
    patterns = ["^(a+)+$", r"[\w\W]{50000}"]
    count = 0

    async def one(session: aiohttp.ClientSession) -> None:
        nonlocal count
        count += 1
        schema = {"type": "object", "properties": {"city": {"type": "string", "pattern": patterns[count % 2]}}}
        tool = {"type": "function", "function": {"name": "get_weather", "parameters": schema}}
        messages = [{"role": "user", "content": "a" * 30 + "!"}]
        body = {"model": "auto", "messages": messages, "tools": [tool]}
        async with session.post(base + "/v1/chat/completions", json=body) as r:
            await r.read()

    return lambda stop: callers(4, stop, one)


def sockets(base: str, count: int, send: bytes, every: float) -> Callable[[asyncio.Event], Awaitable[None]]:
    """`count` connections, each sending `send` one byte every `every` seconds (nothing if empty),
    reconnecting when the proxy closes them."""
    host, port = base.removeprefix("http://").split(":")

    async def one(stop: asyncio.Event) -> None:
        while not stop.is_set():
            writer = None
            try:
                reader, writer = await asyncio.open_connection(host, int(port))
                for i in range(len(send)) if send else iter(int, 1):
                    if stop.is_set() or reader.at_eof():
                        break
                    if send:
                        writer.write(send[i : i + 1])
                        await writer.drain()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(every):
                            if await reader.read(1024) == b"":
                                break
            except OSError:
                await asyncio.sleep(0.5)
            finally:
                if writer is not None:
                    writer.close()

    async def run(stop: asyncio.Event) -> None:
        tasks = []
        for _ in range(count):
            tasks.append(asyncio.create_task(one(stop)))
            await asyncio.sleep(0.002)  # a ramp, not one burst of SYNs
        await asyncio.gather(*tasks)

    return run


SLOW_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n" + b"x-pad: " + b"a" * 200 + b"\r\n"
SLOW_BODY_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"


def slow_bodies(base: str, count: int) -> Callable[[asyncio.Event], Awaitable[None]]:
    body = orjson.dumps({"model": "auto", "messages": USER}) + b" " * 200
    head = SLOW_BODY_HEAD + b"content-length: %d\r\n\r\n" % len(body)
    host, port = base.removeprefix("http://").split(":")

    async def run(stop: asyncio.Event) -> None:  # the headers at once, then the body at 1 byte/s
        async def one() -> None:
            while not stop.is_set():
                writer = None
                try:
                    reader, writer = await asyncio.open_connection(host, int(port))
                    writer.write(head)
                    for i in range(len(body)):
                        if stop.is_set() or reader.at_eof():
                            break
                        writer.write(body[i : i + 1])
                        await writer.drain()
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(1.0):
                                if await reader.read(1024) == b"":
                                    break
                except OSError:
                    await asyncio.sleep(0.5)
                finally:
                    if writer is not None:
                        writer.close()

        tasks = []
        for _ in range(count):
            tasks.append(asyncio.create_task(one()))
            await asyncio.sleep(0.002)
        await asyncio.gather(*tasks)

    return run


# -- the run ------------------------------------------------------------------------------------


async def tripped(base: str) -> dict[str, float]:
    async with aiohttp.ClientSession() as s, s.get(base + "/metrics") as r:
        text = await r.text()
    found = {m[0]: float(m[1]) for m in re.findall(r'^router_limits_tripped_total\{limit="(\w+)"\} (\S+)$', text, re.M)}
    opened = re.findall(r'^router_tier_openings_total\{tier="([\w-]+)"\} (\S+)$', text, re.M)
    return found | {f"{OPENED}{m[0]}": float(m[1]) for m in opened}


OPENED = "opened:"  # a tier's breaker opened (not a limit: left out of the count per trip)


ATTACKS: dict[str, Callable[[str], Callable[[asyncio.Event], Awaitable[None]]]] = {
    "endless-json": lambda base: endless(base, stream=False),
    "endless-args": lambda base: endless(base, stream=True),
    "slow-headers": lambda base: sockets(base, 300, SLOW_HEAD * 4, 1.0),
    "silent": lambda base: sockets(base, 1100, b"", 1.0),
    "slow-bodies": lambda base: slow_bodies(base, 520),
    "abandon": abandon,
    "hostile-schemas": hostile_schemas,
}


def attacker(name: str, base: str, seconds: float, nice: int) -> None:
    """One attack for `seconds`, in a process of its own (the legitimate agents' loop stays free),
    at `nice` (the CPUs it may use are the bench process's, inherited)."""
    os.nice(nice)

    async def run() -> None:
        stop = asyncio.Event()
        attack = asyncio.create_task(ATTACKS[name](base)(stop))
        await asyncio.sleep(seconds)
        stop.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(15):
                await attack
        attack.cancel()

    asyncio.run(run())


@dataclass
class Attacker:
    name: str
    pid: int


@dataclass(frozen=True)
class Setup:
    """Where the processes run on the machine's cores, and at what priority."""

    name: str
    proxy_cpus: set[int]
    others_cpus: set[int]  # the bench process (legitimate agents), its attacker, the fakes
    attacker_nice: int  # the attacking process's, and the hostile and hanging fakes'
    text: str


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
    clients: int,
    seconds: float,
    proxy: Proc,
    fakes: list[Proc],
    pyspy: Path | None = None,
) -> Phase:
    phase = Phase(name)
    before = await tripped(base)
    attack = None
    watched: list[Proc | Attacker] = [proxy, *fakes]
    if name in ATTACKS:  # it runs on for a moment after the measurement, so its CPU can be read
        args = (name, base, seconds + 3.0, setup.attacker_nice)
        attack = multiprocessing.get_context("spawn").Process(target=attacker, args=args)
        attack.start()
        assert attack.pid is not None
        watched.append(Attacker("attacker", attack.pid))
        await asyncio.sleep(2.0)  # the attack is under way before measuring
    connector = aiohttp.TCPConnector(limit=clients, keepalive_timeout=30)
    timeout = aiohttp.ClientTimeout(total=CALL_TIMEOUT)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        done = asyncio.Event()
        with CpuMeter(watched) as meter:
            agents = [
                asyncio.create_task(legit(session, base + "/v1/chat/completions", phase, done, n))
                for n in range(clients)
            ]
            if pyspy is not None:  # diagnosis only: py-spy's sampling costs CPU too
                raw = Path(tempfile.gettempdir()) / f"abuse-profile-{name}.txt"
                code, err = await profile.record(pyspy, proxy.pid, max(1, int(seconds) - 1), "raw", raw)
                phase.profile = profile.summarize(raw, top=12) if code == 0 else [f"py-spy failed: {err[-300:]}"]
            await asyncio.sleep(seconds - (time.monotonic() - meter.started))
            phase.rss = proxy.rss_mib()
        done.set()
        await asyncio.gather(*agents)
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


def ratio(ph: Phase, quiet: Phase) -> tuple[float, float, bool]:
    """Success %, p99 / quiet p99, and whether the goal is met."""
    rate = 100 * len(ph.latencies) / ph.calls if ph.calls else 0.0
    r = ph.p(99) / quiet.p(99)
    return rate, r, rate >= 99 and r <= 2


def report(runs: list[tuple[Setup, list[Phase]]], seconds: float, clients: int, took: float, load0: str) -> str:
    """`runs`: per setup, its phases in order — a quiet one before each attack."""
    lines = [
        "# Abuse: legitimate calls while the proxy is attacked",
        "",
        f"`python -m bench.abuse --seconds {seconds:g} --clients {clients}` ({took:.0f} s in all): "
        "one `agent-router serve` per setup "
        f"(default settings, SQLite store, open-file limit {FD_LIMIT}) in front of fake upstreams on loopback; "
        f"{clients} legitimate agents (closed loops of chat calls with a tool, JSON and SSE alternately, keep-alive, "
        f"{CALL_TIMEOUT:g} s timeout) during each attack ({seconds:g} s; the attack starts 2 s before) and during "
        f"a quiet phase ({seconds / 2:g} s) just before it, its reference: the machine's other work changes over "
        "minutes, and one quiet phase at the start is a poor reference for the last attack. Goal: ≥ 99% success, "
        f"p99 ≤ 2 x quiet. {platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} cores "
        f"shared with other work; load average (1, 5, 15 min) {load0} at the start, {_load()} at the end.",
        "",
        "Every attack runs in each setup, one setup after the other:",
        "",
        *(f"- **{setup.name}**: {setup.text}" for setup, _ in runs),
        "",
        "| attack | "
        + " | ".join(f"{s.name}: success | quiet p99 ms | p99 ms | x quiet | goal" for s, _ in runs)
        + " |",
        "|---|" + "---:|---:|---:|---:|---|" * len(runs),
    ]
    for i in range(1, len(runs[0][1]), 2):
        cells = []
        for _, phases in runs:
            ph, quiet = phases[i], phases[i - 1]
            rate, r, ok = ratio(ph, quiet)
            cells.append(f"{rate:.2f}% | {quiet.p(99):.1f} | {ph.p(99):.1f} | {r:.2f} | {'PASS' if ok else 'MISS'}")
        lines.append(f"| {runs[0][1][i].name} | " + " | ".join(cells) + " |")
    for setup, phases in runs:
        quiet99 = sorted(ph.p(99) for ph in phases[::2])
        lines += [
            "",
            f"## {setup.name}",
            "",
            f"Quiet p99 from {quiet99[0]:.1f} to {quiet99[-1]:.1f} ms over the run (median "
            f"{quiet99[len(quiet99) // 2]:.1f}).",
            "",
            "| phase | calls | success | p50 ms | p99 ms | p99 / quiet | goal | proxy RSS MiB | tripped |",
            "|---|---:|---:|---:|---:|---:|---|---:|---|",
        ]
        cpu = [
            "",
            "CPU in cores on average: the proxy's own; the legitimate agents' (the bench process); the attacking "
            "process's; the four fakes'; everything else on the machine (other work, and the kernel's loopback "
            "traffic, which no process is charged for). `proxy ms / call`: the proxy's CPU over the legitimate "
            "calls it served; `attack in proxy`: the proxy's CPU less what its legitimate calls cost at the rate "
            "of the quiet phase before — what the attack costs the proxy; `ms / trip`: that cost per limit "
            "tripped (the attack runs about 3 s longer than the measurement: an estimate), which does not depend "
            "on how fast the attacker could go.",
            "",
            "| phase | proxy | agents | attacker | fakes | others | proxy ms / call | attack in proxy | ms / trip |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for i, ph in enumerate(phases):
            c = ph.cpu
            trips = ", ".join(f"{k} {v:.0f}" for k, v in sorted(ph.tripped.items()) if k != "idle_closed") or "—"
            judged, attack, per_trip = "— | —", "—", "—"
            if i % 2 == 0:
                rate = 100 * len(ph.latencies) / ph.calls if ph.calls else 0.0
            else:
                rate, r, ok = ratio(ph, phases[i - 1])
                judged = f"{r:.2f} | {'PASS' if ok else 'MISS'}"
                cost = c["proxy"] - len(ph.latencies) * phases[i - 1].ms_per_call() / 1000 / ph.wall
                attack = f"{cost:.2f}"
                count = sum(v for k, v in ph.tripped.items() if k != "idle_closed" and not k.startswith(OPENED))
                if count:
                    per_trip = f"{1000 * cost * (ph.wall + 3) / count:.2f}"
            lines.append(
                f"| {ph.name} | {ph.calls} | {rate:.2f}% | {ph.p(50):.1f} | {ph.p(99):.1f} | {judged} | "
                f"{ph.rss:.0f} | {trips} |"
            )
            cpu.append(
                f"| {ph.name} | {c['proxy']:.2f} | {c['agents']:.2f} | {c['attacker']:.2f} | {c['fakes']:.2f} | "
                f"{c['others']:.2f} | {ph.ms_per_call():.2f} | {attack} | {per_trip} |"
            )
        lines += cpu
        failed = [f"{ph.name}: {ph.errors}" for ph in phases if ph.errors]
        if failed:
            lines += ["", "Failed legitimate calls by cause: " + "; ".join(failed) + "."]
    lines += [
        "",
        "`tripped`: router_limits_tripped during the phase (idle keep-alive closes left out): how much of the "
        "attack the proxy received and refused; `opened:TIER`: times that tier's breaker opened (after 5 upstream "
        "errors in a row, or a failed trial call), not counted in `ms / trip`.",
    ]
    return "\n".join(lines) + "\n"


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


async def main(
    seconds: float, clients: int, pyspy: Path | None = None, only: str | None = None, attacks: list[str] | None = None
) -> str:
    load0 = _load()
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
        runs: list[tuple[Setup, list[Phase]]] = []
        for setup in setups() if only is None else [s for s in setups() if s.name == only]:
            # a proxy of its own per setup: its breakers start closed (what one setup's attack opened
            # would otherwise still be open, or grown, in the next's)
            port = free_port()
            cmd = f"{sys.executable} -m router serve --policy {work / 'policy.yaml'} --port {port} --log-level warning"
            serve = f"ulimit -n {FD_LIMIT} && exec {cmd}"
            proxy = cluster.start("proxy", ["bash", "-c", serve], port, {"AGENT_ROUTER_RELOAD_POLICY": "false"})
            await wait_healthy(proxy, f"http://127.0.0.1:{port}/readyz", 60)
            base = f"http://127.0.0.1:{port}"
            place(setup, proxy, fakes)
            phases = []
            for attack in attacks or ATTACKS:
                for name, secs in (("quiet", seconds / 2), (attack, seconds)):
                    phase = await run_phase(name, setup, base, clients, secs, proxy, fakes, pyspy)
                    cpu = " ".join(f"{k} {v:.2f}" for k, v in phase.cpu.items())
                    print(f"{setup.name} {name}: {phase.calls} calls, {len(phase.latencies)} ok, "
                          f"p99 {phase.p(99):.1f} ms; cores: {cpu}", flush=True)  # fmt: skip
                    phases.append(phase)
            runs.append((setup, phases))
            cluster.stop(proxy)
        if pyspy is not None:
            text = [f"# py-spy on the proxy during each phase of `python -m bench.abuse --seconds {seconds:g}`", ""]
            for setup, phases in runs:
                for ph in phases:
                    text += [f"## {setup.name}: {ph.name}", "", *ph.profile, ""]
            (RESULTS / "abuse-profile.md").write_text("\n".join(text), encoding="utf-8")
        return report(runs, seconds, clients, time.monotonic() - started, load0)
    finally:
        cluster.stop_all()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds of each phase")
    parser.add_argument("--clients", type=int, default=4, help="legitimate agents (closed loops)")
    parser.add_argument(
        "--profile", type=Path, metavar="PY_SPY", help="record the proxy with this py-spy in each phase "
        "(bench/results/abuse-profile.md; diagnosis only: sampling costs CPU)",
    )  # fmt: skip
    parser.add_argument("--setup", choices=("shared", "apart"), help="run one setup only (default: both)")
    parser.add_argument("--attacks", nargs="+", choices=list(ATTACKS), help="these attacks only (default: all)")
    args = parser.parse_args()
    text = asyncio.run(main(args.seconds, args.clients, args.profile, args.setup, args.attacks))
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "abuse.md").write_text(text, encoding="utf-8")
