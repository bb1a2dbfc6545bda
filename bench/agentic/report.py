"""The report of bench.agentic: from OUT/*/*.jsonl, per configuration (and per loop) task success,
steps, mistakes the router caught and those that reached the agent (by kind), tool errors recovered
from, escalations, sticky turns, the share of calls answered on full, tokens and wall time per task
(p50/p95); success per task kind and level; which configurations failed each task; what one call
costs on each tier (the floor of routed's time); a plot of success against median wall time (one point
per configuration); and summary.json.

    write(out) → out/report.md, out/summary.json, out/success-vs-time.png
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import orjson

from bench.agentic.loops import LOOPS
from bench.agentic.run import CONFIGS, SAMPLED_TIER
from bench.agentic.tasks import BY_ID, KINDS

# issue 26, point 4: routed task success ≥ 0.95x full only's, at ≤ 0.6x its median wall time per task
GOAL_SUCCESS, GOAL_TIME = 0.95, 0.6
BASE = "full-only"  # what every configuration is compared with
FAST = "fast-only"  # whose opening calls, beside full-only's, say what a call costs on each tier
FAKE_NOTE = (
    "**Harness check on the fake upstream** (`agent-router fake-upstream`): its tool calls are random picks "
    "with schema-valid made-up arguments and its answers random words, so no task can be expected to succeed. "
    "These numbers show that the loops, the router, the environment, the checks and the report work end to end; "
    "they say nothing about model quality or about routing paying off."
)
ORACLE_NOTE = (
    "**Harness check on the oracle** (bench/agentic/oracle.py): every tier plays each task's scripted correct "
    "run, so every task must succeed in every configuration and loop (`oracle-wrong`: the near-miss runs, so "
    "every task must fail). These numbers check the harness, not models."
)
HARNESS = {"fake": FAKE_NOTE, "oracle": ORACLE_NOTE, "oracle-wrong": ORACLE_NOTE}  # upstream labels → the note


def load(out: Path) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Records by (config, loop); the last line of a task wins."""
    runs: dict[tuple[str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    for path in sorted(out.glob("*/*.jsonl")):
        if path.name == "runs.jsonl":
            continue
        for line in path.read_bytes().splitlines():
            try:
                r = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            r["ok"] = r["ok"] and r["error"] is None  # run.finished's rule, for records written before it
            runs[(r["config"], r["loop"])][r["task"]] = r
    return {k: list(v.values()) for k, v in runs.items()}


def percentile(values: list[float], p: float) -> float:
    """Nearest rank."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p * len(ordered)) - 1)]


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(records)
    calls = sum(r["steps"] for r in records)
    caught: Counter[str] = Counter()
    reached: Counter[str] = Counter()
    for r in records:
        caught.update(r["caught"])
        reached.update(r["reached"])
    seconds = [r["seconds"] for r in records]
    return {
        "tasks": n,
        "succeeded": sum(r["ok"] for r in records),
        "success_rate": round(sum(r["ok"] for r in records) / n, 4) if n else 0.0,
        "steps_per_task": round(calls / n, 2) if n else 0.0,
        "calls": calls,
        "mistakes_caught": dict(caught.most_common()),
        "mistakes_reached": dict(reached.most_common()),
        "tool_errors": sum(r["tool_errors"] for r in records),
        "tool_errors_recovered": sum(r["recovered"] for r in records),
        "escalated_calls": sum(r["escalated"] for r in records),
        "repaired_calls": sum(bool(c.get("repaired")) for r in records for c in r["calls"]),
        "salvaged_calls": sum(bool(c.get("salvaged")) for r in records for c in r["calls"]),
        "looped_calls": sum(bool(c.get("looped")) for r in records for c in r["calls"]),
        "sampled_calls": sum(sampled(c) for r in records for c in r["calls"]),
        "sticky_calls": sum(r["sticky"] for r in records),
        "full_share": round(sum(r["on_full"] for r in records) / calls, 4) if calls else 0.0,
        "input_tokens_per_task": round(sum(r["tokens"]["input"] for r in records) / n) if n else 0,
        "output_tokens_per_task": round(sum(r["tokens"]["output"] for r in records) / n) if n else 0,
        "p50_seconds": round(percentile(seconds, 0.5), 3),
        "p95_seconds": round(percentile(seconds, 0.95), 3),
        "errors": dict(Counter((r["error"] or "").split(":")[0] for r in records if r["error"]).most_common()),
        "upstream": sorted({r["upstream"] for r in records}),
    }


def sampled(call: dict[str, Any]) -> bool:
    """The call went on sampled after the greedy last tier's sign or mistake (x-router-sampled); in
    records from before the router said so, answered by the repeat tier in no repeat's run."""
    if "sampled" in call:
        return bool(call["sampled"])
    return call.get("tier") == SAMPLED_TIER and not call.get("repeat") and call.get("status", 0) < 400


def _order(names: set[str]) -> list[str]:
    return [c for c in CONFIGS if c in names] + sorted(names - set(CONFIGS))


def _kinds(counts: dict[str, int], top: int = 4) -> str:
    if not counts:
        return "0"
    total = sum(counts.values())
    shown = ", ".join(f"{k} {v}" for k, v in list(counts.items())[:top])
    return f"{total} ({shown}{', …' if len(counts) > top else ''})"


def _row(name: str, s: dict[str, Any], base: dict[str, Any] | None) -> str:
    if versus := s.get("vs_full_only"):  # on the runs both have
        times = f"{versus['success_ratio']:.2f}" if versus["success_ratio"] is not None else "—"
    else:
        times = f"{s['success_rate'] / base['success_rate']:.2f}" if base and base["success_rate"] else "—"
    recovered = f"{s['tool_errors_recovered']}/{s['tool_errors']}"
    return (f"| {name} | {s['tasks']} | {s['success_rate']:.1%} | {times} | {s['steps_per_task']:.1f} | "
            f"{_kinds(s['mistakes_caught'])} | {_kinds(s['mistakes_reached'])} | {recovered} | "
            f"{s['escalated_calls']} | {s['repaired_calls']} / {s['salvaged_calls']} / {s.get('looped_calls', 0)} / "
            f"{s.get('sampled_calls', 0)} | "
            f"{s['sticky_calls']} | {s['full_share']:.1%} | {s['input_tokens_per_task']:,} / "
            f"{s['output_tokens_per_task']:,} | {s['p50_seconds']:.2f} | {s['p95_seconds']:.2f} |")  # fmt: skip


HEAD = ("| configuration | tasks | success | x full only | steps / task | mistakes caught by the router | "
        "mistakes that reached the agent | tool errors recovered | escalated calls | "
        "repaired / salvaged / looped / sampled calls | sticky calls | on full | "
        "tokens in / out per task | p50 s | p95 s |\n"
        "|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")  # fmt: skip


def build(runs: dict[tuple[str, str], list[dict[str, Any]]]) -> dict[str, Any]:
    configs = _order({c for c, _ in runs})
    summary: dict[str, Any] = {"generated": time.strftime("%Y-%m-%dT%H:%M:%S"), "configs": {}}
    for c in configs:
        pooled = [r for (cc, _), rs in runs.items() if cc == c for r in rs]
        entry = summarize(pooled)
        entry["loops"] = {loop: summarize(runs[(c, loop)]) for loop in LOOPS if (c, loop) in runs}
        entry["loops"] |= {loop: summarize(rs) for (cc, loop), rs in runs.items() if cc == c and loop not in LOOPS}
        summary["configs"][c] = entry
        if c != BASE and any(cc == BASE for cc, _ in runs):
            entry["vs_full_only"] = paired(runs, c, BASE)
            for loop, loop_entry in entry["loops"].items():
                if (BASE, loop) in runs:
                    loop_entry["vs_full_only"] = paired({k: v for k, v in runs.items() if k[1] == loop}, c, BASE)
    upstreams = sorted({u for e in summary["configs"].values() for u in e["upstream"]})
    summary["upstream"] = upstreams
    summary["goal"] = _goal(summary["configs"], upstreams)
    if cost := tier_cost(runs):
        summary["tier_cost"] = cost
    if (prices := projected_prices()) is not None:
        pooled = {c: [r for (cc, _), rs in runs.items() if cc == c for r in rs] for c in configs}
        spent = {c: money(rs, prices) for c, rs in pooled.items()}
        base_usd = spent.get(BASE, {}).get("usd_per_task")
        for m in spent.values():  # per task: configurations may have run different numbers of tasks
            m["x_full_only"] = round(m["usd_per_task"] / base_usd, 3) if base_usd and m["usd_per_task"] else None
        summary["money"] = {"projected": PROJECTED, "configs": spent}
    return summary


# The hosted pair the local tiers' money is projected onto: LiteLLM's table prices of OpenAI's
# distilled fast model beside its full one (router/core/live/prices.py reads the table).
PROJECTED = {"fast": "gpt-5-mini", "full": "gpt-5", SAMPLED_TIER: "gpt-5"}


def projected_prices() -> dict[str, tuple[float, float]] | None:
    """tier → (USD per input token, per output token) of its projected hosted model (None: no table)."""
    from router.core.live.prices import litellm_table

    table = litellm_table()
    if table is None:
        return None
    prices = {}
    for tier, model in PROJECTED.items():
        entry = table[0].get(model) or {}
        prices[tier] = (float(entry.get("input_cost_per_token", 0)), float(entry.get("output_cost_per_token", 0)))
    return prices


def money(records: list[dict[str, Any]], prices: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """What the tasks would have cost at `prices`: every call's tokens at its tier's; an escalated call
    also pays for the attempt before it on fast, counted as its prompt read there (its own output is
    not in the record)."""
    total = 0.0
    for r in records:
        for call in r["calls"]:
            rate_in, rate_out = prices.get(call.get("tier") or "full", prices["full"])
            total += call.get("input_tokens", 0) * rate_in + call.get("output_tokens", 0) * rate_out
            if call.get("escalated"):
                total += call.get("input_tokens", 0) * prices["fast"][0]
    solved = sum(r["ok"] for r in records)
    return {
        "usd": round(total, 6),
        "usd_per_task": round(total / len(records), 6) if records else None,
        "usd_per_solved_task": round(total / solved, 6) if solved else None,
    }


def tier_cost(runs: dict[tuple[str, str], list[dict[str, Any]]]) -> dict[str, Any] | None:
    """What one call costs on fast against full: fast-only's and full-only's opening calls of the same
    task and loop (the same prompt on both servers; one attempt, the model as is). Their median
    ratio r is a floor for routing: with every call on fast and as many calls as full only makes, a
    task takes about r of full only's time, and the time goal leaves full at most
    (GOAL_TIME - r) / (1 - r) of the calls, each escalated call costing a fast call besides."""
    opening = {(c, r["task"], loop): r["calls"][0] for (c, loop), rs in runs.items() for r in rs if r["calls"]}
    pairs = [
        (call["seconds"], full["seconds"])
        for (c, task, loop), call in opening.items()
        if c == FAST and (full := opening.get((BASE, task, loop))) and call["status"] < 400 and full["status"] < 400
        and call.get("seconds") and full.get("seconds")
    ]  # fmt: skip
    if not pairs:
        return None
    ratio = percentile([f / g for f, g in pairs], 0.5)
    return {
        "pairs": len(pairs),
        "fast_p50_seconds": round(percentile([f for f, _ in pairs], 0.5), 3),
        "full_p50_seconds": round(percentile([g for _, g in pairs], 0.5), 3),
        "ratio_p50": round(ratio, 3),
        "full_share_allowed": round(max(0.0, (GOAL_TIME - ratio) / (1 - ratio)), 3) if ratio < 1 else 0.0,
    }


def paired(runs: dict[tuple[str, str], list[dict[str, Any]]], config: str, base: str) -> dict[str, Any]:
    """`config` against `base` on the (task, loop) runs both have (configurations run on different
    tasks, e.g. a learned policy on the held-out half only, are compared on what they share)."""
    mine = {(r["task"], loop): r for (c, loop), rs in runs.items() if c == config for r in rs}
    theirs = {(r["task"], loop): r for (c, loop), rs in runs.items() if c == base for r in rs}
    both = sorted(mine.keys() & theirs.keys())
    a, b = summarize([mine[k] for k in both]), summarize([theirs[k] for k in both])
    return {
        "tasks": len(both),
        "success_rate": a["success_rate"],
        "base_success_rate": b["success_rate"],
        "success_ratio": round(a["success_rate"] / b["success_rate"], 3) if b["success_rate"] else None,
        "p50_seconds": a["p50_seconds"],
        "base_p50_seconds": b["p50_seconds"],
        "p50_ratio": round(a["p50_seconds"] / b["p50_seconds"], 3) if b["p50_seconds"] else None,
    }


def _goal(configs: dict[str, Any], upstreams: list[str]) -> dict[str, Any]:
    goal: dict[str, Any] = {
        "what": f"routed task success >= {GOAL_SUCCESS}x full-only's, at <= {GOAL_TIME}x its median wall time per task",
        "measured": False,
    }
    versus = configs.get("routed", {}).get("vs_full_only")
    if not versus or not versus["tasks"]:
        goal["why_not"] = "needs full-only and routed runs of the same tasks"
        return goal
    if versus["success_ratio"] is None or versus["p50_ratio"] is None:
        goal["why_not"] = "full-only succeeded on no task: there is no ratio to take"
        return goal
    ratio_success, ratio_time = versus["success_ratio"], versus["p50_ratio"]
    goal |= {"tasks": versus["tasks"], "success_ratio": ratio_success, "p50_ratio": ratio_time}
    if harness := [u for u in upstreams if u in HARNESS]:
        goal["why_not"] = f"a harness check ({', '.join(harness)} upstream): the ratios say nothing about the goal"
    else:
        goal |= {"measured": True, "met": ratio_success >= GOAL_SUCCESS and ratio_time <= GOAL_TIME}
    return goal


def markdown(runs: dict[tuple[str, str], list[dict[str, Any]]], summary: dict[str, Any]) -> str:
    configs = list(summary["configs"])
    lines = ["# Agentic eval: whole tasks through the router", ""]
    for note in dict.fromkeys(HARNESS[u] for u in summary["upstream"] if u in HARNESS):
        lines += [f"> {note}", ""]
    lines += [
        f"`python -m bench.agentic report` — {len({r['task'] for rs in runs.values() for r in rs})} of the "
        f"{len(BY_ID)} tasks in bench/agentic/tasks.py, run by "
        f"{', '.join(dict.fromkeys(loop for _, loop in runs))} (docs/agentic.md). Upstream: "
        f"{', '.join(summary['upstream'])}. A task succeeds when the loop ended with the agent's answer and every "
        "exact check of the environment's final state and the final answer passes. Steps: calls the agent "
        "got an answer to. Mistakes caught: kinds in `x-router-mistakes` of answers the router did not deliver "
        "(escalated, repaired); reached the agent: delivered with their mistakes (`x-router-exhausted`), a "
        "sign the last tier wrote (`repeated_call`, `tool_spray`: delivered, not refused), error statuses, "
        "malformed calls the tools received, unknown tools the SDK refused, tool calls written as text in a "
        "final answer. Tool errors recovered: a tool said no (wrong path, ambiguous name, …) and a later "
        "call worked. Escalated calls: answered (or tried) on another tier than the routed one, a sample "
        "included; sampled: went on sampled on `full-resample` after greedy full's sign or mistake "
        "(`x-router-sampled`; in runs from before it, answered there in no repeat's run). "
        "Wall time: per task, the whole loop.",
        "",
        "## Per configuration (all loops)",
        "",
        HEAD,
    ]
    base = summary["configs"].get("full-only")
    lines += [_row(c, summary["configs"][c], base) for c in configs]
    if money_view := summary.get("money"):
        pair = ", ".join(f"{tier} as {model}" for tier, model in money_view["projected"].items())
        lines += ["", "## What it would cost (a projection)", "",
                  f"The same calls' tokens at LiteLLM's table prices of a hosted pair ({pair}): **a projection**, "
                  "not what these local tiers cost (nothing). An escalated call also pays its attempt on fast, "
                  "counted as its prompt read there. Success and share on full as above.", "",
                  "| configuration | success | $ per task | $ per solved task | cost x full only | on full |",
                  "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
        for c in configs:
            m, s_ = money_view["configs"][c], summary["configs"][c]
            per_solved = f"{m['usd_per_solved_task']:.5f}" if m["usd_per_solved_task"] is not None else "—"
            times = f"{m['x_full_only']:.2f}" if m["x_full_only"] is not None else "—"
            lines.append(f"| {c} | {s_['success_rate']:.1%} | {m['usd_per_task']:.5f} | {per_solved} | {times} | "
                         f"{s_['full_share']:.1%} |")  # fmt: skip
    lines += ["", "## Per configuration and loop", "", HEAD]
    for c in configs:
        loop_base = base["loops"] if base else {}
        for loop, s in summary["configs"][c]["loops"].items():
            lines.append(_row(f"{c} · {loop}", s, loop_base.get(loop)))
    lines += _versus(summary)
    goal = summary["goal"]
    if "success_ratio" in goal:
        ratios = f"success x{goal['success_ratio']:.2f}, median wall time per task x{goal['p50_ratio']:.2f}"
        verdict = (
            ("met" if goal["met"] else "not met") if goal["measured"] else f"not a measurement ({goal['why_not']})"
        )
        said = f"{ratios}: {verdict}"
    else:
        said = f"not measured ({goal['why_not']})"
    lines += ["", "## The goal (issue 26, point 4)", "", f"{goal['what']}: {said}.", ""]
    lines += _cost(summary.get("tier_cost"))
    lines += _by_kind(runs, configs)
    lines += _by_task(runs, configs)
    lines += _lost(runs, configs)
    errors = {c: summary["configs"][c]["errors"] for c in configs if summary["configs"][c]["errors"]}
    if errors:
        lines += ["## How loops ended other than with an answer", "", "| configuration | errors |", "|---|---|"]
        lines += [f"| {c} | {', '.join(f'{k} {v}' for k, v in e.items())} |" for c, e in errors.items()]
        lines.append("")
    lines += ["![success against median wall time](success-vs-time.png)", ""]
    return "\n".join(lines)


def _versus(summary: dict[str, Any]) -> list[str]:
    rows = [(c, s["vs_full_only"]) for c, s in summary["configs"].items() if s.get("vs_full_only")]
    if not rows:
        return []
    out = ["", f"## Against {BASE} on the same runs", "",
           "Each configuration beside full-only on the (task, loop) runs both have: a configuration run on "
           "part of the tasks (a learned policy on the held-out half) is compared on that part only.", "",
           "| configuration | runs | success | full-only's | x | p50 s | full-only's | x |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for c, v in rows:
        ratio = f"{v['success_ratio']:.2f}" if v["success_ratio"] is not None else "—"
        time_ratio = f"{v['p50_ratio']:.2f}" if v["p50_ratio"] is not None else "—"
        out.append(f"| {c} | {v['tasks']} | {v['success_rate']:.1%} | {v['base_success_rate']:.1%} | {ratio} | "
                   f"{v['p50_seconds']:.1f} | {v['base_p50_seconds']:.1f} | {time_ratio} |")  # fmt: skip
    return out


def _cost(cost: dict[str, Any] | None) -> list[str]:
    if not cost:
        return []
    return ["## What a call costs on each tier", "",
            f"The opening call of a task (the same prompt on both servers), {FAST} against {BASE}, "
            f"{cost['pairs']} pairs: fast {cost['fast_p50_seconds']:.1f} s, full {cost['full_p50_seconds']:.1f} s "
            f"at the median, fast taking x{cost['ratio_p50']:.2f} full's time (median of the pairs' ratios). So "
            f"with every call on fast and as many calls as full only makes, a task would take about "
            f"x{cost['ratio_p50']:.2f} full only's time, and a median of at most x{GOAL_TIME} leaves at most "
            f"{cost['full_share_allowed']:.0%} of the calls to full — fewer where a call is escalated, since that "
            "costs a fast call besides.", ""]  # fmt: skip


def _by_kind(runs: dict[tuple[str, str], list[dict[str, Any]]], configs: list[str]) -> list[str]:
    columns = [*KINDS, "level 1", "level 2", "level 3"]
    out = ["## Success by task kind and level (all loops)", "",
           "| configuration | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]  # fmt: skip
    for c in configs:
        pooled = [r for (cc, _), rs in runs.items() if cc == c for r in rs]
        cells = []
        for col in columns:
            if col.startswith("level"):
                sel = [r for r in pooled if r["level"] == int(col[-1])]
            else:
                sel = [r for r in pooled if col in r["kinds"]]
            cells.append(f"{sum(r['ok'] for r in sel) / len(sel):.0%} ({len(sel)})" if sel else "—")
        out.append(f"| {c} | " + " | ".join(cells) + " |")
    return [*out, ""]


def _by_task(runs: dict[tuple[str, str], list[dict[str, Any]]], configs: list[str]) -> list[str]:
    failed: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    seen: dict[str, dict[str, int]] = defaultdict(Counter)
    for (c, loop), rs in runs.items():
        for r in rs:
            seen[r["task"]][c] += 1
            if not r["ok"]:
                failed[r["task"]][c].append(loop)
    out = ["## Which configurations failed each task", "",
           f"{sum(1 for t in seen if t not in failed)} of {len(seen)} tasks run passed in every configuration and "
           "loop. Per failed task: the configurations that failed it (loops failed / loops run).", "",
           "| task | kinds | level | failed in |", "|---|---|---:|---|"]  # fmt: skip
    order = {t: n for n, t in enumerate(BY_ID)}
    for task in sorted(failed, key=lambda t: order.get(t, len(order))):
        t = BY_ID.get(task)
        kinds, level = (", ".join(t.kinds), str(t.level)) if t else ("?", "?")
        cells = ", ".join(f"{c} ({len(failed[task][c])}/{seen[task][c]})" for c in configs if failed[task].get(c))
        out.append(f"| {task} | {kinds} | {level} | {cells} |")
    return [*out, ""]


def _call(c: dict[str, Any]) -> str:
    """One call as the report shows it: tier/route, then what the router found."""
    mistakes = Counter(c.get("mistakes") or [])
    found = ", ".join(f"{k} x{n}" if n > 1 else k for k, n in mistakes.items())
    marks = [m for m in ("salvaged", "repaired", "looped") if c.get(m)]
    if sampled(c):
        marks.append(f"sampled after a {c.get('sampled') or 'sign or mistake'}")
    status = "" if c["status"] < 400 else f" HTTP {c['status']}"
    inside = "; ".join(x for x in (found, *marks) if x)
    return f"{c.get('tier') or '?'}/{c.get('route') or '?'}{status}" + (f" [{inside}]" if inside else "")


def _lost(runs: dict[tuple[str, str], list[dict[str, Any]]], configs: list[str]) -> list[str]:
    """Per configuration, the runs it lost that full-only won, call by call: which calls lose tasks."""
    base = {(r["task"], loop): r for (c, loop), rs in runs.items() if c == BASE for r in rs}
    out = [f"## Where a configuration lost what {BASE} won", "",
           "Each call as tier/route [mistakes the router found; salvaged, repaired, looped: stopped where it "
           "went round in a loop]; tool errors are the tools' answers the agent got back.", "",
           "| configuration | task | loop | calls | tool errors | how it ended |",
           "|---|---|---|---|---:|---|"]  # fmt: skip
    rows = 0
    for c in configs:
        for (cc, loop), rs in runs.items():
            if cc != c or c == BASE:
                continue
            for r in rs:
                won = base.get((r["task"], loop))
                if r["ok"] or not won or not won["ok"]:
                    continue
                ended = (r["error"] or "").split(" - {")[0] or "answer failed: " + "; ".join(r["failed_checks"])
                calls = " → ".join(_call(x) for x in r["calls"])
                out.append(f"| {c} | {r['task']} | {loop} | {calls} | {r['tool_errors']} | {ended[:160]} |")
                rows += 1
    return [*out, ""] if rows else []


def plot(path: Path, summary: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for name, s in summary["configs"].items():
        x, y = s["p50_seconds"], 100 * s["success_rate"]
        bar = ax.errorbar([x], [y], xerr=[[0], [max(s["p95_seconds"] - x, 0)]], fmt="o", markersize=8, capsize=4,
                          alpha=0.85, label=f"{name}: {s['full_share']:.0%} of calls on full")  # fmt: skip
        bar[-1][0].set_linestyle(":")  # the p95 bar, lighter than the point
    ax.set_xlim(left=0)
    ax.set_xlabel("wall time per task, s (median; the bar reaches p95)")
    ax.set_ylabel("tasks succeeded, %")
    ax.set_ylim(-5, 105)
    harness = [u for u in summary["upstream"] if u in HARNESS]
    title = "Agentic eval: success against wall time per task, one point per configuration"
    if harness:
        title += f"\nHARNESS CHECK ({', '.join(harness)} upstream): says nothing about model quality"
    ax.set_title(title, fontsize=10, color="firebrick" if harness else "black")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(out: Path) -> Path:
    runs = load(out)
    if not runs:
        raise FileNotFoundError(f"no results under {out} (python -m bench.agentic run writes them)")
    summary = build(runs)
    (out / "summary.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    (out / "report.md").write_text(markdown(runs, summary))
    plot(out / "success-vs-time.png", summary)
    return out / "report.md"
