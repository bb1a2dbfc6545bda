"""Responses API ↔ chat completions: request fields, input items ↔ messages, tools, output items.

    chat_body(request, history)   a Responses request (+ the chat history of its previous response)
                                  → (chat-completions body, the messages that are new this turn)
    input_messages(input)         `input` (a string or items) → chat messages
    items_of(messages)            chat messages → Responses items (the inverse, for output and tests)
    output_items(message)         one assistant chat message → output items (message, function_call)
    response_object(...)          the Response object the client is sent

History is kept as chat messages without `instructions`: as in OpenAI's API, instructions of an
earlier response are not carried to the next one; each request's own come first as a system message.
Fields with no chat equivalent that are about the Responses service itself (store, include,
truncation, ...) are dropped; unknown fields pass through untouched, as on the chat transport.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from router.call import FORBIDDEN_FIELDS
from router.errors import BadRequest, ForbiddenField
from router.upstream.base import token_count

# Responses fields about the service, not the model: never sent upstream.
_DROPPED = frozenset(
    {
        "input", "instructions", "previous_response_id", "store", "include", "truncation", "metadata",
        "background", "stream", "stream_options", "prompt_cache_key", "prompt_cache_retention",
        "prompt_cache_options", "safety_identifier", "service_tier", "max_tool_calls", "context_management",
        "text", "reasoning", "tools", "tool_choice", "max_output_tokens", "generate", "moderation", "top_logprobs",
    }
)  # fmt: skip
_UNSUPPORTED = ("conversation", "prompt")  # server-side objects this router does not hold
_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text", "reasoning_text"})


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


# -- request ----------------------------------------------------------------------------------------
def check_request(body: Mapping[str, Any]) -> None:
    """Shape checks a client should hear about as a 400 rather than as an upstream failure."""
    for name in FORBIDDEN_FIELDS:
        if name in body:
            raise ForbiddenField(f"The field {name!r} is not accepted: upstreams are set by the policy.", param=name)
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


def chat_body(
    request: Mapping[str, Any], history: Sequence[dict[str, Any]], *, stream: bool
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The chat-completions body of a Responses request, and the messages this request adds."""
    check_request(request)
    new = input_messages(request.get("input"))
    messages = [*history, *new]
    if isinstance(instructions := request.get("instructions"), str) and instructions:
        messages.insert(0, {"role": "system", "content": instructions})
    if not messages:
        raise BadRequest("'input' is required (no earlier response to continue).", param="input")
    body: dict[str, Any] = {k: v for k, v in request.items() if k not in _DROPPED}
    body["messages"] = messages
    if (tools := request.get("tools")) is not None and (converted := chat_tools(tools)):
        body["tools"] = converted
    if (choice := request.get("tool_choice")) is not None:
        body["tool_choice"] = chat_tool_choice(choice)
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
    return body, new


def chat_tools(tools: Any) -> list[dict[str, Any]]:
    """Responses' flat function tools → chat tools (chat-shaped ones pass as they are)."""
    if not isinstance(tools, list):
        raise BadRequest("'tools' must be an array of tool objects.", param="tools")
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
            raise BadRequest(f"Tool type {kind!r} is not supported; only function tools are.", param=f"tools[{i}]")
        if isinstance(tool.get("function"), dict):
            out.append(tool)
            continue
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise BadRequest("A function tool needs a 'name'.", param=f"tools[{i}].name")
        fn = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
        out.append({"type": "function", "function": fn})
    return out


def chat_tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind == "function" and isinstance(choice.get("function"), dict):
            return choice
        if kind == "function" and isinstance(choice.get("name"), str):
            return {"type": "function", "function": {"name": choice["name"]}}
        if kind == "allowed_tools" and choice.get("mode") in ("auto", "required"):
            return choice["mode"]
    raise BadRequest("'tool_choice' must be auto, none, required or a function.", param="tool_choice")


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


