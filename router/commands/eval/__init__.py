"""`agent-router eval CASES --url URL`: run tool-call cases through the proxy (or straight to a tier)
and score what comes back.

    cases.py    the case file (its format is documented there) and scoring one answer to a case
    runner.py   sending the cases, each call's result, the run's summary (accuracy, false accepts, …)
    report.py   the runs as a rich or markdown table, kept in DIR/eval.json, plotted to DIR/eval.png

Their public names are all importable from here.
"""

from __future__ import annotations

from router.commands.eval.cases import (
    FALSE_ACCEPTS,
    OUTCOMES,
    Case,
    CaseError,
    Expected,
    Outcome,
    load_cases,
    offered_names,
    score,
    value_matches,
)
from router.commands.eval.report import markdown_table, plot, runs_table, save
from router.commands.eval.runner import Result, Run, percentile, request_body, run_cases, run_with_progress, summarize

__all__ = [
    "FALSE_ACCEPTS",
    "OUTCOMES",
    "Case",
    "CaseError",
    "Expected",
    "Outcome",
    "Result",
    "Run",
    "load_cases",
    "markdown_table",
    "offered_names",
    "percentile",
    "plot",
    "request_body",
    "run_cases",
    "run_with_progress",
    "runs_table",
    "save",
    "score",
    "summarize",
    "value_matches",
]
