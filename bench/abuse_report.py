"""The report of `bench.abuse`: its options, each setup's run, and the markdown written from them."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

from bench.abuse_attacks import WHAT
from bench.abuse_load import CALL_TIMEOUT, Load, Phase

FD_LIMIT = 1024  # the proxy's open-file limit, as in the issue the bench answers
OPENED = "opened:"  # a tier's breaker opened (not a limit: left out of the count per trip)
COLUMNS = "quiet p99 ms (per round) | p99 ms (per round) | x quiet | goal"


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
    rate = success(ph)
    r = ph.p(99) / quiet.p(99)
    return rate, r, rate >= 99 and r <= 2


def success(*phases: Phase) -> float:
    """Legitimate calls that succeeded, % of all started in `phases`."""
    calls = sum(ph.calls for ph in phases)
    return 100 * sum(len(ph.latencies) for ph in phases) / calls if calls else 0.0


@dataclass(frozen=True)
class Verdict:
    """One attack over its rounds: success over all its phases, and the p99 of all its rounds' calls
    against the p99 of all their quiet phases' calls (pooled: a stall of the machine in one phase
    moves a pooled p99 by a third as much as that phase's own); per round, each phase's p99."""

    attack: str
    success: float
    quiet_p99: float  # pooled over the rounds' quiet phases
    attack_p99: float  # pooled over the rounds' attack phases
    quiet99: list[float]  # per round
    attack99: list[float]

    @property
    def ratio(self) -> float:
        return self.attack_p99 / self.quiet_p99

    @property
    def met(self) -> bool:
        return self.success >= 99 and self.ratio <= 2


def verdicts(phases: list[Phase]) -> list[Verdict]:
    """Per attack, in order, from phases that alternate quiet, attack (one pair per round)."""
    pairs: dict[str, list[tuple[Phase, Phase]]] = {}
    for i in range(1, len(phases), 2):
        pairs.setdefault(phases[i].name, []).append((phases[i - 1], phases[i]))
    out = []
    for name, ps in pairs.items():
        quiet, attack = Phase("quiet"), Phase(name)
        for q, a in ps:
            quiet.latencies += q.latencies
            attack.latencies += a.latencies
        per_round = [q.p(99) for q, _ in ps], [a.p(99) for _, a in ps]
        out.append(Verdict(name, success(*(a for _, a in ps)), quiet.p(99), attack.p(99), *per_round))
    return out


@dataclass
class Run:
    """One setup's run: the proxy's capacity (closed loops), the legitimate load, and the phases in
    order — a quiet one before each attack."""

    setup: Setup
    capacity: Phase
    load: Load
    phases: list[Phase]
    calibration: Phase | None = None  # the open loop at load x capacity, whose proxy CPU set the rate


@dataclass(frozen=True)
class Options:
    seconds: float = 8.0
    rounds: int = 3  # quiet + attack pairs per attack
    clients: int = 4  # closed loops: the capacity measurement, and the load with `closed`
    load: float = 0.5  # the open loop: the share of one core the proxy is to use (its rate calibrated)
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
        flags += [f"--seconds {self.seconds:g}", f"--rounds {self.rounds}", f"--clients {self.clients}"]
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
        + (
            f"{opts.rate:g} calls/s"
            if opts.rate
            else f"the rate at which the proxy uses {opts.load:g} of a core (a proxy in production is not run at "
            "100% CPU by its legitimate load). In each setup, the capacity is measured first "
            f"({opts.clients} closed loops for {opts.capacity_seconds:g} s, the calls/s they get through), then "
            f"the open loop runs at {opts.load:g} x that capacity for {opts.capacity_seconds:g} s and its rate is "
            "scaled by the proxy's CPU there: an open loop costs more CPU per call than closed loops, whose "
            "calls share the event loop's wake-ups"
        )
        + f"; at most {opts.max_inflight} in flight (an arrival beyond counts as a failure), each call's latency "
        "from its scheduled start (no coordinated omission)"
    )
    lines = [
        "# Abuse: legitimate calls while the proxy is attacked",
        "",
        f"`{opts.command()}` ({took:.0f} s in all): one `agent-router serve` per setup "
        f"(default settings, SQLite store, open-file limit {FD_LIMIT}) in front of fake upstreams on loopback; "
        f"{how}. Chat calls with a tool, JSON and SSE alternately, keep-alive, {CALL_TIMEOUT:g} s timeout, "
        f"during each attack ({opts.seconds:g} s; the attack starts 3 s before, the agents 1 s before: their first "
        "second, while they open their connections, is not counted) and during a quiet phase as long "
        f"just before it, its reference; {opts.rounds} such rounds per attack, interleaved. Judged per attack: "
        "success over its rounds, and the p99 of all its rounds' calls against the p99 of all their quiet "
        "phases' calls — on this VM a phase now and then holds a stall of every process at once (the "
        "hypervisor's), which decides one phase's p99 but moves a pooled one far less. Goal: ≥ 99% "
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
        "| setup | capacity calls/s (closed loops) | its p99 ms | open loop at that x load: proxy cores "
        "| legitimate load |",
        "|---|---:|---:|---:|---|",
        *(
            f"| {r.setup.name} | {r.capacity.rate():.0f} | {r.capacity.p(99):.1f} | "
            f"{r.calibration.cpu['proxy'] if r.calibration else float('nan'):.2f} | {r.load.text()} |"
            for r in runs
        ),
        "",
        "| attack | "
        + " | ".join(f"{r.setup.name}: success | {COLUMNS}" for r in runs)
        + " |",
        "|---|" + "---:|---:|---:|---:|---|" * len(runs),
    ]
    by_attack = [verdicts(run.phases) for run in runs]
    for i, first in enumerate(by_attack[0]):
        cells = []
        for vs in by_attack:
            v = vs[i]
            quiet, attack = (" / ".join(f"{x:.1f}" for x in xs) for xs in (v.quiet99, v.attack99))
            goal = "PASS" if v.met else "MISS"
            p99s = f"{v.quiet_p99:.1f} ({quiet}) | {v.attack_p99:.1f} ({attack})"
            cells.append(f"{v.success:.2f}% | {p99s} | {v.ratio:.2f} | {goal}")
        lines.append(f"| {first.attack} | " + " | ".join(cells) + " |")
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
            "tripped (the attack runs about 4 s longer than the measurement: an estimate), which does not depend "
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
                rate = success(ph)
            else:
                rate, r, ok = ratio(ph, phases[i - 1])
                judged = f"{r:.2f} | {'PASS' if ok else 'MISS'}"
                cost = c["proxy"] - len(ph.latencies) * phases[i - 1].ms_per_call() / 1000 / ph.wall
                attack = f"{cost:.2f}"
                count = sum(v for k, v in ph.tripped.items() if k != "idle_closed" and not k.startswith(OPENED))
                if count:
                    per_trip = f"{1000 * cost * (ph.wall + 4) / count:.2f}"
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
