"""The eval's runs shown and kept: a rich table (the terminal), a markdown table (bench/results),
DIR/eval.json and DIR/eval.png.

`--out DIR` keeps every run in DIR/eval.json (a run replaces an earlier one of the same label)
and draws DIR/eval.png: accuracy against full-tier share, one point per run — the cost/quality
curve of the configurations tried.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from router.commands.eval.runner import Run


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def runs_table(runs: Sequence[Run | Mapping[str, Any]], title: str = "agent-router eval") -> Any:
    from rich.table import Table

    table = Table(title=title)
    for col in ("run", "cases", "accuracy", "false accepts", "escalated", "full tier", "p50 s", "p95 s", "outcomes"):
        table.add_column(col, justify="left" if col in ("run", "outcomes") else "right")
    for r in runs:
        d = asdict(r) if isinstance(r, Run) else dict(r)
        outcomes = ", ".join(f"{k} {v}" for k, v in d.get("outcomes", {}).items() if v and k != "correct")
        table.add_row(
            d["label"],
            str(d["cases"]),
            _pct(d["accuracy"]),
            _pct(d["false_accept_rate"]),
            _pct(d.get("escalation_rate")),
            _pct(d.get("full_tier_share")),
            f"{d['p50']:.2f}",
            f"{d['p95']:.2f}",
            outcomes,
        )
    return table


def markdown_table(runs: Sequence[Mapping[str, Any]]) -> str:
    lines = [
        "| run | cases | accuracy | false-accept rate | escalated | full-tier share | p50 s | p95 s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for d in runs:
        lines.append(
            f"| {d['label']} | {d['cases']} | {_pct(d['accuracy'])} | {_pct(d['false_accept_rate'])} | "
            f"{_pct(d.get('escalation_rate'))} | {_pct(d.get('full_tier_share'))} | {d['p50']:.2f} | {d['p95']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def save(run: Run, out: Path) -> list[dict[str, Any]]:
    """Add `run` to out/eval.json (replacing a run of the same label); return every run kept."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "eval.json"
    runs: list[dict[str, Any]] = []
    if path.exists():
        runs = [r for r in orjson.loads(path.read_bytes()).get("runs", []) if r.get("label") != run.label]
    runs.append(asdict(run))
    path.write_bytes(orjson.dumps({"runs": runs}, option=orjson.OPT_INDENT_2))
    return runs


def plot(runs: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Accuracy against full-tier share, one labelled point per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    for d in runs:
        x = d.get("full_tier_share")
        if x is None:  # straight to a tier, without --assume-tier: no cost to plot
            continue
        ax.scatter([x], [d["accuracy"]], s=40)
        ax.annotate(d["label"], (x, d["accuracy"]), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.set_xlim(-0.05, 1.1)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("full-tier share (cost)")
    ax.set_ylabel("accuracy")
    ax.set_title("agent-router eval: accuracy vs full-tier share")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