# -- items → messages ---------------------------------------------------------------------------------
def input_messages(input_: Any) -> list[dict[str, Any]]:
    """`input` → chat messages. Consecutive function calls (and the assistant text before them) form
    one assistant message; reasoning items are dropped (chat tiers cannot take them back)."""
    if input_ is None:
        return []
    if isinstance(input_, str):
        return [{"role": "user", "content": input_}]
    if not isinstance(input_, list):
        raise BadRequest("'input' must be a string or an array of items.", param="input")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(input_):
        param = f"input[{i}]"
        if not isinstance(item, dict):
            raise BadRequest("Each input item must be an object.", param=param)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role = _ROLES.get(str(item.get("role")))
            if role is None:
                raise BadRequest(f"Unknown message role {item.get('role')!r}.", param=f"{param}.role")
            content = _content(item.get("content"), f"{param}.content", flatten=role == "assistant")
            out.append({"role": role, "content": content})
        elif kind == "function_call":
            call = {
                "id": _str(item, "call_id", param),
                "type": "function",
                "function": {"name": _str(item, "name", param), "arguments": str(item.get("arguments") or "")},
            }
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            content = output if isinstance(output, str) else _content(output, f"{param}.output", flatten=True)
            out.append({"role": "tool", "tool_call_id": _str(item, "call_id", param), "content": content})
        elif kind == "reasoning":
            continue
        else:
            raise BadRequest(f"Input item type {kind!r} is not supported.", param=f"{param}.type")
    return out


def _str(item: Mapping[str, Any], key: str, param: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"'{key}' is required and must be a string.", param=f"{param}.{key}")
    return value


def _content(content: Any, param: str, *, flatten: bool) -> Any:
    """Message content → chat content: a string when it is all text, else a list of chat parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest("Content must be a string or an array of parts.", param=param)
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS:
            parts.append({"type": "text", "text": str(part.get("text") or "")})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal") or "")})
        elif kind == "input_image" and isinstance(part.get("image_url"), str) and not flatten:
            image = {"url": part["image_url"], **({"detail": part["detail"]} if part.get("detail") else {})}
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise BadRequest(f"Content part type {kind!r} is not supported here.", param=f"{param}[{j}]")
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


# -- messages → items ---------------------------------------------------------------------------------
def items_of(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages → Responses input items (system messages become `system` role messages)."""
    items: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "assistant":
            items += output_items(m)
        elif role == "tool":
            items.append({"type": "function_call_output", "call_id": m.get("tool_call_id"), "output": _text(m)})
        else:
            content = m.get("content")
            parts = [{"type": "input_text", "text": content}] if isinstance(content, str) else list(content or ())
            items.append({"type": "message", "role": role, "content": [_input_part(p) for p in parts]})
    return items


def _input_part(part: Mapping[str, Any]) -> dict[str, Any]:
    if part.get("type") == "image_url":
        image = part.get("image_url") or {}
        return {"type": "input_image", "image_url": image.get("url"), "detail": image.get("detail", "auto")}
    if part.get("type") == "text":
        return {"type": "input_text", "text": part.get("text", "")}
    return dict(part)


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def output_items(message: Mapping[str, Any], *, status: str = "completed") -> list[dict[str, Any]]:
    """One assistant chat message → a message item (if it has text) and one function_call per call."""
    items: list[dict[str, Any]] = []
    if text := _text(message):
        items.append(message_item(text, status=status))
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        items.append(
            function_item(
                str(call.get("id") or new_id("call")), str(fn.get("name") or ""), str(fn.get("arguments") or "")
            )
        )
    return items


def message_item(text: str, *, item_id: str | None = None, status: str = "completed") -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id or new_id("msg"),
        "status": status,
        "role": "assistant",
        "content": [text_part(text)],
    }


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def function_item(
    call_id: str, name: str, arguments: str, *, item_id: str | None = None, status: str = "completed"
) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id or new_id("fc"),
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def assistant_message(output: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The chat message for a response's output items (what the history remembers of the answer)."""
    messages = input_messages([dict(i) for i in output if i.get("type") in ("message", "function_call")])
    return messages[0] if messages else None


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
