"""What a session cost, from the command line: `agent-router sessions` (a table of recent sessions)
and `agent-router statusline` (one line for Claude Code's status line).

    agent-router sessions [--url] [--limit] [--key]      GET /v1/router/sessions, as a rich table
    agent-router statusline                              reads Claude Code's status JSON on stdin
                                                         (its `session_id`) and prints one line: the
                                                         tier mix, mistakes caught, cost against the
                                                         baseline — or nothing it cannot know

Claude Code's settings.json:  "statusLine": {"type": "command", "command": "agent-router statusline"}
The status line reads the router at `ANTHROPIC_BASE_URL` (as Claude Code does), else
`AGENT_ROUTER_URL`, else http://127.0.0.1:8080, with `ANTHROPIC_AUTH_TOKEN` or `AGENT_ROUTER_KEY`
as its key; it waits at most `STATUS_TIMEOUT` seconds and never fails the status line.
"""

from __future__ import annotations

import os
import sys
import time
import urllib.error
import urllib.parse
from typing import Any, TextIO

import orjson
from rich.console import Console
from rich.table import Table

from router.commands.report import fetch

STATUS_TIMEOUT = 1.0  # seconds: Claude Code runs the status line often


def usd(amount: float) -> str:
    return f"${amount:.2f}" if abs(amount) >= 1 else f"${amount:.4f}"


def sessions_table(sessions: list[dict[str, Any]]) -> Table:
    table = Table(title="Recent sessions (cost against the baseline tier)")
    columns = ("session", "last", "calls", "tiers", "escalated", "sticky", "caught", "reached")
    for column in (*columns, "cost", "baseline", "saved"):
        table.add_column(column, justify="right" if column not in ("session", "tiers") else "left")
    for s in sessions:
        tiers = " ".join(f"{tier} {n}" for tier, n in sorted(s["tiers"].items()))
        unpriced = f" (+{s['unpriced']} unpriced)" if s["unpriced"] else ""
        table.add_row(
            s["id"], time.strftime("%H:%M:%S", time.localtime(s["last"])), str(s["calls"]), tiers,
            str(s["escalated"]), str(s["sticky"]), str(sum(s["mistakes"].values())), str(s["reported"]),
            usd(s["cost_usd"]), usd(s["baseline_cost_usd"]), usd(s["saved_usd"]) + unpriced,
        )  # fmt: skip
    return table


def print_sessions(url: str, limit: int, key: str | None) -> None:
    data = orjson.loads(fetch(url, f"/v1/router/sessions?limit={limit}", key))
    Console().print(sessions_table(data["sessions"]) if data["sessions"] else "no sessions kept yet")


def status_line(status: dict[str, Any], session: dict[str, Any] | None) -> str:
    """Claude Code's status line for this session, from the router's totals (None: none kept)."""
    if session is None:
        return "router: no calls of this session yet"
    calls = session["calls"]
    by_share = sorted(session["tiers"].items(), key=lambda tier_calls: -tier_calls[1])
    mix = " ".join(f"{tier} {round(100 * n / calls)}%" for tier, n in by_share)
    caught = sum(session["mistakes"].values())
    worth = f"{usd(session['cost_usd'])} vs {usd(session['baseline_cost_usd'])}"
    saved = session["saved_usd"]
    verdict = f"saved {usd(saved)}" if saved >= 0 else f"{usd(-saved)} over"
    return f"router: {calls} calls · {mix} · {caught} caught · {worth} ({verdict})"


def statusline(stdin: TextIO = sys.stdin, env: dict[str, str] | None = None) -> str:
    env = dict(os.environ) if env is None else env
    try:
        status = orjson.loads(stdin.read() or "{}")
    except orjson.JSONDecodeError:
        return "router: unreadable status"
    claude_session = status.get("session_id") if isinstance(status, dict) else None
    if not isinstance(claude_session, str) or not claude_session:
        return "router: no session"
    url = env.get("ANTHROPIC_BASE_URL") or env.get("AGENT_ROUTER_URL") or "http://127.0.0.1:8080"
    key = env.get("ANTHROPIC_AUTH_TOKEN") or env.get("AGENT_ROUTER_KEY")
    path = "/v1/router/sessions/" + urllib.parse.quote(f"client:{claude_session}", safe="")
    try:
        found = orjson.loads(fetch(url.removesuffix("/v1"), path, key, timeout=STATUS_TIMEOUT))
    except urllib.error.HTTPError as exc:
        return status_line(status, None) if exc.code == 404 else f"router: HTTP {exc.code}"
    except (urllib.error.URLError, OSError, orjson.JSONDecodeError):
        return "router: unreachable"
    return status_line(status, found.get("session"))
