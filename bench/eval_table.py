"""bench/results/eval.md from bench/results/eval/eval.json (written by bench/eval_gemma.sh).

    python -m bench.eval_table [DIR]

Besides each run's summary: how many answers a verifier rejected, and the latency a configuration
added over `format` — paired by case, over the cases where `format` delivered a fast-tier tool
call (the only answers a verifier looks at).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

import orjson

from router.commands.eval import markdown_table


def added_latency(run: dict[str, Any], base: dict[str, Any]) -> tuple[float, float, int] | None:
    """(median, mean) seconds added per call over `base`, on base's fast-tier tool calls."""
    mine = {r["id"]: r for r in run["results"]}
    deltas = [
        mine[r["id"]]["seconds"] - r["seconds"]
        for r in base["results"]
        if r["id"] in mine and r["tier"] == "fast" and r["call"]
    ]
    if not deltas:
        return None
    return statistics.median(deltas), statistics.fmean(deltas), len(deltas)


def main(out: Path) -> str:
    runs = orjson.loads((out / "eval.json").read_bytes())["runs"]
    by_label = {r["label"]: r for r in runs}
    base = by_label.get("format")
    lines = [markdown_table(runs), "", "| run | verifier rejects | added latency vs format (median / mean s, n) |"]
    lines.append("|---|---:|---|")
    for r in runs:
        rejects = sum("verifier_reject" in x["mistakes"] for x in r["results"])
        added = added_latency(r, base) if base is not None and r is not base else None
        cost = f"{added[0]:+.2f} / {added[1]:+.2f} (n={added[2]})" if added else "—"
        lines.append(f"| {r['label']} | {rejects} | {cost} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(main(Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/eval")))
