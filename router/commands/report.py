"""`agent-router stats` (a Rich table) and `agent-router report` (an HTML page with PNG plots).

Both read a running proxy over HTTP: `/v1/router/stats`, `/v1/router/series` and `/metrics`.
matplotlib is imported only by `report` (the `report` extra), never by the server.
"""

from __future__ import annotations

import html
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

from router.store.base import counted_apart


def fetch(url: str, path: str, key: str | None = None, timeout: float = 10.0) -> bytes:
    req = urllib.request.Request(url.rstrip("/") + path)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        body: bytes = resp.read()
        return body


def stats_table(stats: dict[str, Any], title: str) -> Table:
    table = Table(title=title)
    for col in ("scope", "name", "calls", "mistakes", "rate", "by kind"):
        table.add_column(col, justify="right" if col in ("calls", "mistakes", "rate") else "left")
    rows: list[tuple[str, str, dict[str, Any]]] = [("tier", k, v) for k, v in stats.get("tiers", {}).items()]
    rows += [("route", k, v) for k, v in stats.get("routes", {}).items()]
    rows += [(f"tool@{t}", k, v) for t, d in stats.get("tools", {}).items() for k, v in d.items()]
    for scope, name, c in rows:
        mistakes = c.get("mistakes", {})
        rate = c.get("mistake_rate", 0.0)
        style = "red" if rate >= 0.25 else "yellow" if rate > 0 else ""
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(mistakes.items(), key=lambda kv: -kv[1]))
        table.add_row(
            scope, name, str(c.get("calls", 0)), str(sum(mistakes.values())), f"{rate:.1%}", kinds, style=style
        )
    return table


def shadow_table(shadow: dict[str, Any]) -> Table:
    """Per route: shadow comparisons and how often the judge found the answer as good as the reference."""
    table = Table(title="shadow mode: answers compared with the reference tier")
    for col in ("route", "compared", "agreed", "disagreed", "unsure", "errors", "agreement"):
        table.add_column(col, justify="left" if col == "route" else "right")
    for route, c in shadow.items():
        agreement = c.get("agreement")
        table.add_row(
            route,
            *(str(c.get(k, 0)) for k in ("samples", "agreed", "disagreed", "unsure", "errors")),
            "-" if agreement is None else f"{agreement:.1%}",
        )
    return table


def print_stats(url: str, window: float | None, key: str | None) -> None:
    query = f"?window={window:g}" if window else ""
    stats = orjson.loads(fetch(url, "/v1/router/stats" + query, key))
    title = f"agent-router {url} — " + (f"last {window:g} s" if window else "all time")
    console = Console()
    console.print(stats_table(stats, title))
    if stats.get("shadow"):
        console.print(shadow_table(stats["shadow"]))
    if store := stats.get("store"):
        console.print(
            f"store: {store.get('backend')}  healthy={store.get('healthy')}  "
            f"pending={store.get('pending')}  dropped={store.get('dropped')}"
        )


def tier_key(tier: str, route: str, tool: str, kind: str) -> str | None:
    """Series rows counted per tier (as in stats): answers without a tool, and every mistake."""
    return tier if not tool or kind else None


def tool_key(tier: str, route: str, tool: str, kind: str) -> str | None:
    """Series rows counted per tool: answers that called it, and mistakes that name it."""
    return f"{tool}@{tier}" if tool else None


def _rates(rows: list[list[Any]], key_of: Any) -> dict[str, tuple[list[float], list[float]]]:
    """series rows → {label: (bucket times, mistake rates)} for answers grouped by `key_of(row)`."""
    calls: dict[str, dict[float, int]] = defaultdict(lambda: defaultdict(int))
    mistakes: dict[str, dict[float, int]] = defaultdict(lambda: defaultdict(int))
    for ts, tier, route, tool, kind, n in rows:
        label = key_of(tier, route, tool, kind)
        if label is None or counted_apart(kind):  # escalations, shadow verdicts, lanes: not mistakes
            continue
        (mistakes if kind else calls)[label][ts] += n
    out = {}
    for label, by_ts in calls.items():
        times = sorted(by_ts)
        out[label] = (times, [mistakes[label].get(t, 0) / by_ts[t] for t in times])
    return out


