"""Claude Code and Codex CLI, unmodified and on their default model and features, through the router.

Each CLI runs one small task non-interactively against the router in front of the fake upstream: the
fake calls a harmless tool, the CLI runs it and sends the result back, the fake then answers text and
the CLI ends on its own. What must hold: exit code 0, at least two model calls of the conversation
reached the fake with a tool result in a later one, the final text was printed, and the router
answered nothing with a 4xx/5xx (nor an `error` event on a WebSocket).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import orjson
import pytest

from router.fake import FakeConfig
from tests.agents.conftest import PREFERRED, Stack, clean_env, cli, routed, run_cli, workdir
from tests.api.helpers import fake_requests
from tests.conftest import policy_text

pytestmark = [pytest.mark.agents, pytest.mark.timeout(180)]

TASK = "List the files in this directory, then tell me in one sentence what you found."


def tool_loop(requests: list[dict[str, Any]]) -> None:
    """At least two calls, and a later one carries the result of a call the model made."""
    assert len(requests) >= 2, requests
    with_result = [b for b in requests[1:] if any(m.get("role") == "tool" for m in b["messages"])]
    assert with_result, [[m.get("role") for m in b["messages"]] for b in requests]
    call_ids = {c["id"] for b in with_result for m in b["messages"] for c in m.get("tool_calls") or ()}
    result_ids = {m["tool_call_id"] for b in with_result for m in b["messages"] if m.get("role") == "tool"}
    assert result_ids and result_ids <= call_ids  # every result answers a call the tier saw


def prefix_kept(requests: list[dict[str, Any]]) -> None:
    """What the tier sees of a session's main loop only grows: each call's messages start with the
    previous call's, byte for byte as the router rewrote them, and its tools are the same — so a
    server that kept the previous prompt (router/sessions/affinity.py) reads only the new tokens."""
    main = [b for b in requests if b.get("tools")]
    assert len(main) >= 2
    for before, after in itertools.pairwise(main):
        assert orjson.dumps(after["tools"]) == orjson.dumps(before["tools"])
        n = len(before["messages"])
        assert orjson.dumps(after["messages"][:n]) == orjson.dumps(before["messages"]), (n, len(after["messages"]))


async def test_claude_code(stack: Stack, tmp_path: Path) -> None:
    claude = cli("claude")
    home, work = workdir(tmp_path)
    env = clean_env(home, ANTHROPIC_BASE_URL=stack.base, ANTHROPIC_API_KEY="sk-ant-dummy")
    code, out, err = await run_cli([str(claude), "-p", TASK, "--output-format", "json"], work, env)
    assert code == 0, f"exit {code}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    result = orjson.loads(out)
    assert result["type"] == "result" and result["is_error"] is False, result
    assert isinstance(result["result"], str) and result["result"].strip()  # the final text answer
    assert result["num_turns"] >= 2
    assert stack.seen.failures() == []
    assert any(path == "/v1/messages" for _, path, _ in stack.seen.http)
    requests = await stack.chat_requests()
    tool_loop([b for b in requests if b.get("tools")])  # side calls (titles, ...) carry no tools
    prefix_kept(requests)
    assert any(m["role"] == "system" for b in requests for m in b["messages"][1:])  # mid-conversation system


def codex_home(tmp_path: Path, base: str, *, websockets: bool) -> Path:
    """A CODEX_HOME whose config only points the model provider at the router (and turns analytics
    and update checks off); the model and every feature stay Codex's defaults."""
    home = tmp_path / "codex"
    home.mkdir()
    (home / "config.toml").write_text(
        f"""model_provider = "router"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.router]
name = "agent-router"
base_url = "{base}/v1"
wire_api = "responses"
env_key = "ROUTER_API_KEY"
supports_websockets = {"true" if websockets else "false"}
"""
    )
    return home


@pytest.mark.parametrize("transport", ["http", "websocket"])
async def test_codex(stack: Stack, tmp_path: Path, transport: str) -> None:
    codex = cli("codex")
    home, work = workdir(tmp_path)
    config = codex_home(tmp_path, stack.base, websockets=transport == "websocket")
    last = tmp_path / "last-message.txt"
    env = clean_env(home, CODEX_HOME=str(config), ROUTER_API_KEY="dummy")
    argv = [str(codex), "exec", "--skip-git-repo-check", "--output-last-message", str(last), TASK]
    code, out, err = await run_cli(argv, work, env)
    assert code == 0, f"exit {code}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    final = last.read_text().strip()
    assert final and final in out  # the final text answer, printed
    assert stack.seen.failures() == []
    posts = [path for method, path, _ in stack.seen.http if method == "POST" and path == "/v1/responses"]
    if transport == "websocket":
        assert "/v1/responses" in stack.seen.websockets and posts == []
    else:
        assert posts and stack.seen.websockets == []
    tool_loop(await stack.chat_requests())
    prefix_kept(await stack.chat_requests())


