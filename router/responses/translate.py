"""Responses API → chat completions: the request's fields; and the Response object sent back.

    translate(request, history)   a Responses request (+ the chat history of its previous response)
                                  → Translation: the chat-completions body, the messages that are new
                                  this turn, the tool map, what a chat tier does not see
    chat_body(request, history)   → (body, new messages), the same in short
    response_object(...)          the Response object the client is sent

Items ↔ messages are in router/responses/items.py, tools in router/upstream/responses_tools.py.

History is kept as chat messages without `instructions`: as in OpenAI's API, instructions of an
earlier response are not carried to the next one; each request's own come first as a system message.
Fields with no chat equivalent that are about the Responses service itself (store, include,
truncation, ...) are dropped; unknown fields pass through untouched, as on the chat transport.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from router.core.call import refuse_forbidden
from router.errors import BadRequest
from router.responses.items import CARRIED, input_messages, items_of
from router.upstream.base import token_count
from router.upstream.responses_tools import ToolMap

# Responses fields about the service, not the model: never sent upstream.
_DROPPED = frozenset(
    {
        "input", "instructions", "previous_response_id", "store", "include", "truncation", "metadata",
        "background", "stream", "stream_options", "prompt_cache_key", "prompt_cache_retention",
        "prompt_cache_options", "safety_identifier", "service_tier", "max_tool_calls", "context_management",
        "text", "reasoning", "tools", "tool_choice", "max_output_tokens", "generate", "moderation", "top_logprobs",
        "client_metadata",
    }
)  # fmt: skip
_UNSUPPORTED = ("conversation", "prompt")  # server-side objects this router does not hold


# -- request ----------------------------------------------------------------------------------------
def check_request(body: Mapping[str, Any]) -> None:
    """Shape checks a client should hear about as a 400 rather than as an upstream failure."""
    refuse_forbidden(body)
    for name in _UNSUPPORTED:
        if body.get(name) is not None:
            raise BadRequest(f"'{name}' is not supported by this router; send the input items.", param=name)
    if body.get("background"):
        raise BadRequest("'background' responses are not supported by this router.", param="background")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise BadRequest("'model' is required and must be a string.", param="model")
    prev = body.get("previous_response_id")
    if prev is not None and not isinstance(prev, str):
        raise BadRequest("'previous_response_id' must be a string.", param="previous_response_id")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise BadRequest("'instructions' must be a string.", param="instructions")


@dataclass
class Translation:
    """A Responses request as a chat tier takes it.

    `new` is what the history remembers of this request's input: chat messages, and the items no chat
    message can hold (`additional_tools`, item types unknown here) as `{"role": CARRIED, "item": ...}`
    entries, which stay out of `body` but reach native tiers again (`items_of`) and keep a chain's
    tools. `left_out` counts what a chat tier does not see, by "tool:<type>", "item:<type>",
    "role:<role>", "part:<type>"."""

    body: dict[str, Any]
    new: list[dict[str, Any]]
    tools: ToolMap
    left_out: Counter[str] = field(default_factory=Counter)


def chat_body(
    request: Mapping[str, Any], history: Sequence[dict[str, Any]], *, stream: bool
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The chat-completions body of a Responses request, and the messages this request adds."""
    t = translate(request, history, stream=stream)
    return t.body, t.new


def translate(request: Mapping[str, Any], history: Sequence[dict[str, Any]], *, stream: bool) -> Translation:
    check_request(request)
    check_tools(request.get("tools"))
    input_ = request.get("input")
    carried = [m["item"] for m in history if m.get("role") == CARRIED]
    tools = ToolMap.of(request.get("tools"), [*carried, *(input_ if isinstance(input_, list) else ())])
    left_out: Counter[str] = Counter(f"tool:{kind}" for kind in tools.left_out)
    new = input_messages(input_, tools, left_out)
    messages = [m for m in (*history, *new) if m.get("role") != CARRIED]
    if isinstance(instructions := request.get("instructions"), str) and instructions:
        messages.insert(0, {"role": "system", "content": instructions})
    if not messages and request.get("generate") is not False:  # a warm-up (Codex's prewarm) may be empty
        raise BadRequest("'input' is required (no earlier response to continue).", param="input")
    body: dict[str, Any] = {k: v for k, v in request.items() if k not in _DROPPED}
    body["messages"] = messages
    if tools.chat_tools:
        body["tools"] = tools.chat_tools
    if (choice := request.get("tool_choice")) is not None:
        body["tool_choice"] = chat_tool_choice(choice, tools)
    if (limit := request.get("max_output_tokens")) is not None:
        body["max_tokens"] = limit
    if (fmt := response_format(request.get("text"))) is not None:
        body["response_format"] = fmt
    reasoning = request.get("reasoning")
    if isinstance(reasoning, dict) and isinstance(reasoning.get("effort"), str):
        body["reasoning_effort"] = reasoning["effort"]
    if stream:  # a Responses stream always ends with usage: ask the chat tier for it
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return Translation(body, new, tools, left_out)