def _latency(metrics_text: str) -> dict[tuple[str, str], dict[float, float]]:
    """(histogram name, tier) → {le: cumulative count}, summed over routes."""
    out: dict[tuple[str, str], dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for family in text_string_to_metric_families(metrics_text):
        if family.name not in ("router_ttft_seconds", "router_call_seconds"):
            continue
        for s in family.samples:
            if s.name.endswith("_bucket") and s.labels["le"] != "+Inf":
                out[(family.name, s.labels["tier"])][float(s.labels["le"])] += s.value
    return out


def write_report(url: str, out: Path, since: float, bucket: int, key: str | None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    start = time.time() - since
    rows = orjson.loads(fetch(url, f"/v1/router/series?since={start:.0f}&bucket={bucket}", key))["rows"]
    stats = orjson.loads(fetch(url, "/v1/router/stats", key))
    metrics = fetch(url, "/metrics", key).decode()
    figures: list[tuple[str, str]] = []

    def plot(name: str, title: str, series: dict[str, tuple[list[float], list[float]]], ylabel: str) -> None:
        fig, ax = plt.subplots(figsize=(9, 3.6))
        for label, (xs, ys) in sorted(series.items()):
            ax.plot([(x - start) / 60 for x in xs], ys, marker="o", markersize=3, label=label)
        ax.set_title(title)
        ax.set_xlabel("minutes since the start of the report window")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if series:
            ax.legend(fontsize=8, loc="upper left")
        else:
            ax.text(0.5, 0.5, "no data in this window", ha="center", transform=ax.transAxes)
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        figures.append((name, title))

    plot("tiers.png", "Mistake rate per tier", _rates(rows, tier_key), "mistakes / answer")
    plot("tools.png", "Mistake rate per tool", _rates(rows, tool_key), "rate")
    escal = _escalation_rates(rows)
    plot("escalation.png", "Escalation rate (answers from a stronger tier / client calls)", escal, "share")

    fig, ax = plt.subplots(figsize=(9, 3.6))
    for (name, tier), buckets in sorted(_latency(metrics).items()):
        les = sorted(buckets)
        total = buckets[les[-1]] or 1.0
        kind = "first byte" if name == "router_ttft_seconds" else "total"
        ax.step(les, [buckets[le] / total for le in les], where="post", label=f"{tier} ({kind})")
    ax.set_xscale("log")
    ax.set_title("Latency by tier (cumulative share of calls)")
    ax.set_xlabel("seconds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "latency.png", dpi=110)
    plt.close(fig)
    figures.append(("latency.png", "Latency by tier"))

    page = out / "index.html"
    page.write_text(_html(url, stats, figures))
    return page


def _escalation_rates(rows: list[list[Any]]) -> dict[str, tuple[list[float], list[float]]]:
    answers: dict[float, int] = defaultdict(int)
    first_tier: dict[float, int] = defaultdict(int)
    escalated: dict[float, int] = defaultdict(int)
    for ts, _tier, _route, tool, kind, n in rows:
        if tool:
            continue
        if kind == "escalated":
            escalated[ts] += n
        elif not kind:
            answers[ts] += n
    for ts in answers:
        first_tier[ts] = max(answers[ts] - escalated[ts], 1)
    times = sorted(answers)
    return {"escalated": (times, [escalated[t] / first_tier[t] for t in times])}


def _html(url: str, stats: dict[str, Any], figures: list[tuple[str, str]]) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{v['calls']}</td><td>{v['mistake_rate']:.1%}</td>"
        f"<td>{html.escape(', '.join(f'{m} {n}' for m, n in v['mistakes'].items()))}</td></tr>"
        for k, v in stats.get("tiers", {}).items()
    )
    imgs = "".join(
        f'<figure><img src="{n}" alt="{html.escape(t)}"><figcaption>{html.escape(t)}</figcaption></figure>'
        for n, t in figures
    )
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>agent-router report</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 10px}}img{{max-width:100%}}</style></head><body>
<h1>agent-router report</h1><p>{html.escape(url)} — generated {time.strftime("%Y-%m-%d %H:%M:%S")}</p>
<table><tr><th>tier</th><th>answers</th><th>mistake rate</th><th>mistakes</th></tr>{rows}</table>
{imgs}</body></html>"""
