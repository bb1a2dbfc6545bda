"""The end-to-end suite's servers: real llama.cpp (the default engine, as `up` runs it) serving
`up`'s real fast model, Qwen2.5-Coder-0.5B-Instruct, nothing mocked (it serves both tiers here, for
speed; tests/e2e/test_full_tier.py adds the real full tier, Qwen2.5-Coder-1.5B).

    llama         session: the fast and full llama.cpp servers (router/commands/llama.py's
                  LlamaServer), one slot each, started once on free ports — loading takes seconds
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

from router.commands.llama import ChildFailed, LlamaServer
from router.commands.models import QWEN25_CODER_0_5B, ensure
from tests.conftest import Proxy

ROOT = Path(__file__).resolve().parents[2]
LOCAL_POLICY = ROOT / "policies" / "local.yaml"
READY_TIMEOUT = 120.0
CALL_TIMEOUT = 90.0
# Small contexts bound how long a runaway generation can hold a server; the tests' prompts are short.
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
    model = ensure(QWEN25_CODER_0_5B, show_progress=False)  # cached by scripts/install: no download here
    logs = tmp_path_factory.mktemp("llama-logs")
    servers = [
        LlamaServer(name, model, _free_port(), logs / f"{name}.log", alias=QWEN25_CODER_0_5B.alias, n_ctx=N_CTX)
        for name in ("fast", "full")
    ]
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
    """policies/local.yaml as shipped; only the tiers' servers (its ${FAST_API_BASE}, ...) and the
    store differ: one slot each here, so no session is pinned and nothing warmed."""
    for server in (llama.fast, llama.full):
        if server.returncode is not None:
            pytest.fail(f"llama.cpp {server.name} died:\n" + "\n".join(server.tail()))
    local_tiers(monkeypatch, llama.fast, llama.full)
    return await proxy_(LOCAL_POLICY.read_text(), store="memory://")


def local_tiers(monkeypatch: pytest.MonkeyPatch, fast: LlamaServer, full: LlamaServer, full_slots: int = 0) -> None:
    """policies/local.yaml's environment for these servers, as `up` sets it: `full_slots` slots
    pinned on full (0: none), none on fast, no warm-ups."""
    for prefix, server, slots in (("FAST", fast, 0), ("FULL", full, full_slots)):
        monkeypatch.setenv(f"{prefix}_MODEL", server.alias)
        monkeypatch.setenv(f"{prefix}_API_BASE", server.url)
        monkeypatch.setenv(f"{prefix}_SLOTS", str(slots))
        monkeypatch.setenv(f"{prefix}_WARM", "false")


@pytest.fixture
async def client(local_proxy: Proxy) -> AsyncIterator[openai.AsyncOpenAI]:
    sdk = openai.AsyncOpenAI(base_url=local_proxy.url, api_key="x", max_retries=0, timeout=CALL_TIMEOUT)
    yield sdk
    await sdk.close()
