"""`bench.overhead`'s verdicts and report: the ratios against LiteLLM, bench/results/overhead.md and
overhead.png, and the summary printed at the end."""

from __future__ import annotations

import math
import os
import platform
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from bench.overhead_model import (
    DIRECT,
    DIRECT_TOOLS,
    IDLE_WARMUP,
    LITELLM,
    ROOT,
    ROUTER,
    ROUTER_ON,
    TRACED,
    Run,
    console,
)
from bench.validate import TOOLS

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


def git_rev() -> str:
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
