"""What `agent-router up` serves for each tier: a packed model, a GGUF file of the user's, or a server
the user already runs — each turned into what the policy needs (model id, base URL, slots, context).

    Tier              one tier as `up` runs it: the model id and base URL the policy reads, its slots
                      (0: no pinning), its context per slot, and the server `up` starts (None: the user's)
    ModelFacts        what a GGUF says of itself: name, trained context, chat template (tool calling?),
                      bytes of KV cache per token of context
    model_facts()     ModelFacts of a GGUF file (router/commands/gguf.py reads the header)
    fit()             the context per slot that fits memory: the model's trained context (or --ctx),
                      capped so both servers' KV caches fit in what /proc/meminfo says is available
    probe()           a running server at a URL (llama-server, vLLM, SGLang, Ollama, LM Studio): its model
                      id, context and slots — llama.cpp's /props, vLLM's and SGLang's `max_model_len`
    TierError         bad input, in one line: a path that is not a GGUF, a template with no tool
                      calling, a URL that does not answer, too little memory (never a traceback)

Session affinity where the engine has it: llama.cpp's slots (`id_slot` + `cache_prompt`); vLLM and
SGLang cache prefixes themselves, so a tier there gets no slots (only replica affinity applies), and
neither do servers that say nothing of slots.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from router.commands.gguf import GGUFError, read_metadata
from router.commands.llama import CACHE_RAM, LlamaServer
from router.upstream.context import props_window, served_window

PROBE_TIMEOUT = 5.0  # seconds for each request of a probe
KV_SHARE = 0.8  # of the memory left after the model files and prompt caches, what KV caches may take
MIN_CONTEXT = 2048  # tokens per slot below which a tier is refused (an agent's prompt alone is larger)
_GIB = 1024**3


class TierError(ValueError):
    """A tier `up` cannot serve; the message says why in one line."""


@dataclass(frozen=True, slots=True)
class Tier:
    name: str  # fast | full
    model: str  # the model id the policy sends (a server's alias, or what the user's server lists)
    api_base: str  # OpenAI base URL, ends with /v1
    slots: int  # slots a session is pinned to (0: none)
    context: int | None  # tokens per slot (None: the server did not say)
    source: str  # for people: the file or URL, and how it is served
    server: LlamaServer | None = None  # what `up` starts; None: the user's own server

    def environment(self) -> dict[str, str]:
        """What policies/local.yaml reads for this tier (`${FAST_MODEL}`, `${FAST_API_BASE}`, ...)."""
        prefix = self.name.upper()
        return {
            f"{prefix}_MODEL": self.model,
            f"{prefix}_API_BASE": self.api_base,
            f"{prefix}_SLOTS": str(self.slots),
            f"{prefix}_WARM": str(self.slots > 0).lower(),  # a warm-up reads a prompt into a session's slot
        }


@dataclass(frozen=True, slots=True)
class ModelFacts:
    name: str
    context: int  # tokens the model was trained with (0: the file does not say)
    template: str  # the chat template in the file ("" when it has none)
    kv_bytes_per_token: int  # f16 K and V over every layer (0: the file does not say)

    @property
    def calls_tools(self) -> bool:
        """Does its chat template show tools to the model? (llama.cpp's `--jinja` renders it)"""
        return "tools" in self.template


def model_facts(path: Path) -> ModelFacts:
    try:
        meta = read_metadata(path)
    except GGUFError as exc:
        raise TierError(str(exc)) from None
    arch = str(meta.get("general.architecture") or "")

    def number(key: str) -> int:
        value = meta.get(f"{arch}.{key}")
        if isinstance(value, list):  # per-layer values: the largest
            value = max((v for v in value if isinstance(v, int | float)), default=0)
        return int(value) if isinstance(value, int | float) else 0

    layers, kv_heads, heads = number("block_count"), number("attention.head_count_kv"), number("attention.head_count")
    kv_heads = kv_heads or heads
    key_dim = number("attention.key_length") or (number("embedding_length") // heads if heads else 0)
    value_dim = number("attention.value_length") or key_dim
    template = meta.get("tokenizer.chat_template")
    return ModelFacts(
        name=str(meta.get("general.name") or path.stem),
        context=number("context_length"),
        template=template if isinstance(template, str) else "",
        kv_bytes_per_token=layers * kv_heads * (key_dim + value_dim) * 2,  # f16: 2 bytes each
    )


def gguf_model(path: Path) -> ModelFacts:
    """The facts of a user's GGUF, refused in one line when `up` cannot make an agent's tier of it."""
    if not path.is_file():
        raise TierError(f"no model file at {path}")
    facts = model_facts(path)
    if not facts.template:
        raise TierError(f"{path.name} has no chat template: llama.cpp would guess one with no tool calling")
    if not facts.calls_tools:
        raise TierError(f"{path.name}'s chat template has no tool calling (it never shows `tools` to the model)")
    return facts


def available_memory() -> int:
    """Bytes the kernel says new processes can take (/proc/meminfo's MemAvailable; 0 where unknown)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def fit(facts: ModelFacts, slots: int, asked: int | None, share: int, *, minimum: int = MIN_CONTEXT) -> tuple[int, str]:
    """(tokens per slot, why): `asked` (or the model's trained context), capped so that `slots` slots'
    KV caches fit in `share` bytes; TierError when fewer than `minimum` tokens would fit."""
    want = asked or facts.context or 32_768
    if facts.context:
        want = min(want, facts.context)
    if not facts.kv_bytes_per_token or share <= 0:
        return want, "memory not measured"
    fits = share // (slots * facts.kv_bytes_per_token) // 256 * 256
    if fits < minimum:
        raise TierError(
            f"{facts.name}: {slots} slots of {minimum:,} tokens need "
            f"{slots * minimum * facts.kv_bytes_per_token / _GIB:.1f} GiB of KV cache, {share / _GIB:.1f} GiB is "
            "left: lower --slots"
        )
    if fits < want:
        return fits, f"capped by memory (the model's context is {facts.context:,})"
    return want, "the model's context" if not asked else "as asked"


def memory_share(model_files: list[Path]) -> int:
    """Bytes of KV cache each of len(model_files) servers may take: what is available, less the model
    files (read into the page cache) and each server's prompt cache, times KV_SHARE, shared evenly."""
    files = sum(p.stat().st_size for p in model_files)
    left = available_memory() - files - len(model_files) * CACHE_RAM * 1024 * 1024
    return int(max(0, left) * KV_SHARE) // max(1, len(model_files))


# -- a server the user runs ------------------------------------------------------------------------
def base_url(url: str) -> str:
    """The OpenAI base URL of a server given as http://host:port or http://host:port/v1."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise TierError(f"{url!r} is not an http:// or https:// URL")
    return url if url.endswith("/v1") else url + "/v1"


def _get(url: str, api_key: str | None) -> Any:
    request = urllib.request.Request(url, headers={"authorization": f"Bearer {api_key}"} if api_key else {})
    with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT) as resp:
        return json.loads(resp.read(4 * 1024 * 1024))


def probe(name: str, url: str, model: str | None = None, api_key: str | None = None) -> Tier:
    """The tier a running server at `url` makes: `model` (else the only or first model it lists),
    its context (llama.cpp's /props, else the model list's `max_model_len` or `meta.n_ctx`) and its
    slots (llama.cpp's /props `total_slots`; 0 for every other server)."""
    api_base = base_url(url)
    try:
        models = _get(api_base + "/models", api_key)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise TierError(f"{name}: {api_base}/models did not answer: {reason}") from None
    data = models.get("data") if isinstance(models, Mapping) else None
    ids = [str(e["id"]) for e in data or [] if isinstance(e, Mapping) and e.get("id")]
    if not ids:
        raise TierError(f"{name}: {api_base}/models lists no model")
    if model is not None and model not in ids:
        raise TierError(f"{name}: {api_base} does not serve {model!r} (it lists {', '.join(ids[:5])})")
    chosen = model or ids[0]
    context, slots, engine = served_window(models, chosen), 0, "OpenAI-compatible"
    try:
        props = _get(api_base.removesuffix("/v1") + "/props", api_key)
    except (urllib.error.URLError, OSError, ValueError):
        props = None
    if isinstance(props, Mapping) and (window := props_window(props)):
        context, engine = window, "llama.cpp"
        total = props.get("total_slots")
        slots = total if isinstance(total, int) and total > 0 else 0
    return Tier(name, chosen, api_base, slots, context, f"{api_base} ({engine}, {chosen})")
