"""What the router reads of a chat-completions answer (OpenAI's shape, from any OpenAI-compatible
server), and how an unusual one is made standard before anything else sees it:

    usage_of(data)                      the server's own count of the tokens (llama.cpp's timings, OpenAI's usage)
    malformed(data, part)               what makes an answer or a chunk unusable (a field of the wrong type)
    drop_legacy_call(data)              the legacy `function_call` some servers write beside `tool_calls`, removed
    without_repeated_heads(chunk, ...)  a tool call's id and name repeated in every delta, dropped after the first
"""

from __future__ import annotations

from typing import Any

from router.upstream.base import Chunk, Usage, token_count


def usage_of(data: dict[str, Any]) -> Usage | None:
    """The server's own count of the call's tokens: llama.cpp's `timings` (`prompt_n` evaluated,
    `cache_n` reused, `predicted_n` written out), else OpenAI's `usage` (`prompt_tokens`, of them
    `prompt_tokens_details.cached_tokens` reused; `completion_tokens`: OpenAI, vLLM, SGLang)."""
    timings = data.get("timings")
    if isinstance(timings, dict) and "prompt_n" in timings:
        evaluated, reused = token_count(timings.get("prompt_n")), token_count(timings.get("cache_n"))
        return Usage(evaluated, reused, token_count(timings.get("predicted_n")))
    usage = data.get("usage")
    if not isinstance(usage, dict) or "prompt_tokens" not in usage:
        return None
    details = usage.get("prompt_tokens_details")
    cached = token_count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    output = token_count(usage.get("completion_tokens"))
    return Usage(max(0, token_count(usage.get("prompt_tokens")) - cached), cached, output)


def drop_legacy_call(data: dict[str, Any]) -> bool:
    """Remove the legacy `function_call` that llama-cpp-python writes beside `tool_calls` (with a
    stray ':' in its name) from an answer to a request that offered `tools`: such a client asked
    for tool calls, which are checked; the unchecked copy is not sent. True if anything was removed."""
    removed = False
    for choice in data.get("choices") or ():
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict) and message.get("tool_calls") and "function_call" in message:
            del message["function_call"]
            removed = True
    return removed


def malformed(data: dict[str, Any], part: str) -> str | None:
    """What makes an answer (`part` "message") or a chunk ("delta") unusable: a field the router reads
    with the wrong type. Missing fields are not malformed (the checks judge what is missing)."""
    choices = data.get("choices")
    if choices is None:
        return None
    if not isinstance(choices, list):
        return "'choices' is not an array"
    for choice in choices:
        if not isinstance(choice, dict):
            return "a choice is not an object"
        inner = choice.get(part)
        if inner is None:
            continue
        if not isinstance(inner, dict):
            return f"'{part}' is not an object"
        calls = inner.get("tool_calls")
        if calls is None:
            continue
        if not isinstance(calls, list) or not all(
            isinstance(c, dict) and isinstance(c.get("function") or {}, dict) and type(c.get("index", 0)) is int
            for c in calls
        ):
            return "'tool_calls' is not an array of call objects"
    return None


def without_repeated_heads(chunk: Chunk, heads: dict[int, str]) -> Chunk:
    """OpenAI sends a tool call's id and name once, in its first delta; some servers (llama.cpp's
    Python server) repeat them in every delta, which clients would concatenate into `namename…`.
    Drop the repeats so that everything downstream sees standard deltas."""
    choices = chunk.data.get("choices")
    if not choices or not isinstance(choices[0], dict):
        return chunk
    calls = (choices[0].get("delta") or {}).get("tool_calls")
    if not calls:
        return chunk
    changed = False
    for tc in calls:
        if not isinstance(tc, dict) or not (call_id := tc.get("id")):
            continue
        index = tc.get("index", 0)
        if heads.get(index) == call_id:
            tc.pop("id")
            tc.pop("type", None)
            if isinstance(fn := tc.get("function"), dict):
                fn.pop("name", None)
            changed = True
        else:
            heads[index] = call_id
    return Chunk(chunk.data, None) if changed else chunk
