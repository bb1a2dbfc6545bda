"""Context windows against llama.cpp's server (the default engine): two of them, Qwen2.5-Coder-0.5B with small
contexts (a fast tier of FAST_CTX tokens, a full tier of FULL_CTX), behind the real router.

The windows the router reports are the servers' own; count_tokens counts as the tier counts the
prompt it answers; a prompt too long for fast is answered by full; one too long for both is the
client's own context error with the servers' numbers.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from router.commands.llama import ChildFailed, LlamaServer
from router.commands.models import QWEN25_CODER_0_5B, ensure
from tests.conftest import policy_text
from tests.e2e.conftest import CALL_TIMEOUT, READY_TIMEOUT

pytestmark = [pytest.mark.llama, pytest.mark.timeout(600)]

FAST_CTX, FULL_CTX = 512, 2048
READ = {
    "name": "read_file",
    "description": "Read a file of the repository",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}
PROSE = "The router reads each request once and sends it to the tier whose context it fits. "


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LlamaServer, LlamaServer]]:
    model = ensure(QWEN25_CODER_0_5B, show_progress=False)  # cached by scripts/install: no download here
    logs = tmp_path_factory.mktemp("context")
    pair = tuple(
        LlamaServer(name, model, _free_port(), logs / f"{name}.log", alias=QWEN25_CODER_0_5B.alias, n_ctx=n_ctx)
        for name, n_ctx in (("fast", FAST_CTX), ("full", FULL_CTX))
    )
    try:
        for server in pair:
            server.start()
        for server in pair:
            server.wait_ready(READY_TIMEOUT)
    except (ChildFailed, TimeoutError) as exc:
        for server in pair:
            server.stop()
        pytest.fail(f"llama.cpp did not start: {exc}\n" + "\n".join(line for s in pair for line in s.tail()))
    try:
        yield pair[0], pair[1]
    finally:
        for server in pair:
            server.stop()


@pytest.fixture
async def proxy(servers: tuple[LlamaServer, LlamaServer], proxy_: Any) -> Any:
    fast, full = servers
    text = policy_text(fast.url, full.url, extra="escalation: {to: full}\n")
    text = text.replace("first_token: 5, total: 20", "first_token: 120, total: 300")  # a prefill on one thread
    running = await proxy_(text)
    await running.runtime.windows.settled(10)
    return running


def claude(proxy: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=proxy.base, api_key="x", max_retries=0, timeout=CALL_TIMEOUT)


async def test_the_windows_reported_are_the_servers(proxy: Any) -> None:
    sdk = openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0, timeout=CALL_TIMEOUT)
    listed = {m.id: m.model_extra["context_window"] for m in (await sdk.models.list()).data}
    expected = [("fast", FAST_CTX), ("full", FULL_CTX), ("auto", FULL_CTX)]
    expected += [("claude-router", FULL_CTX), ("claude-router-fast", FAST_CTX), ("claude-router-full", FULL_CTX)]
    assert listed == dict(expected)  # the same under the names Claude Code's model picker keeps
    page = await claude(proxy).models.list()
    assert [(m.id, m.max_input_tokens) for m in page.data] == expected


async def test_count_tokens_is_the_tiers_own_count(proxy: Any) -> None:
    client = claude(proxy)
    ask: list[Any] = [{"role": "user", "content": "Which file defines the router's policy model?"}]
    counted = await client.messages.with_raw_response.count_tokens(model="auto", messages=ask, tools=[READ])
    assert (counted.headers["x-router-tier"], counted.headers["x-router-count"]) == ("fast", "tokenizer")
    answer = await client.messages.with_raw_response.create(model="auto", max_tokens=8, messages=ask, tools=[READ])
    assert answer.headers["x-router-tier"] == "fast"
    assert (await counted.parse()).input_tokens == (await answer.parse()).usage.input_tokens


async def test_a_prompt_too_long_for_fast_is_answered_by_full(proxy: Any) -> None:
    ask: list[Any] = [{"role": "user", "content": PROSE * 40 + "Which file should I read?"}]  # ~700 tokens
    client = claude(proxy)
    answer = await client.messages.with_raw_response.create(model="auto", max_tokens=8, messages=ask, tools=[READ])
    assert answer.headers["x-router-tier"] == "full" and answer.headers["x-router-route"] == "simple-tool-call"
    assert FAST_CTX < (await answer.parse()).usage.input_tokens < FULL_CTX


async def test_a_prompt_too_long_for_every_tier_is_the_clients_own_error(proxy: Any) -> None:
    ask: list[Any] = [{"role": "user", "content": PROSE * 150}]  # ~2,500 tokens
    client = claude(proxy)
    counted = (await client.messages.count_tokens(model="auto", messages=ask)).input_tokens
    assert counted > FULL_CTX
    with pytest.raises(anthropic.BadRequestError) as info:
        await client.messages.create(model="auto", max_tokens=8, messages=ask)
    body = info.value.body
    assert isinstance(body, dict)
    assert body["error"] == {"type": "invalid_request_error",
                             "message": f"prompt is too long: {counted} tokens > {FULL_CTX} maximum"}  # fmt: skip
    sdk = openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0, timeout=CALL_TIMEOUT)
    with pytest.raises(openai.BadRequestError) as too_long:
        await sdk.chat.completions.create(model="auto", messages=[{"role": "user", "content": PROSE * 150}])
    assert too_long.value.code == "context_length_exceeded"