def check_tools(tools: Any) -> None:
    """What the published API requires of `tools`: an array of objects with a type, function tools named."""
    if tools is None:
        return
    if not isinstance(tools, list):
        raise BadRequest("Invalid type for 'tools': expected an array of objects.", param="tools")
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise BadRequest(f"Invalid type for 'tools[{i}]': expected an object with a 'type'.", param=f"tools[{i}]")
        named = isinstance(tool.get("function"), dict) or (isinstance(tool.get("name"), str) and tool["name"])
        if tool["type"] == "function" and not named:
            raise BadRequest(f"Missing required parameter: 'tools[{i}].name'.", param=f"tools[{i}].name")


def chat_tools(tools: Any) -> list[dict[str, Any]]:
    """Responses tools → the function tools a chat tier gets (see router/upstream/responses_tools.py)."""
    check_tools(tools)
    return ToolMap.of(tools).chat_tools


def chat_tool_choice(choice: Any, tools: ToolMap | None = None) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind == "function" and isinstance(choice.get("function"), dict):
            return choice
        if kind in ("function", "custom") and isinstance(choice.get("name"), str):
            name = (tools or ToolMap()).chat_name(choice.get("namespace"), choice["name"])
            return {"type": "function", "function": {"name": name}}
        if kind == "allowed_tools" and choice.get("mode") in ("auto", "required"):
            return choice["mode"]
        if isinstance(kind, str) and kind not in ("function", "custom", "allowed_tools"):
            return "auto"  # a hosted tool (web_search, ...): not one a chat tier has
    raise BadRequest("Invalid value for 'tool_choice': expected auto, none, required or a tool.", param="tool_choice")


def response_format(text: Any) -> dict[str, Any] | None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    if fmt["type"] == "json_object":
        return {"type": "json_object"}
    if fmt["type"] == "json_schema":
        keys = ("name", "schema", "strict", "description")
        return {"type": "json_schema", "json_schema": {k: fmt[k] for k in keys if k in fmt}}
    raise BadRequest(f"text.format type {fmt['type']!r} is not supported.", param="text.format")


# -- the Response object ------------------------------------------------------------------------------
_ECHOED = ("instructions", "max_output_tokens", "previous_response_id", "temperature", "top_p", "user", "reasoning")


def response_object(
    request: Mapping[str, Any],
    response_id: str,
    created_at: int,
    *,
    status: str,
    output: Sequence[Mapping[str, Any]] = (),
    model: str | None = None,
    usage: Mapping[str, Any] | None = None,
    finish_reason: str | None = None,
) -> dict[str, Any]:
    incomplete = None
    if status == "completed" and finish_reason in ("length", "content_filter"):
        status = "incomplete"
        incomplete = {"reason": "max_output_tokens" if finish_reason == "length" else "content_filter"}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "error": None,
        "incomplete_details": incomplete,
        **{k: request.get(k) for k in _ECHOED},
        "model": model or request.get("model"),
        "output": list(output),
        "parallel_tool_calls": request.get("parallel_tool_calls", True) is not False,
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools") or [],
        "text": request.get("text") or {"format": {"type": "text"}},
        "truncation": request.get("truncation") or "disabled",
        "store": request.get("store", True) is not False,
        "metadata": request.get("metadata") or {},
        "usage": responses_usage(usage),
    }


def responses_usage(usage: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not usage:
        return None
    prompt, completion = token_count(usage.get("prompt_tokens")), token_count(usage.get("completion_tokens"))
    prompt_details, completion_details = usage.get("prompt_tokens_details"), usage.get("completion_tokens_details")
    cached = token_count(prompt_details.get("cached_tokens")) if isinstance(prompt_details, dict) else 0
    reasoning = token_count(completion_details.get("reasoning_tokens")) if isinstance(completion_details, dict) else 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": token_count(usage.get("total_tokens")) or prompt + completion,
    }


_ROUTER_FIELDS = ("previous_response_id", "type", "generate")  # resolved or used by the router itself


def native_body(
    request: Mapping[str, Any], history: Sequence[Mapping[str, Any]], tools: ToolMap | None = None
) -> dict[str, Any]:
    """The request as a tier with `apis: [responses]` gets it: the router's chain written out as input
    items (the tier never sees the router's response ids) and `store: false` (the router keeps the state)."""
    body = {k: v for k, v in request.items() if k not in _ROUTER_FIELDS}
    if history:
        new = request.get("input")
        new_items = [{"type": "message", "role": "user", "content": new}] if isinstance(new, str) else list(new or ())
        body["input"] = [*items_of(history, tools), *new_items]
    body["store"] = False
    return body
