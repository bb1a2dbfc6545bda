"""Views of an Anthropic Messages answer for the checks: the chat assistant message of a native
answer, and stop reasons ↔ chat finish reasons (router/upstream/anthropic.py; the Messages
transport's translation, router/messages/translate.py, uses them too)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from router.upstream.base import Usage, token_count

_STOP_REASONS = {
    "stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
    "content_filter": "refusal",
}  # fmt: skip
_FINISH_REASONS = {
    "end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
    "refusal": "content_filter", "pause_turn": "stop", "model_context_window_exceeded": "length",
}  # fmt: skip


def stop_reason(finish_reason: str | None, has_calls: bool = False) -> str:
    return "tool_use" if has_calls else _STOP_REASONS.get(finish_reason or "stop", "end_turn")


def finish_reason(stop: str | None) -> str | None:
    return None if stop is None else _FINISH_REASONS.get(stop, "stop")


def chat_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A native Messages answer → the chat assistant message that the validator and feedback read."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in message.get("content") or ():
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            raw = block.get("input", {})
            arguments = raw if isinstance(raw, str) else orjson.dumps(raw).decode()
            calls.append({"id": str(block.get("id", "")), "type": "function",
                          "function": {"name": str(block.get("name", "")), "arguments": arguments}})  # fmt: skip
    out: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        out["tool_calls"] = calls
    return out


def messages_usage(usage: Any) -> Usage | None:
    """A Messages `usage` as a `Usage`: `input_tokens` (not read from the cache) and
    `cache_creation_input_tokens` evaluated, the latter written to the cache; `cache_read_input_tokens`
    reused; `output_tokens`. None where there is none."""
    if not isinstance(usage, Mapping):
        return None
    written = token_count(usage.get("cache_creation_input_tokens"))
    evaluated = token_count(usage.get("input_tokens")) + written
    reused, output = token_count(usage.get("cache_read_input_tokens")), token_count(usage.get("output_tokens"))
    return Usage(evaluated, reused, output, written) if evaluated or reused or output else None