async def test_codex_sends_its_turn_over_http_when_websocket_mode_is_off(start_fake_: Any, tmp_path: Path) -> None:
    """A provider with `supports_websockets = true` in front of a router whose WebSocket mode is off
    (`ws_enabled`): the handshake is answered 426, and Codex finishes its turn over HTTP having
    dialled exactly one socket (any other refusal it retries first)."""
    codex = cli("codex")
    fake = await start_fake_(FakeConfig(finish_after=1, prefer_tools=PREFERRED))
    policy = policy_text(fake.url, extra='aliases: {"*": auto}\n')
    async with routed(policy, tmp_path, ws_enabled=False) as (base, seen):
        home, work = workdir(tmp_path)
        config = codex_home(tmp_path, base, websockets=True)
        last = tmp_path / "last-message.txt"
        env = clean_env(home, CODEX_HOME=str(config), ROUTER_API_KEY="dummy")
        argv = [str(codex), "exec", "--skip-git-repo-check", "--output-last-message", str(last), TASK]
        code, out, err = await run_cli(argv, work, env)
        assert code == 0, f"exit {code}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
        assert last.read_text().strip()
        assert seen.websockets == ["/v1/responses"]  # one socket, refused with 426
        posts = [path for method, path, _ in seen.http if method == "POST" and path == "/v1/responses"]
        assert len(posts) >= 2 and seen.failures() == []
    tool_loop([r["body"] for r in await fake_requests(fake.url)])


async def test_claude_code_runs_on_a_tier_named_as_its_model_picker_keeps_it(start_fake_: Any, tmp_path: Path) -> None:
    """`claude --model claude-router-fast`: a name Claude Code's gateway discovery keeps (it matches
    /(claude|anthropic)/i, router/api/admin.py lists it) pins the session's main loop to the fast tier."""
    claude = cli("claude")
    fast = await start_fake_(FakeConfig(finish_after=1, prefer_tools=PREFERRED, model="fast-model"))
    full = await start_fake_(FakeConfig(finish_after=1, prefer_tools=PREFERRED, model="full-model"))
    policy = policy_text(fast.url, full.url, extra='aliases: {"*": auto}\n')
    async with routed(policy, tmp_path) as (base, seen):
        home, work = workdir(tmp_path)
        env = clean_env(home, ANTHROPIC_BASE_URL=base, ANTHROPIC_API_KEY="sk-ant-dummy")
        argv = [str(claude), "-p", TASK, "--model", "claude-router-fast", "--output-format", "json"]
        code, out, err = await run_cli(argv, work, env)
        assert code == 0, f"exit {code}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
        result = orjson.loads(out)
        assert result["is_error"] is False and result["num_turns"] >= 2, result
        assert seen.failures() == []
    on_fast = [r["body"] for r in await fake_requests(fast.url)]
    on_full = [r["body"] for r in await fake_requests(full.url)]
    tool_loop([b for b in on_fast if b.get("tools")])
    assert not [b for b in on_full if b.get("tools")]  # side calls (no tools) may go where the routes say


@pytest.mark.parametrize("transport", ["http", "websocket"])
async def test_codex_resumes_its_session_after_the_router_restarts(
    start_fake_: Any, tmp_path: Path, transport: str
) -> None:
    """One turn through a router with an in-memory store; the router restarts (nothing of the session
    kept); `codex exec resume --last` goes on with the same session through the new one to an answer."""
    codex = cli("codex")
    fake = await start_fake_(FakeConfig(finish_after=1, prefer_tools=PREFERRED))
    policy = policy_text(fake.url, extra='aliases: {"*": auto}\n')
    home, work = workdir(tmp_path)
    last = tmp_path / "last-message.txt"
    turns: list[list[Any]] = []
    for i, argv in enumerate(
        (["exec", "--skip-git-repo-check", "--output-last-message", str(last), TASK],
         ["exec", "resume", "--last", "--skip-git-repo-check", "--output-last-message", str(last),
          "Now tell me which of those files is the largest."])
    ):  # fmt: skip
        run = tmp_path / f"run-{i}"
        run.mkdir()
        async with routed(policy, run) as (base, seen):  # a new router each time: the first one's state is gone
            config = codex_home(run, base, websockets=transport == "websocket")
            env = clean_env(home, CODEX_HOME=str(config), ROUTER_API_KEY="dummy")
            if i:  # the session Codex recorded, kept where it looks for it
                (config / "sessions").symlink_to(tmp_path / "run-0" / "codex" / "sessions")
            code, out, err = await run_cli([str(codex), *argv], work, env)
            assert code == 0, f"exit {code}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
            assert last.read_text().strip()
            turns.append(seen.failures())
    assert turns == [[], []]
    bodies = [r["body"] for r in await fake_requests(fake.url)]
    resumed = bodies[-1]["messages"]
    assert any("largest" in str(m.get("content")) for m in resumed)  # the second prompt
    assert any("List the files" in str(m.get("content")) for m in resumed)  # with the first turn's history
