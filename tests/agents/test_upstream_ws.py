"""Codex, unmodified, through WebSocket tiers (`websocket: true`, router/upstream/responses_ws.py):
`codex exec` over the router's WebSocket mode and over HTTP ends on its own (exit 0), the router
answers no error, and the tiers' fakes got Codex's turns on their own sockets — over the router's
WebSocket, Codex's warm-up reaches the tiers (their sockets opened, `generate: false` on the one it is
routed to) and its turns after the first continue the tier's chain with only their new input.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from router.fake import FakeConfig, FakeServer
from tests.agents.conftest import PREFERRED, Tiers, clean_env, cli, routed, run_cli, workdir
from tests.agents.test_cli import codex_home
from tests.responses.conftest import fake_log, socket_messages

pytestmark = [pytest.mark.agents, pytest.mark.timeout(240)]

KEY = "sk-test-upstream-ws"
TASK = "List the files in this directory, then tell me in one sentence what you found."


def policy(fast: FakeServer, full: FakeServer) -> str:
    def tier(name: str, fake: FakeServer) -> str:
        return (f"  {name}:\n    model: openai/gpt-{name}-1\n    api_base: {fake.url}\n    api_key: {KEY}\n"
                "    apis: [responses]\n    websocket: true\n")  # fmt: skip

    return (
        "version: 1\nmodels:\n" + tier("fast", fast) + tier("full", full) + 'aliases: {"*": auto}\n'
        + "routes:\n  - name: tool-calls\n    when: {tools: {present: true}}\n    use: fast\n"
        + "  - name: default\n    use: full\n"
        + "escalation: {to: full, after_agent_error: {repeated_call: false}}\nstore: memory://\n"
    )  # fmt: skip


@pytest.fixture
async def tiers(start_fake_: Callable[..., Awaitable[FakeServer]], tmp_path: Path) -> AsyncIterator[Tiers]:
    fast = await start_fake_(FakeConfig(seed=1, api_key=KEY, finish_after=2, prefer_tools=PREFERRED))
    full = await start_fake_(FakeConfig(seed=2, api_key=KEY, finish_after=2, prefer_tools=PREFERRED))
    async with routed(policy(fast, full), tmp_path) as (base, seen):
        yield Tiers(fast, full, base, seen)


@pytest.mark.parametrize("transport", ["http", "websocket"])
async def test_codex_through_websocket_tiers(tiers: Tiers, tmp_path: Path, transport: str) -> None:
    home, work = workdir(tmp_path)
    config = codex_home(tmp_path, tiers.base, websockets=transport == "websocket")
    env = clean_env(home, CODEX_HOME=str(config), ROUTER_API_KEY="dummy")
    code, out, err = await run_cli([str(cli("codex")), "exec", "--skip-git-repo-check", TASK], work, env)
    assert code == 0, f"exit {code}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    assert tiers.seen.failures() == []
    fast = await fake_log(tiers.fast.url)
    sent = socket_messages(fast) + socket_messages(await fake_log(tiers.full.url))
    assert socket_messages(fast), "fast got no turn on its socket"
    assert [e for e in fast if e["method"] == "POST" and e["path"] == "/v1/responses"] == []
    if transport == "websocket":  # Codex chains its turns: the tiers' sockets carry only what each adds
        # its warm-up (no input, no tools: routed to full) went upstream as `generate: false`
        assert [m["body"].get("generate") for m in sent].count(False) == 1
        turns = [m for m in sent if m["body"].get("generate") is not False]
        continued = [m["bytes"] for m in turns if "previous_response_id" in m["body"]]
        whole = [m["bytes"] for m in turns if "previous_response_id" not in m["body"]]
        assert continued and whole and max(continued) < min(whole) / 5
