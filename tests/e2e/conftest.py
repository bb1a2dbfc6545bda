"""The end-to-end suite's servers: real llama.cpp Gemma 3 270M, nothing mocked (Gemma serves both
tiers here, for speed; tests/e2e/test_full_tier.py adds the real full tier, Qwen2.5-Coder-1.5B).

    llama         session: the fast and full llama-cpp-python servers (router/commands/llama.py's
                  LlamaServer), started once on free ports — loading the model takes seconds
    local_proxy   a real proxy (tests/conftest.py's `proxy_`) running policies/local.yaml against
                  them, with an in-memory store
    client        the official openai SDK pointed at that proxy

Every wait is bounded: the servers' readiness (READY_TIMEOUT), their stop (SIGTERM, then SIGKILL),
each SDK call (CALL_TIMEOUT) and each test (pytest-timeout).
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest

from router.commands.local import ChildFailed, LlamaServer, model_path
from tests.conftest import Proxy

ROOT = Path(__file__).resolve().parents[2]
LOCAL_POLICY = ROOT / "policies" / "local.yaml"
READY_TIMEOUT = 120.0
CALL_TIMEOUT = 90.0
# Small contexts bound how long a runaway generation can hold a server (tool-call arguments under
# tool_choice "auto" ignore max_tokens in llama-cpp-python 0.3.36); the tests' prompts are short.
N_CTX = 2048


@dataclass(frozen=True)
class Llama:
    fast: LlamaServer
    full: LlamaServer


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Llama]:
    model = model_path()
    logs = tmp_path_factory.mktemp("llama-logs")
    servers = [LlamaServer(name, model, _free_port(), logs / f"{name}.log", n_ctx=N_CTX) for name in ("fast", "full")]
    try:
        for server in servers:
            server.start()
        for server in servers:
            server.wait_ready(READY_TIMEOUT)
    except (ChildFailed, TimeoutError) as exc:
        tails = "\n".join(f"--- {s.log_path}\n" + "\n".join(s.tail()) for s in servers)
        for server in servers:
            server.stop()
        pytest.fail(f"llama.cpp servers did not start: {exc}\n{tails}")
    try:
        yield Llama(*servers)
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
async def local_proxy(llama: Llama, proxy_: Callable[..., Awaitable[Proxy]], monkeypatch: pytest.MonkeyPatch) -> Proxy:
    """policies/local.yaml as shipped; only the ports (its ${FAST_PORT}/${FULL_PORT}), the store and
    what `up --fast gemma-3-270m` sets differ: Gemma on llama-cpp-python, whose one context has no
    slots to pin a session to nor room for a warm-up beside a live call."""
    for server in (llama.fast, llama.full):
        if server.returncode is not None:
            pytest.fail(f"llama.cpp {server.name} died:\n" + "\n".join(server.tail()))
    gemma_tiers(monkeypatch, llama.fast.port, llama.full.port)
    return await proxy_(LOCAL_POLICY.read_text(), store="memory://")


def gemma_tiers(monkeypatch: pytest.MonkeyPatch, fast_port: int, full_port: int, full_slots: int = 0) -> None:
    """policies/local.yaml's environment for a Gemma fast tier (as `up --fast gemma-3-270m` sets it) and
    a full tier of `full_slots` slots (0: llama-cpp-python's one context), no warm-ups, loops cut on
    llama-server only."""
    monkeypatch.setenv("FAST_PORT", str(fast_port))
    monkeypatch.setenv("FULL_PORT", str(full_port))
    monkeypatch.setenv("FAST_MODEL", "gemma-3-270m")
    monkeypatch.setenv("FAST_SLOTS", "0")
    monkeypatch.setenv("FULL_SLOTS", str(full_slots))
    for name in ("FAST_WARM", "FULL_WARM", "FAST_CUT_LOOPS"):
        monkeypatch.setenv(name, "false")
    # llama-cpp-python's server refuses a stream with tools: no answer is read as one there
    monkeypatch.setenv("FULL_CUT_LOOPS", "true" if full_slots else "false")


@pytest.fixture
async def client(local_proxy: Proxy) -> AsyncIterator[openai.AsyncOpenAI]:
    sdk = openai.AsyncOpenAI(base_url=local_proxy.url, api_key="x", max_retries=0, timeout=CALL_TIMEOUT)
    yield sdk
    await sdk.close()
