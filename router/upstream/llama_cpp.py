"""What llama.cpp's `llama-server` does differently from the OpenAI API, and how a tier deals with it.

llama-server speaks OpenAI chat completions, and tells itself apart: its model list says `owned_by:
"llamacpp"` and its answers carry `timings` (`is_llama_cpp`). One thing it does not do as OpenAI
does: a named `tool_choice` ({"type": "function", "function": {"name": ...}}) is ignored (its log
says "Wrong type supplied for parameter 'tool_choice', using default value"), so a repair that
pins the tool the model fumbled would ask nothing of it. `forced_call` asks the way it can:

    POST /apply-template      the chat request → the prompt the chat endpoint would read
    POST /completion          that prompt (plus the template's call opening, `<tool_call>\\n` for
                              Qwen's), generated under the JSON schema of {"name": <the tool>,
                              "arguments": <its parameters>}, in the session's slot

The prompt is the one the chat endpoint reads, so the slot's cached prefix is reused; the answer is
a well-formed call of that tool, returned as a chat completion (`Reply`) or its chunks.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

import orjson

from router.upstream.base import chat_usage

_CALL_OPENING = "<tool_call>"  # the Hermes format's (Qwen2.5's template): a call is <tool_call>\n{json}


def is_llama_cpp(data: Mapping[str, Any]) -> bool:
    """A model list or an answer that a llama-server sent."""
    if isinstance(data.get("timings"), dict):
        return True
    models = data.get("data")
    return isinstance(models, list) and any(isinstance(m, dict) and m.get("owned_by") == "llamacpp" for m in models)


def named_choice(body: Mapping[str, Any]) -> str | None:
    """The tool a request's `tool_choice` names, if it names one offered."""
    choice = body.get("tool_choice")
    fn = choice.get("function") if isinstance(choice, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    return name if isinstance(name, str) and _parameters(body, name) is not None else None


def _parameters(body: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    for tool in body.get("tools") or ():
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name") == name:
            params = fn.get("parameters")
            return params if isinstance(params, dict) else {"type": "object"}
    return None


def completion_request(body: Mapping[str, Any], prompt: str, name: str, slot: int | None) -> bytes:
    """The /completion request that generates a call of `name` after `prompt` (the rendered chat)."""
    schema = {
        "type": "object",
        "properties": {"name": {"const": name}, "arguments": _parameters(body, name) or {"type": "object"}},
        "required": ["name", "arguments"],
    }
    opening = _CALL_OPENING + "\n" if _CALL_OPENING in prompt else ""
    limit = body.get("max_completion_tokens") or body.get("max_tokens") or 1024
    payload: dict[str, Any] = {
        "prompt": prompt + opening,
        "json_schema": schema,
        "n_predict": limit,
        "temperature": 0,
        "cache_prompt": True,
    }
    if slot is not None:
        payload["id_slot"] = slot
    return orjson.dumps(payload)


def call_completion(data: Mapping[str, Any], name: str, model: str) -> dict[str, Any]:
    """A /completion answer → a chat completion: the call, or (cut short) its text, which the checks judge."""
    content = data.get("content")
    text = content if isinstance(content, str) else ""
    try:
        written = orjson.loads(text)
    except orjson.JSONDecodeError:
        written = None
    message: dict[str, Any] = {"role": "assistant", "content": text}
    finish = "length" if data.get("stop_type") == "limit" or data.get("truncated") else "stop"
    if isinstance(written, dict) and isinstance(written.get("arguments"), dict):
        arguments = orjson.dumps(written["arguments"]).decode()
        message = {"role": "assistant", "content": "", "tool_calls": [_call(name, arguments)]}
        finish = "tool_calls"
    found = data.get("timings")
    timings: dict[str, Any] = found if isinstance(found, dict) else {}
    prompt_n = int(timings.get("prompt_n") or 0) + int(timings.get("cache_n") or 0)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": chat_usage(prompt_n, data.get("tokens_predicted")),
        "timings": timings,
    }


def completion_chunks(completion: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A chat completion as the chunks of a stream: the message in one delta, then its end."""
    choice = completion["choices"][0]
    message = choice["message"]
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    if calls := message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(calls)]
        delta["content"] = None
    base = {"id": completion["id"], "object": "chat.completion.chunk", "created": completion["created"],
            "model": completion["model"]}  # fmt: skip
    return [
        {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}],
         "usage": completion["usage"], "timings": completion["timings"]},
    ]  # fmt: skip


def _call(name: str, arguments: str) -> dict[str, Any]:
    function = {"name": name, "arguments": arguments}
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": function}
