"""The full tier as `agent-router up` serves it: Qwen2.5-Coder-1.5B-Instruct, reassembled from its
pinned PyPI wheels (router/commands/models.py), behind policies/local.yaml as shipped.

The rest of the e2e suite runs Qwen2.5-Coder-0.5B in both tiers for speed (a 1.5B answer takes
seconds to minutes on a shared 2-core machine); these few checks are what is specific to the real
full tier: a tool call with no system message, answered by full, arrives as a structured call; the
prompt the scorer writes is the one the server renders; the one-prefill verifier's forced scoring.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import openai
import orjson
import pytest

from router.commands.llama import ChildFailed, LlamaServer
from router.commands.models import QWEN25_CODER_1_5B, ensure
from router.policy.model import Tier
from router.upstream.openai_compat import OpenAICompatUpstream
from tests.conftest import Proxy
from tests.e2e.conftest import LOCAL_POLICY, N_CTX, READY_TIMEOUT, Llama, local_tiers

pytestmark = [pytest.mark.llama, pytest.mark.timeout(600)]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    model = ensure(QWEN25_CODER_1_5B, show_progress=False)  # cached by scripts/install: no download here
    log = tmp_path_factory.mktemp("qwen") / "full.log"
    server = LlamaServer("full", model, _free_port(), log, alias=QWEN25_CODER_1_5B.alias, n_ctx=N_CTX)
    try:
        server.start()
        server.wait_ready(READY_TIMEOUT)
    except (ChildFailed, TimeoutError) as exc:
        server.stop()
        pytest.fail(f"the Qwen server did not start: {exc}\n" + "\n".join(server.tail()))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def real_tiers(
    llama: Llama,
    qwen: LlamaServer,
    proxy_: Callable[..., Awaitable[Proxy]],
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[openai.AsyncOpenAI]:
    local_tiers(monkeypatch, llama.fast, qwen)
    proxy = await proxy_(LOCAL_POLICY.read_text(), store="memory://")
    sdk = openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0, timeout=540.0)
    yield sdk
    await sdk.close()


def test_the_assembled_model_is_the_recorded_one() -> None:
    path = ensure(QWEN25_CODER_1_5B, show_progress=False)
    assert path.stat().st_size == QWEN25_CODER_1_5B.size
    with path.open("rb") as f:
        assert f.read(4) == b"GGUF"


async def test_full_answers_a_tool_call_without_a_system_message(real_tiers: openai.AsyncOpenAI) -> None:
    raw = await real_tiers.chat.completions.with_raw_response.create(
        model="full",  # the tier's own name: straight to full
        messages=[{"role": "user", "content": "What is the weather in Paris right now?"}],
        tools=[WEATHER],
        max_tokens=128,
    )
    assert raw.headers["x-router-tier"] == "full"
    message = raw.parse().choices[0].message
    [call] = message.tool_calls or []
    assert call.function.name == "get_weather"
    assert "paris" in str(orjson.loads(call.function.arguments).get("city", "")).lower()
    # Qwen writes its calls as text under its own template: the structured call is salvage's work
    assert raw.headers["x-router-salvaged"] == "true"


async def test_full_streams_a_tool_call_too(real_tiers: openai.AsyncOpenAI) -> None:
    """The text call is held (it opens like one), salvaged, and released as tool-call deltas."""
    stream = await real_tiers.chat.completions.create(
        model="full",
        messages=[{"role": "user", "content": "What is the weather in Paris right now?"}],
        tools=[WEATHER],
        max_tokens=128,
        stream=True,
    )
    name, arguments, text, finishes = "", "", "", []
    async for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for tc in choice.delta.tool_calls or []:
                name += (tc.function.name or "") if tc.function else ""
                arguments += (tc.function.arguments or "") if tc.function else ""
            if choice.finish_reason:
                finishes.append(choice.finish_reason)
    assert (name, finishes, text) == ("get_weather", ["tool_calls"], "")
    assert "paris" in str(orjson.loads(arguments).get("city", "")).lower()


def test_the_scoring_prompt_is_what_the_models_template_renders() -> None:
    """router/upstream/scoring.py writes Qwen's prompt itself for `via: echo` (llama-cpp-python's
    server, which renders the GGUF's template with Jinja2 as the messages come: a call's arguments
    stay the string they are, and `tojson` is plain json.dumps): it must be that, byte for byte."""
    import json

    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from router.commands.gguf import read_metadata
    from router.upstream.scoring import chatml_prompt

    source = read_metadata(ensure(QWEN25_CODER_1_5B, show_progress=False))["tokenizer.chat_template"]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda value, **_: json.dumps(value)
    template = env.from_string(source)
    tool = {**WEATHER, "function": {**WEATHER["function"], "description": "City's <weather> & more"}}
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    conversations = [
        [{"role": "user", "content": "Weather in Paris?"}],
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ],
    ]
    for messages in conversations:
        rendered = template.render(messages=messages, tools=[tool], add_generation_prompt=True, eos_token="<|im_end|>")
        assert chatml_prompt(messages, [tool]) == rendered


async def test_forced_scoring_ranks_the_right_call_above_a_wrong_one(qwen: LlamaServer) -> None:
    """`verify: {kind: score, via: forced}` against llama.cpp's server: the call's tokens under a grammar."""
    tier = Tier(model="openai/qwen", api_base=qwen.url, warm_connections=0, tools_system="You are a helpful assistant.")
    upstream = OpenAICompatUpstream("full", tier)
    await upstream.start(warm=False)
    body = {"messages": [{"role": "user", "content": "What is the weather in Paris right now?"}], "tools": [WEATHER]}
    try:
        deadline = asyncio.get_running_loop().time() + 300
        calls = [{"function": {"name": "get_weather", "arguments": f'{{"city": "{c}"}}'}} for c in ("Paris", "Oslo")]
        right, wrong = [await upstream.score_call(body, c, deadline, None, "forced") for c in calls]
    finally:
        await upstream.close()
    assert right is not None and wrong is not None
    assert min(len(right), len(wrong)) >= 5  # the name and arguments' tokens
    assert min(right) > -1.0 and min(wrong) < -5.0  # "Oslo" is unlikely given a question about Paris
