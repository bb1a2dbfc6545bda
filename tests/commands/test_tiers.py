"""router/commands/tiers.py: a user's GGUF made a tier (facts, refusals, fitting memory) and a server
the user runs probed — the fake upstream here; a real llama.cpp server in tests/e2e/test_local.py."""

from __future__ import annotations

import asyncio
import socket
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from router.commands.tiers import ModelFacts, TierError, fit, gguf_model, model_facts, probe
from router.fake.server import FakeServer
from tests.commands.test_gguf import write_gguf

TOOLS_TEMPLATE = "{%- if tools %}<tools>{{ tools | tojson }}</tools>{% endif %}{% for m in messages %}{% endfor %}"


def _llama(path: Path, **extra: Any) -> Path:
    meta = {
        "general.architecture": "llama",
        "general.name": "Llama 3.1 8B Instruct",
        "llama.block_count": 32,
        "llama.context_length": 131072,
        "llama.embedding_length": 4096,
        "llama.attention.head_count": 32,
        "llama.attention.head_count_kv": 8,
        "tokenizer.chat_template": TOOLS_TEMPLATE,
    }
    return write_gguf(path, {**meta, **extra})


def test_a_gguf_says_its_context_template_and_kv_size(tmp_path: Path) -> None:
    facts = model_facts(_llama(tmp_path / "llama.gguf"))
    assert (facts.name, facts.context, facts.calls_tools) == ("Llama 3.1 8B Instruct", 131072, True)
    assert facts.kv_bytes_per_token == 32 * 8 * (128 + 128) * 2  # 128 KiB a token: llama.cpp's f16 K and V
    explicit = model_facts(_llama(tmp_path / "mla.gguf", **{"llama.attention.key_length": 192,
                                                           "llama.attention.value_length": 128}))  # fmt: skip
    assert explicit.kv_bytes_per_token == 32 * 8 * (192 + 128) * 2


def test_what_up_cannot_serve_to_agents_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "weights.bin").write_bytes(b"\0" * 64)
    no_template = write_gguf(tmp_path / "base.gguf", {"general.architecture": "llama"})
    no_tools = _llama(tmp_path / "chat.gguf", **{"tokenizer.chat_template": "{% for m in messages %}{% endfor %}"})
    cases = {
        tmp_path / "missing.gguf": "no model file at",
        tmp_path / "weights.bin": "is not a GGUF model file",
        no_template: "has no chat template",
        no_tools: "chat template has no tool calling",
    }
    for path, says in cases.items():
        with pytest.raises(TierError, match=says) as caught:
            gguf_model(path)
        assert "\n" not in str(caught.value)
    assert gguf_model(_llama(tmp_path / "ok.gguf")).calls_tools


def test_the_context_fits_memory() -> None:
    facts = ModelFacts("m", context=131072, template=TOOLS_TEMPLATE, kv_bytes_per_token=128 * 1024)
    gib = 1024**3
    assert fit(facts, 4, None, 64 * gib) == (131072, "the model's context")  # 64 GiB for 4 x 128k x 128 KiB
    assert fit(facts, 4, 32768, 64 * gib) == (32768, "as asked")
    tokens, why = fit(facts, 4, None, 8 * gib)
    assert tokens == 16384 and why == "capped by memory (the model's context is 131,072)"
    assert tokens * 4 * facts.kv_bytes_per_token <= 8 * gib
    with pytest.raises(TierError, match=r"4 slots of 2,048 tokens need 1\.0 GiB of KV cache, 0\.5 GiB is left"):
        fit(facts, 4, None, gib // 2)
    unknown = ModelFacts("m", context=0, template="", kv_bytes_per_token=0)
    assert fit(unknown, 4, None, 8 * gib) == (32768, "memory not measured")


async def test_a_running_server_is_probed(fake: FakeServer) -> None:
    tier = await asyncio.to_thread(probe, "full", fake.url.removesuffix("/v1"))
    listed = (await asyncio.to_thread(urllib.request.urlopen, fake.url + "/models")).read()
    assert tier.api_base == fake.url and tier.model.encode() in listed
    assert (tier.slots, tier.server) == (0, None)  # no llama.cpp /props: no slots to pin
    assert tier.environment() == {
        "FULL_MODEL": tier.model, "FULL_API_BASE": fake.url, "FULL_SLOTS": "0", "FULL_WARM": "false",
    }  # fmt: skip
    with pytest.raises(TierError, match="does not serve 'gpt-9'"):
        await asyncio.to_thread(probe, "full", fake.url, "gpt-9")


def test_a_url_that_does_not_answer_is_refused_in_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TierError, match=rf"fast: http://127.0.0.1:{port}/v1/models did not answer") as caught:
        probe("fast", f"http://127.0.0.1:{port}")
    assert "\n" not in str(caught.value)
    with pytest.raises(TierError, match="is not an http"):
        probe("fast", "127.0.0.1:8000")
