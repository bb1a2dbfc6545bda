"""The fake upstream's context, as llama.cpp's llama-server has one (``FakeConfig.n_ctx`` > 0):
a chat template, a tokenizer, and the refusal of a prompt that fills a slot's context.

    render(body)        the prompt a request becomes (its chat template: ChatML-like turns, the tools
                        as JSON), for a chat, Responses or Messages body — POST /apply-template's answer
    tokenize(text)      its tokens: words and single punctuation marks (not chars / 4, so that a count
                        by the tier differs from the router's estimate) — POST /tokenize's answer
    prompt_size(body)   the tokens a completion counts: the rendered prompt, a BOS token added
    too_long(...)       the 400 a prompt that does not fit gets: llama-server's
                        ``exceed_context_size_error`` (chat completions, Responses), or Anthropic's
                        "prompt is too long: N tokens > M maximum" (Messages)
"""

from __future__ import annotations

import re
import zlib
from typing import Any

import orjson

_TOKEN = re.compile(r"\w+|[^\w\s]")


def _strings(value: Any) -> list[str]:
    """Every string inside `value` (a message's content, a call's arguments, an item), in order."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def render(body: dict[str, Any]) -> str:
    turns: list[str] = []
    if system := body.get("system"):  # Messages
        turns.append(f"<|im_start|>system\n{chr(10).join(_strings(system))}<|im_end|>")
    items = body.get("messages")
    if items is None:  # Responses
        items = body.get("input")
        items = [{"role": "user", "content": items}] if isinstance(items, str) else items
    for item in items if isinstance(items, list) else ():
        if isinstance(item, dict):
            role = str(item.get("role") or item.get("type") or "user")
            text = "\n".join(_strings({k: v for k, v in item.items() if k not in ("role", "type")}))
            turns.append(f"<|im_start|>{role}\n{text}<|im_end|>")
    if tools := body.get("tools"):
        turns.append(f"<|im_start|>tools\n{orjson.dumps(tools).decode()}<|im_end|>")
    turns.append("<|im_start|>assistant\n")
    return "\n".join(turns)


def tokenize(text: str, add_special: bool = False) -> list[int]:
    tokens = [zlib.crc32(t.encode()) % 65536 for t in _TOKEN.findall(text)]
    return [1, *tokens] if add_special else tokens


def prompt_size(body: dict[str, Any]) -> int:
    return len(tokenize(render(body), add_special=True))


def too_long(tokens: int, n_ctx: int, anthropic: bool) -> bytes | None:
    """The error body a prompt of `tokens` gets from a server whose context is `n_ctx`; None if it fits."""
    if anthropic:
        if tokens <= n_ctx:
            return None
        message = f"prompt is too long: {tokens} tokens > {n_ctx} maximum"
        return orjson.dumps({"type": "error", "error": {"type": "invalid_request_error", "message": message}})
    if tokens < n_ctx:
        return None
    message = f"request ({tokens} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it"
    error = {"code": 400, "message": message, "type": "exceed_context_size_error", "n_prompt_tokens": tokens,
             "n_ctx": n_ctx}  # fmt: skip
    return orjson.dumps({"error": error})
