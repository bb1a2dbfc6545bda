"""The report of `bench.abuse`: its options, each setup's run, and the markdown written from them."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

from bench.abuse_attacks import WHAT
from bench.abuse_load import CALL_TIMEOUT, Load, Phase

FD_LIMIT = 1024  # the proxy's open-file limit, as in the issue the bench answers
OPENED = "opened:"  # a tier's breaker opened (not a limit: left out of the count per trip)


@dataclass(frozen=True)
class Setup:
    """Where the processes run on the machine's cores, and at what priority."""

    name: str
    proxy_cpus: set[int]
    others_cpus: set[int]  # the bench process (legitimate agents), its attacker, the fakes
    attacker_nice: int  # the attacking process's, and the hostile and hanging fakes'
    text: str


def ratio(ph: Phase, quiet: Phase) -> tuple[float, float, bool]:
    """Success %, p99 / quiet p99, and whether the goal is met."""
    rate = 100 * len(ph.latencies) / ph.calls if ph.calls else 0.0
    r = ph.p(99) / quiet.p(99)
    return rate, r, rate >= 99 and r <= 2


@dataclass
class Run:
    """One setup's run: the proxy's capacity (closed loops), the legitimate load, and the phases in
    order — a quiet one before each attack."""

    setup: Setup
    capacity: Phase
    load: Load
    phases: list[Phase]


@dataclass(frozen=True)
class Options:
    seconds: float = 20.0
    clients: int = 4  # closed loops: the capacity measurement, and the load with `closed`
    load: float = 0.5  # the open loop's rate, as a fraction of the capacity measured
    rate: float = 0.0  # the open loop's rate in calls/s (0: `load` x the capacity)
    closed: bool = False  # the legitimate load as closed loops (the figures before the open loop)
    arrivals: str = "poisson"
    max_inflight: int = 64
    capacity_seconds: float = 5.0
    setup: str | None = None  # one setup only (default: both)
    attacks: tuple[str, ...] = ()  # these attacks only (default: all)
    out: str | None = None  # where the report went, when not the default

    def command(self) -> str:
        flags = [f"--setup {self.setup}"] if self.setup else []
        flags += [f"--attacks {' '.join(self.attacks)}"] if self.attacks else []
        flags += [f"--out {self.out}"] if self.out else []
        flags += [f"--seconds {self.seconds:g}", f"--clients {self.clients}"]
        if not self.closed:
            flags.append(f"--capacity-seconds {self.capacity_seconds:g}")
        if self.closed:
            flags.append("--closed")
        else:
            flags.append(f"--rate {self.rate:g}" if self.rate else f"--load {self.load:g}")
            flags += [f"--arrivals {self.arrivals}", f"--max-inflight {self.max_inflight}"]
        return "python -m bench.abuse " + " ".join(flags)

    def legit(self, capacity: float) -> Load:
        rate = 0.0 if self.closed else self.rate or self.load * capacity
        return Load(self.clients, rate, self.arrivals, self.max_inflight)


def report(runs: list[Run], opts: Options, took: float, load0: str) -> str:
    how = (
        f"{opts.clients} legitimate agents in closed loops (each call right after the last: they load the proxy "
        "as much as it can take, so whatever CPU an attack costs it shows in their latency one for one)"
        if opts.closed
        else "legitimate agents in an open loop: calls start at a fixed rate "
        f"({opts.arrivals} arrivals), whether or not earlier ones have ended, "
        + (f"{opts.rate:g} calls/s" if opts.rate else f"{opts.load:g} x the proxy's capacity")
        + f", at most {opts.max_inflight} in flight (an arrival beyond counts as a failure), each call's latency "
        "from its scheduled start (no coordinated omission). The capacity is measured first in each setup: "
        f"{opts.clients} closed loops for {opts.capacity_seconds:g} s, the calls/s they get through "
        "(a proxy in production is not run at 100% CPU by its legitimate load)"
    )
    lines = [
        "# Abuse: legitimate calls while the proxy is attacked",
        "",
        f"`{opts.command()}` ({took:.0f} s in all): one `agent-router serve` per setup "
        f"(default settings, SQLite store, open-file limit {FD_LIMIT}) in front of fake upstreams on loopback; "
        f"{how}. Chat calls with a tool, JSON and SSE alternately, keep-alive, {CALL_TIMEOUT:g} s timeout, "
        f"during each attack ({opts.seconds:g} s; the attack starts 2 s before) and during "
        "a quiet phase as long just before it, its reference (both p99s rest on as many calls): the "
        "machine's other work changes over minutes, and one quiet phase at the start is a poor reference "
        "for the last attack. Goal: ≥ 99% "
        f"success, p99 ≤ 2 x quiet. {platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} "
        f"cores shared with other work; load average (1, 5, 15 min) {load0} at the start, {load_average()} at the end.",
        "",
        "Every attack runs in each setup, one setup after the other:",
        "",
        *(f"- **{run.setup.name}**: {run.setup.text}" for run in runs),
        "",
        "The attacks, each from a process of its own (bench/abuse_attacks.py):",
        "",
        *(f"- **{name}**: {WHAT[name]}" for name in dict.fromkeys(p.name for p in runs[0].phases if p.name != "quiet")),
        "",
        "| setup | capacity calls/s (closed loops) | its p99 ms | legitimate load |",
        "|---|---:|---:|---|",
        *(f"| {r.setup.name} | {r.capacity.rate():.0f} | {r.capacity.p(99):.1f} | {r.load.text()} |" for r in runs),
        "",
        "| attack | "
        + " | ".join(f"{r.setup.name}: success | quiet p99 ms | p99 ms | x quiet | goal" for r in runs)
        + " |",
        "|---|" + "---:|---:|---:|---:|---|" * len(runs),
    ]
    for i in range(1, len(runs[0].phases), 2):
        cells = []
        for run in runs:
            ph, quiet = run.phases[i], run.phases[i - 1]
            rate, r, ok = ratio(ph, quiet)
            cells.append(f"{rate:.2f}% | {quiet.p(99):.1f} | {ph.p(99):.1f} | {r:.2f} | {'PASS' if ok else 'MISS'}")
        lines.append(f"| {runs[0].phases[i].name} | " + " | ".join(cells) + " |")
    for run in runs:
        setup, phases = run.setup, run.phases
        quiet99 = sorted(ph.p(99) for ph in phases[::2])
        lines += [
            "",
            f"## {setup.name}",
            "",
            f"Quiet p99 from {quiet99[0]:.1f} to {quiet99[-1]:.1f} ms over the run (median "
            f"{quiet99[len(quiet99) // 2]:.1f}).",
            "",
            "| phase | calls | calls/s served | success | p50 ms | p99 ms | p99 / quiet | goal | proxy RSS MiB "
            "| tripped |",
            "|---|---:|---:|---:|---:|---:|---:|---|---:|---|",
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
                f"| {ph.name} | {ph.calls} | {ph.rate():.0f} | {rate:.2f}% | {ph.p(50):.1f} | {ph.p(99):.1f} | "
                f"{judged} | {ph.rss:.0f} | {trips} |"
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


def load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())
