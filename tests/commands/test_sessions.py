"""`agent-router sessions` and `agent-router statusline` against a real proxy: the table of recent
sessions, and Claude Code's status line for its session (its `session_id` on stdin)."""

from __future__ import annotations

import asyncio
import io

import orjson
from typer.testing import CliRunner

from router.commands.cli import app
from router.commands.sessions import statusline
from router.fake import FakeConfig
from tests.api.helpers import TOOLS, USER, post
from tests.api.test_worth import priced

CLAUDE = "6f1c2b7e-0000-4a1b-9c3d-123456789abc"


async def test_the_status_line_and_the_table_say_what_the_session_cost(start_fake_, proxy_) -> None:
    fast = await start_fake_(FakeConfig(seed=1))
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(priced(fast.url, full.url))
    for _ in range(3):  # as Claude Code sends them: its session in a header
        body = {"model": "auto", "messages": USER, "tools": TOOLS}
        r = await post(proxy.url + "/chat/completions", body, headers={"x-claude-code-session-id": CLAUDE})
        assert r.status == 200
    await proxy.runtime._flush_calls()
    status = io.StringIO(orjson.dumps({"session_id": CLAUDE, "model": {"id": "claude-router"}}).decode())
    env = {"ANTHROPIC_BASE_URL": proxy.base}
    line = await asyncio.to_thread(statusline, status, env)
    assert line.startswith("router: 3 calls · fast 100% · 0 caught · $") and "saved $" in line, line

    other = io.StringIO('{"session_id": "not-seen"}')
    assert await asyncio.to_thread(statusline, other, env) == "router: no calls of this session yet"
    gone = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}
    assert await asyncio.to_thread(statusline, io.StringIO('{"session_id": "x"}'), gone) == "router: unreachable"

    runner = CliRunner(env={"COLUMNS": "200"})
    result = await asyncio.to_thread(runner.invoke, app, ["sessions", "--url", proxy.base])
    assert result.exit_code == 0, result.output
    assert f"client:{CLAUDE}" in result.output and "fast 3" in result.output
