"""`python -m bench.agentic`: run | report | tasks | oracle (see the package docstring)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from bench.agentic.loops import LOOPS
from bench.agentic.run import (
    CONFIGS,
    MAX_STEPS,
    OUT,
    TASK_TIMEOUT,
    done,
    loops_of,
    results_path,
    router_for,
    run_config,
)
from bench.agentic.tasks import HALVES, KINDS, TASKS, select

app = typer.Typer(add_completion=False, no_args_is_help=True, help="An agentic eval: whole tasks through the router.")
console = Console(highlight=False)


@app.command()
def run(
    config: Annotated[str, typer.Option(help=f"one of: {', '.join(CONFIGS)}")],
    loop: Annotated[list[str] | None, typer.Option(help=f"of {', '.join(LOOPS)} (repeatable; default all)")] = None,
    limit: Annotated[int | None, typer.Option(help="N tasks only, spread evenly over the list", min=1)] = None,
    task: Annotated[list[str] | None, typer.Option(help="these task ids only (repeatable)")] = None,
    kind: Annotated[list[str] | None, typer.Option(help=f"tasks of these kinds only: {', '.join(KINDS)}")] = None,
    half: Annotated[str | None, typer.Option(help=f"tasks of one half only: {', '.join(HALVES)}")] = None,
    base: Annotated[
        str | None, typer.Option(help="a router serving the configuration's policy, e.g. http://127.0.0.1:8080")
    ] = None,
    tiers: Annotated[
        str | None,
        typer.Option(
            help="FAST_PORT:FULL_PORT of running tiers: a proxy with the "
            "configuration's policy is started in front of them"
        ),
    ] = None,
    upstream: Annotated[
        str | None,
        typer.Option(
            help="what answers behind the router, for the report: local, "
            "fake, … (default: local when the local tiers are started "
            "here, else unknown)"
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="results directory")] = OUT,
    max_steps: Annotated[int, typer.Option(help="model calls per task at most", min=1, max=50)] = MAX_STEPS,
    task_timeout: Annotated[float, typer.Option(help="seconds per task at most", min=1)] = TASK_TIMEOUT,
    restart: Annotated[bool, typer.Option(help="discard this configuration's earlier results of these loops")] = False,
) -> None:
    """Run every task of a configuration through each loop; one JSONL line per finished task
    (OUT/CONFIG/LOOP.jsonl): a stopped run resumes, skipping the tasks already there."""
    if config not in CONFIGS:
        raise typer.BadParameter(f"unknown configuration {config!r}; one of: {', '.join(CONFIGS)}")
    if base and tiers:
        raise typer.BadParameter("--base and --tiers exclude each other")
    try:
        loops = loops_of(loop)
        tasks = select(task, kind, limit, half)
    except (KeyError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from None
    label = upstream or ("local" if not base and not tiers else "unknown")
    chosen = CONFIGS[config]
    if restart:
        for name in loops:
            results_path(out, config, name).unlink(missing_ok=True)
    pending = sum(len([t for t in tasks if t.id not in done(results_path(out, config, name))]) for name in loops)
    console.print(f"[bold]{config}[/]: {chosen.what}; policy {chosen.policy}")
    console.print(f"{len(tasks)} tasks x {len(loops)} loops ({', '.join(loops)}): {pending} to run, "
                  f"{len(tasks) * len(loops) - pending} done before; upstream: {label}")  # fmt: skip
    if not pending:
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[ok]}"),
               TimeElapsedColumn(), TimeRemainingColumn())  # fmt: skip
    outcomes: Counter[str] = Counter()
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task(config, total=pending, ok="")

        def on_done(record: dict[str, Any]) -> None:
            outcomes["ok" if record["ok"] else "failed"] += 1
            mark = "[green]ok[/]" if record["ok"] else "[red]failed[/]"
            line = f"{record['loop']:<17} {record['task']:<20} {mark:<17} {record['seconds']:7.1f} s"
            progress.console.print(f"  {line}  {record['steps']:>2} steps", highlight=False)
            progress.update(bar, advance=1, ok=f"{outcomes['ok']} ok, {outcomes['failed']} failed",
                            description=f"{config} · {record['loop']}")  # fmt: skip

        with router_for(chosen, base, tiers, out / "logs" / config) as url:
            counts = asyncio.run(run_config(chosen, loops, tasks, url, out, upstream=label, max_steps=max_steps,
                                            seconds=task_timeout, on_done=on_done))  # fmt: skip
    console.print(f"{counts['run']} run ({outcomes['ok']} ok), {counts['skipped']} skipped, "
                  f"{counts['unreachable']} could not reach the router; results in {out / config}")  # fmt: skip


@app.command()
def report(out: Annotated[Path, typer.Option(help="results directory")] = OUT) -> None:
    """Tables (report.md), summary.json and the plot from the results in OUT."""
    from bench.agentic.report import write

    try:
        console.print(f"wrote {write(out)}")
    except FileNotFoundError as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(1) from None


@app.command()
def tasks() -> None:
    """The tasks: id, kinds, level, tools offered, steps of the scripted solution."""
    for t in TASKS:
        steps = len(t.solution.steps)
        console.print(f"{t.id:<20} L{t.level} {','.join(t.kinds):<24} {len(t.tools):>2} tools {steps} steps  "
                      f"{t.prompt[:70]}", markup=False)  # fmt: skip
    kinds = Counter(k for t in TASKS for k in t.kinds)
    console.print(f"{len(TASKS)} tasks; " + ", ".join(f"{k} {kinds[k]}" for k in KINDS))


@app.command()
def oracle(
    port: Annotated[int, typer.Option(help="port")] = 9300,
    wrong: Annotated[bool, typer.Option(help="play the near-miss runs instead (every task fails)")] = False,
) -> None:
    """Serve the upstream that plays each task's scripted run (a harness check of the success path)."""
    from aiohttp import web

    from bench.agentic.oracle import oracle_app

    web.run_app(oracle_app(wrong), host="127.0.0.1", port=port, print=lambda s: console.print(s, markup=False))
