"""bench/results/ttft_upstream.md, .json and .png from the measured settings (bench/ttft/upstream.py)."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
from pathlib import Path

from bench.ttft.report import _git_rev
from bench.ttft.run import ROOT
from bench.ttft.upstream import MODES, Session, Setting

RESULTS = ROOT / "bench" / "results"


def per_turn(sessions: list[Session], what: str) -> list[float]:
    """The median over repeats of each turn's `what` (ttft_ms, turn_ms, bytes)."""
    turns = len(getattr(sessions[0], what))
    return [statistics.median(getattr(s, what)[i] for s in sessions) for i in range(turns)]


def _summary(s: Setting) -> list[str]:
    rows = [
        "| upstream way | warm-up ms | TTFT turn 1 ms | TTFT turns 2-N ms (median / worst) | turn ms (median) "
        "| bytes up turn 1 | bytes up turn N | bytes up, session | upstream sockets |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode in MODES:
        runs = s.sessions[mode]
        ttft, sent = per_turn(runs, "ttft_ms"), per_turn(runs, "bytes")
        later = ttft[1:]
        warm = statistics.median(r.warm_ms for r in runs)
        total = statistics.median(sum(r.bytes) + r.warm_bytes for r in runs)
        turn = statistics.median(t for r in runs for t in r.turn_ms)
        sockets = statistics.median(r.sockets for r in runs)
        rows.append(
            f"| {mode} | {warm:.1f} | {ttft[0]:.1f} | {statistics.median(later):.1f} / {max(later):.1f} | {turn:.1f} "
            f"| {sent[0]:,.0f} | {sent[-1]:,.0f} | {total:,.0f} | {sockets:g} |"
        )
    return rows


def _turns(s: Setting) -> list[str]:
    ttft = {m: per_turn(s.sessions[m], "ttft_ms") for m in MODES}
    sent = {m: per_turn(s.sessions[m], "bytes") for m in MODES}
    head = " | ".join(f"{m} TTFT ms" for m in MODES) + " | " + " | ".join(f"{m} bytes" for m in MODES)
    rows = [f"| turn | {head} |", "|---:|" + "---:|" * (2 * len(MODES))]
    for i in range(s.turns):
        cells = [f"{ttft[m][i]:.1f}" for m in MODES] + [f"{sent[m][i]:,.0f}" for m in MODES]
        rows.append(f"| {i + 1} | " + " | ".join(cells) + " |")
    return rows


def _plot(settings: list[Setting], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(settings) + 1, figsize=(5.2 * (len(settings) + 1), 4.4))
    styles = dict(zip(MODES, ("o-", "s-", "^-"), strict=True))
    for ax, s in zip(axes, settings, strict=False):
        turns = list(range(1, s.turns + 1))
        for mode in MODES:
            ax.plot(turns, per_turn(s.sessions[mode], "ttft_ms"), styles[mode], label=mode, markersize=4)
        ax.axhline(s.first_token_ms + s.rtt_ms, color="grey", linestyle="--", linewidth=0.8,
                   label="upstream TTFT + 1 RTT")  # fmt: skip
        ax.set(xlabel="turn", ylabel="TTFT ms (median of repeats)", ylim=(0, None),
               title=f"TTFT per turn, upstream RTT {s.rtt_ms:g} ms")  # fmt: skip
        ax.set_xticks(turns)
        ax.legend(fontsize=8)
    main = settings[0]
    ax = axes[-1]
    for mode in MODES:
        ax.plot(range(1, main.turns + 1), [b / 1024 for b in per_turn(main.sessions[mode], "bytes")], styles[mode],
                label=mode, markersize=4)  # fmt: skip
    ax.set(xlabel="turn", ylabel="KiB sent upstream", ylim=(0, None), title="Bytes sent upstream per turn")
    ax.set_xticks(range(1, main.turns + 1))
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(settings: list[Setting], args: argparse.Namespace, took: float, output_bytes: int, raw: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ttft_upstream.json").write_text(raw)
    main = settings[0]
    others = max(s.others for s in settings)
    lines = [
        "# TTFT and bytes per turn on the router's upstream leg: WebSocket mode vs HTTP keep-alive vs new connections",
        "",
        f"`python -m bench.ttft.upstream{' --quick' if args.quick else ''}` — one run, one machine"
        + (f", run took {took:.0f} s." if not args.from_json else "; report re-written from ttft_upstream.json."),
        "",
        f"- date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; git {_git_rev()}",
        f"- machine: {os.cpu_count()} CPUs, {platform.system()} {platform.machine()}, Python "
        f"{platform.python_version()}; other processes used up to {others:.2f} cores on average while measuring",
        "- path: agent (thin `websockets` client, loopback, the router's WebSocket mode) → router (`agent-router "
        "serve`) → emulated WAN (bench/ttft/wan.py, a user-space relay: RTT/2 each way, one RTT more before a "
        "connection's first bytes for the TCP handshake) → fake upstream over TLS 1.3 (bench/ttft/upstream_fake.py, "
        f"self-signed EC P-256) answering one `read_file` call after {main.first_token_ms:g} ms",
        "- WAN emulation: **not netem** — this kernel has no `sch_netem` (`tc qdisc add dev lo root netem delay 25ms` "
        '→ "Specified qdisc kind is unknown"; network namespaces and veth pairs work, other qdiscs such as tbf '
        "too), so the relay stands in: latency only, no bandwidth limit, no loss; asyncio timers (~1 ms). "
        "Measured relay RTT: " + ", ".join(f"{s.relay_rtt_ms:.1f} ms for the set {s.rtt_ms:g} ms" for s in settings),
        "- ways (one router, three tiers of one fake, picked per session with `x-router-tier`): websocket = "
        "`websocket: true` (one upstream socket per session, opened by the session's `generate: false` warm-up); "
        "keep-alive = `apis: [responses]` over the tier's warm aiohttp pool (the whole chain each turn); "
        "new-connection = the same against a fake that ends every connection (`Connection: close`): TCP + TLS "
        "again each turn",
        f"- session: a `generate: false` warm-up (task + tool), then {main.turns} turns, each the last call's result "
        f"({output_bytes} bytes) after `previous_response_id`; {args.repeats} sessions per way and RTT, order "
        "rotated; medians of the repeats per turn. TTFT: from sending a turn to its first "
        "`response.function_call_arguments.delta`, at the agent. Bytes up: the JSON body (HTTP) or message "
        "(WebSocket) the fake received for the turn, before TLS and framing (permessage-deflate, on for the "
        "socket, not counted)",
        "",
    ]
    for s in settings:
        lines += [f"## Upstream RTT {s.rtt_ms:g} ms", "", *_summary(s), "", "### Per turn (median of repeats)", "",
                  *_turns(s), ""]  # fmt: skip
    lines += [
        "![TTFT per turn and bytes sent upstream](ttft_upstream.png)",
        "",
        "How to read it: a new connection pays TCP (1 RTT) and TLS 1.3 (1 RTT) before every turn's request, so its "
        "TTFT is about 3 RTT + the upstream's own; keep-alive and the WebSocket pay one RTT a turn. What the "
        "socket saves over keep-alive is the history re-sent each turn: its turns after the first carry only the "
        "tool result, so bytes up stay flat while keep-alive's grow with the conversation. With no bandwidth "
        "limit and a fake whose TTFT does not depend on the prompt, those bytes cost little time here; on a real "
        "link and a real provider (which re-reads or looks up the re-sent prefix) they cost more. The socket's "
        "handshake (TCP + TLS + upgrade) is paid once, in the warm-up.",
        "",
    ]
    (RESULTS / "ttft_upstream.md").write_text("\n".join(lines))
    _plot(settings, RESULTS / "ttft_upstream.png")
