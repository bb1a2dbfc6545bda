"""Claude Code and Codex finish small real tasks on the product's own local models, as `up` runs them:
llama-server with Qwen2.5-Coder-0.5B (fast) and -1.5B (full), slots of 32k tokens that keep each
session's prompt, and the proxy with policies/local.yaml (router/commands/local.py's processes).

Each agent runs unmodified on its default model: read a file and answer with a word from it, and
make a one-line edit. What must hold: the agent ends on its own (exit 0) with the task done. Not in
the default run: on Claude Code's prompt the 0.5B answers with a line of its system prompt instead of
reading the file, and the 1.5B searches for tools first (docs/local.md, "What agents do on these models"). The
first turn of each agent reads its whole prompt (Claude Code's ~12k tokens, Codex's ~13k) on a CPU
core, minutes; the runs of one agent share a working directory, so the next run's prompt opens as
the last one's did and its session starts from that slot's prompt (router/sessions/affinity.py).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from router.commands.llama import Child, ChildFailed
from router.commands.local import local_children
from router.commands.models import QWEN25_CODER_0_5B, QWEN25_CODER_1_5B, ensure
from tests.agents.conftest import clean_env, cli, run_cli
from tests.agents.test_cli import codex_home

# not in the default run (pyproject.toml's addopts): `scripts/test -m local_agents tests/agents/test_local_models.py`
pytestmark = [pytest.mark.agents, pytest.mark.llama, pytest.mark.local_agents, pytest.mark.timeout(1500)]

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT = 1200.0  # s per agent run: a cold agent prompt is read at tens of tokens a second
SECRET = "PELICAN"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def local_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """fast + full llama.cpp servers and `agent-router serve --policy policies/local.yaml`, as `up` starts
    them (4 slots of 32k tokens each); the proxy's base URL."""
    logs = tmp_path_factory.mktemp("local-up")
    ports = {"fast": _free_port(), "full": _free_port(), "proxy": _free_port()}
    fast, full, proxy = local_children(
        ROOT / "policies" / "local.yaml", ports["proxy"], ports["fast"], ports["full"],
        fast_model=ensure(QWEN25_CODER_0_5B, show_progress=False),
        full_model=ensure(QWEN25_CODER_1_5B, show_progress=False), log_dir=logs,
        env={"AGENT_ROUTER_STORE": "memory://"},
    )  # fmt: skip
    children: list[Child] = [fast, full, proxy]
    try:
        for child in children:
            child.start()
        for child in children:
            child.wait_ready(120.0)
    except (ChildFailed, TimeoutError) as exc:
        for child in children:
            child.stop()
        pytest.fail(f"the local tiers did not start: {exc}\n" + "\n".join(line for c in children for line in c.tail()))
    try:
        yield f"http://127.0.0.1:{ports['proxy']}"
    finally:
        for child in reversed(children):
            child.stop()
        print("\n".join(["--- router log (tail)", *proxy.tail(40)]))


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A HOME and a working directory for every run of one module: the agents' prompts open the same way."""
    root = tmp_path_factory.mktemp("agent")
    home, work = root / "home", root / "work"
    home.mkdir()
    work.mkdir()
    return home, work


def reset(work: Path) -> None:
    for path in work.iterdir():
        if path.is_file():
            path.unlink()
    (work / "notes.txt").write_text(f"Meeting notes.\nThe secret word is {SECRET}.\n")
    (work / "main.py").write_text("print('hello')\n")


async def claude(base: str, home: Path, work: Path, task: str) -> tuple[int, str, str]:
    env = clean_env(home, ANTHROPIC_BASE_URL=base, ANTHROPIC_API_KEY="sk-ant-local")
    argv = [str(cli("claude")), "-p", task, "--output-format", "json", "--permission-mode", "acceptEdits"]
    return await run_cli(argv, work, env, bound=RUN_TIMEOUT)


async def codex(base: str, home: Path, work: Path, task: str, *, websockets: bool) -> tuple[int, str, str]:
    config = codex_home(home, base, websockets=websockets)
    env = clean_env(home, CODEX_HOME=str(config), ROUTER_API_KEY="local")
    argv = [str(cli("codex")), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", task]
    return await run_cli(argv, work, env, bound=RUN_TIMEOUT)


async def test_claude_code_reads_a_file_and_answers(local_up: str, workspace: tuple[Path, Path]) -> None:
    home, work = workspace
    reset(work)
    task = "What is the secret word in notes.txt? Answer with the word only."
    code, out, err = await claude(local_up, home, work, task)
    assert code == 0, f"exit {code}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    result = orjson.loads(out)
    assert result["is_error"] is False and SECRET.lower() in result["result"].lower(), result


async def test_claude_code_makes_a_one_line_edit(local_up: str, workspace: tuple[Path, Path]) -> None:
    home, work = workspace
    reset(work)
    task = "In main.py, change the word hello to goodbye. Change nothing else."
    code, out, err = await claude(local_up, home, work, task)
    assert code == 0, f"exit {code}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    assert "goodbye" in (work / "main.py").read_text()


@pytest.mark.parametrize("websockets", [False, True], ids=["http", "websocket"])
async def test_codex_reads_a_file_and_answers(local_up: str, workspace: tuple[Path, Path], websockets: bool) -> None:
    home, work = workspace
    reset(work)
    home = home / ("codex-ws" if websockets else "codex-http")
    home.mkdir(exist_ok=True)
    task = "What is the secret word in notes.txt? Answer with the word only."
    code, out, err = await codex(local_up, home, work, task, websockets=websockets)
    assert code == 0, f"exit {code}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    assert SECRET.lower() in out.lower(), out[-2000:]
