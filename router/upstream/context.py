"""What tiers say about their context: the window their server reports, and the errors that say a
prompt did not fit it, in each form they come in.

    served_window(models, model)   GET {api_base}/models: llama.cpp's llama-server (`meta.n_ctx`, a
                                   slot's context), vLLM (`max_model_len`)
    props_window(props)            GET /props of llama-server: `default_generation_settings.n_ctx`
    exceeded(error)                an error body's `error` that says the prompt was too long →
                                   (prompt tokens, window), each None where it says nothing; else None

Not read: llama-server's `meta.n_ctx_train`, the context the model was trained with — its server may
run a smaller one (the 4096 tokens that refused an 11,679-token prompt of Claude Code's did).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from router.upstream.base import token_count

# llama.cpp's llama-server (tools/server/server-context.cpp), also when its error type is not sent
_LLAMA = re.compile(r"(?:request|input) \((\d{1,12}) tokens\) (?:exceeds the available|is larger than the max) "
                    r"context size \((\d{1,12}) tokens\)")  # fmt: skip
# Anthropic's 400 invalid_request_error
_ANTHROPIC = re.compile(r"prompt is too long: (\d{1,12}) tokens > (\d{1,12}) maximum")
# OpenAI chat completions, vLLM, llama-cpp-python's server (its `context_length_exceeded`)
_MAXIMUM = re.compile(r"maximum context length is (\d{1,12}) tokens")
_PROMPT = (
    re.compile(r"\((\d{1,12}) in the messages"),  # "you requested N tokens (P in the messages, C in the completion)"
    re.compile(r"your messages resulted in (\d{1,12}) tokens"),  # OpenAI
    re.compile(r"your request has (\d{1,12}) input tokens"),  # vLLM
)


def _count(value: Any) -> int | None:
    return token_count(value) or None


def served_window(models: Any, model: str) -> int | None:
    """A served model's context window from an OpenAI-style model list (`model`'s entry, or the only one)."""
    data = models.get("data") if isinstance(models, Mapping) else None
    if not isinstance(data, list):
        return None
    entries = [e for e in data if isinstance(e, Mapping)]
    entry = next((e for e in entries if e.get("id") == model), entries[0] if len(entries) == 1 else None)
    if entry is None:
        return None
    meta = entry.get("meta")
    if isinstance(meta, Mapping) and (window := _count(meta.get("n_ctx"))):
        return window
    return _count(entry.get("max_model_len"))


def props_window(props: Any) -> int | None:
    """A slot's context window from llama-server's /props."""
    settings = props.get("default_generation_settings") if isinstance(props, Mapping) else None
    return _count(settings.get("n_ctx")) if isinstance(settings, Mapping) else None


def exceeded(error: Any) -> tuple[int | None, int | None] | None:
    """(prompt tokens, context window) if `error` (an error body's `error`, or its text) says the
    prompt did not fit the context; None for any other error."""
    if isinstance(error, str):
        error = {"message": error}
    if not isinstance(error, Mapping):
        return None
    if error.get("type") == "exceed_context_size_error":  # llama-server
        return _count(error.get("n_prompt_tokens")), _count(error.get("n_ctx"))
    message = str(error.get("message") or "")[:2000]
    for pattern in (_LLAMA, _ANTHROPIC):
        if m := pattern.search(message):
            return int(m[1]), int(m[2])
    maximum = _MAXIMUM.search(message)
    if maximum is None and error.get("code") != "context_length_exceeded":
        return None
    prompt = next((int(m[1]) for p in _PROMPT if (m := p.search(message))), None)
    return prompt, int(maximum[1]) if maximum else None
