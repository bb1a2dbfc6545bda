"""Anthropic Messages ↔ chat completions, for tiers that speak only chat completions.

    chat_body(request)            a Messages request → (chat-completions body, tool_use ids the
                                  agent reported as failed with `is_error`)
    left_out(request)             the fields of a request a chat tier does not get (counted, and
                                  logged the first time, where a call goes to one: router/flow/record.py)
    message_of(reply, ...)        a chat.completion → a Messages `message` object

The answer views a native `anthropic/*` tier needs too — `chat_message(message)`, `stop_reason`,
`finish_reason` — are in router/upstream/messages_view.py.

What a chat tier cannot take is left out of what it sees: `thinking` / `redacted_thinking` blocks,
blocks of server tools (web search results, ...), `cache_control`, request fields with no chat
equivalent (`thinking`, `context_management`, `output_config.effort`, ... — most come with a beta the
client sent, in `anthropic-beta`, which a chat tier is never sent), and tools with `defer_loading`
until a tool search's result references them (`tool_reference`). A structured output
(`output_config.format`, or the older `output_format`: a JSON schema) is the chat `response_format`.
A mid-conversation `system` message becomes a system message in its place. An `anthropic/*` tier
gets the request unchanged instead (router/upstream/anthropic.py). Anthropic-defined client tools (`bash_*`,
`text_editor_*`, ...) have no schema in the request; they become functions taking any object.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

import orjson

from router.errors import BadRequest
from router.upstream.base import token_count
from router.upstream.messages_view import stop_reason

_COPIED = ("temperature", "top_p", "max_tokens")  # same name, same meaning in both APIs
# Messages request fields of the published API (and its betas) a chat tier has no equivalent of
_PUBLISHED = frozenset({
    "thinking", "context_management", "top_k", "speed", "service_tier", "container", "mcp_servers",
    "inference_geo", "cache_control", "betas",
})  # fmt: skip
_OUTPUT_CONFIG = frozenset({"effort", "task_budget"})
# the request fields a chat tier gets in some form; any other is left out (`left_out`)
_TRANSLATED = frozenset({
    *_COPIED, "model", "messages", "system", "stop_sequences", "tools", "tool_choice", "metadata", "stream",
    "output_format",
})  # fmt: skip
# tools Anthropic's servers run (the advisor: another model consulted mid-answer, `advisor-tool-2026-03-01`)
_SERVER_TOOL_TYPES = ("web_search", "web_fetch", "code_execution", "mcp_toolset", "tool_search", "advisor")


def new_message_id() -> str:
    return "msg_" + secrets.token_hex(12)


def _bad(message: str, param: str) -> BadRequest:
    return BadRequest(message, param=param)


def _text_of(content: Any, param: str) -> str:
    """`system` or a tool result's content: a string or a list of text blocks."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        raise _bad(f"{param}: Input should be a valid string or list of content blocks", param)
    texts = [_block_text(b) for b in content if isinstance(b, dict)]
    return "\n".join(t for t in texts if t)


def _block_text(block: Mapping[str, Any]) -> str:
    if block.get("type") == "text" and isinstance(text := block.get("text"), str):
        return text
    if block.get("type") == "tool_reference" and isinstance(name := block.get("tool_name"), str):
        return f"Tool {name} is now available."  # a tool search's result: the tool is offered from now on
    return ""


def _referenced(messages: list[Any]) -> set[str]:
    """Tools a tool search loaded (`tool_reference` blocks in tool results): deferred tools offered."""
    names: set[str] = set()
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        for block in content if isinstance(content, list) else ():
            inner = block.get("content") if isinstance(block, dict) and block.get("type") == "tool_result" else None
            for ref in inner if isinstance(inner, list) else ():
                if isinstance(ref, dict) and ref.get("type") == "tool_reference":
                    names.add(str(ref.get("tool_name")))
    return names


def _image_part(block: Mapping[str, Any]) -> dict[str, Any] | None:
    source = block.get("source")
    if not isinstance(source, dict):
        return None
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    elif source.get("type") == "url":
        url = str(source.get("url", ""))
    else:
        return None
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_result(block: Mapping[str, Any], param: str) -> dict[str, Any]:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise _bad(f"{param}.tool_result.tool_use_id: Field required", f"{param}.tool_use_id")
    return {"role": "tool", "tool_call_id": call_id, "content": _text_of(block.get("content"), param)}


def _user(content: list[Any], param: str, failed: set[str]) -> list[dict[str, Any]]:
    """One user turn's blocks → tool messages (its tool results), then a user message (the rest)."""
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for i, block in enumerate(content):
        if not isinstance(block, dict):
            raise _bad(f"{param}.{i}: Input should be a valid dictionary", f"{param}.{i}")
        kind = block.get("type")
        if kind == "tool_result":
            out.append(_tool_result(block, f"{param}.{i}"))
            if block.get("is_error") is True:
                failed.add(str(block["tool_use_id"]))
        elif kind == "text" and isinstance(block.get("text"), str):
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image" and (image := _image_part(block)) is not None:
            parts.append(image)
        elif kind == "document" and isinstance(source := block.get("source"), dict) and source.get("type") == "text":
            parts.append({"type": "text", "text": str(source.get("data", ""))})
    if parts:
        only_text = all(p["type"] == "text" for p in parts)
        out.append({"role": "user", "content": "\n".join(p["text"] for p in parts) if only_text else parts})
    return out


def _assistant(content: list[Any], param: str) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for i, block in enumerate(content):
        if not isinstance(block, dict):
            raise _bad(f"{param}.{i}: Input should be a valid dictionary", f"{param}.{i}")
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            for key in ("id", "name"):
                if not isinstance(block.get(key), str):
                    raise _bad(f"{param}.{i}.tool_use.{key}: Field required", f"{param}.{i}.{key}")
            arguments = orjson.dumps(block.get("input", {})).decode()
            calls.append(
                {"id": block["id"], "type": "function", "function": {"name": block["name"], "arguments": arguments}}
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    return message


def _messages(request: Mapping[str, Any], failed: set[str]) -> list[dict[str, Any]]:
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages: at least one message is required", "messages")
    out: list[dict[str, Any]] = []
    if (system := _text_of(request.get("system"), "system")) != "":
        out.append({"role": "system", "content": system})
    for i, m in enumerate(messages):
        param = f"messages.{i}"
        if not isinstance(m, dict):
            raise _bad(f"{param}: Input should be a valid dictionary", param)
        if m.get("role") == "system":  # a mid-conversation system turn: a system message in its place
            out.append({"role": "system", "content": _text_of(m.get("content"), f"{param}.content")})
            continue
        if m.get("role") not in ("user", "assistant"):
            raise _bad(f"{param}.role: Input should be 'user', 'assistant' or 'system'", f"{param}.role")
        content = m.get("content")
        if isinstance(content, str):
            out.append({"role": m["role"], "content": content})
        elif isinstance(content, list):
            out += (
                _user(content, f"{param}.content", failed)
                if m["role"] == "user"
                else [_assistant(content, f"{param}.content")]
            )
        else:
            raise _bad(f"{param}.content: Input should be a valid string or list of content blocks", f"{param}.content")
    return out


def _tools(tools: Any, loaded: set[str]) -> list[dict[str, Any]]:
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise _bad("tools: Input should be a valid list", "tools")
    out = []
    for i, tool in enumerate(tools):
        kind = str(tool.get("type") or "custom")
        if kind.startswith(_SERVER_TOOL_TYPES):
            continue  # run by Anthropic's servers: nothing a chat tier could call
        if tool.get("defer_loading") is True and tool.get("name") not in loaded:
            continue  # not in the model's context until a tool search returns a reference to it
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise _bad(f"tools.{i}.name: Field required", f"tools.{i}.name")
        function: dict[str, Any] = {"name": tool["name"], "parameters": tool.get("input_schema") or {"type": "object"}}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any) -> dict[str, Any]:
    """The chat fields of a Messages `tool_choice`."""
    if not isinstance(choice, dict):
        raise _bad("tool_choice: Input should be a valid dictionary", "tool_choice")
    kind = choice.get("type")
    out: dict[str, Any] = {}
    if kind == "tool":
        if not isinstance(choice.get("name"), str):
            raise _bad("tool_choice.tool.name: Field required", "tool_choice.name")
        out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    elif kind in ("auto", "any", "none"):
        out["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[kind]
    else:
        raise _bad(
            f"tool_choice: Input tag {str(kind)[:40]!r} found using 'type' does not match any of the expected tags: "
            "'auto', 'any', 'tool', 'none'",
            "tool_choice.type",
        )
    if choice.get("disable_parallel_tool_use") is True:
        out["parallel_tool_calls"] = False
    return out


def chat_body(request: Mapping[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
    """The chat-completions body of a Messages request, and the tool calls it reports as failed."""
    if not isinstance(request.get("model"), str) or not request["model"]:
        raise _bad("model: Field required", "model")
    failed: set[str] = set()
    body: dict[str, Any] = {"model": request["model"], "messages": _messages(request, failed)}
    body.update({k: request[k] for k in _COPIED if k in request})
    if isinstance(stop := request.get("stop_sequences"), list) and stop:
        body["stop"] = stop
    if request.get("tools") is not None and (tools := _tools(request["tools"], _referenced(request["messages"]))):
        body["tools"] = tools
    if request.get("tool_choice") is not None:
        choice = _tool_choice(request["tool_choice"])  # checked even when no tool reaches a chat tier
        if body.get("tools"):
            body.update(choice)
    if isinstance(metadata := request.get("metadata"), dict) and isinstance(user := metadata.get("user_id"), str):
        body["user"] = user
    if request.get("stream") is True:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if (schema := _output_schema(request)) is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
    return body, frozenset(failed)


def _output_schema(request: Mapping[str, Any]) -> dict[str, Any] | None:
    """A structured output's JSON schema: `output_config.format`, or the beta's older `output_format`."""
    config = request.get("output_config")
    for form in (config.get("format") if isinstance(config, Mapping) else None, request.get("output_format")):
        schema = form.get("schema") if isinstance(form, Mapping) and form.get("type") == "json_schema" else None
        if isinstance(schema, dict):
            return schema
    return None


def left_out(request: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of the fields a chat tier does not get of this request, sorted (nested ones dotted;
    a name the published API does not have is "other": they are metric labels)."""
    names = {k if k in _PUBLISHED else "other" for k in request if k not in _TRANSLATED and k != "output_config"}
    if isinstance(config := request.get("output_config"), Mapping):
        names |= {f"output_config.{k}" if k in _OUTPUT_CONFIG else "other" for k in config if k != "format"}
    return tuple(sorted(names))


def _input_of(arguments: Any) -> Any:
    """A tool call's arguments as the `input` object; text that is not JSON stays text (only an
    unchecked tier can deliver it, and the client should see what the model said)."""
    try:
        return orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return arguments


def content_blocks(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if isinstance(text := message.get("content"), str) and text:
        blocks.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        blocks.append({"type": "tool_use", "id": str(call.get("id") or new_tool_id()), "name": str(fn.get("name", "")),
                       "input": _input_of(fn.get("arguments"))})  # fmt: skip
    return blocks


def new_tool_id() -> str:
    return "toolu_" + secrets.token_hex(12)


def usage_of(usage: Any) -> dict[str, int]:
    usage = usage if isinstance(usage, dict) else {}
    return {
        "input_tokens": token_count(usage.get("prompt_tokens")),
        "output_tokens": token_count(usage.get("completion_tokens")),
    }


def message_of(reply: Mapping[str, Any], model: str, message_id: str) -> dict[str, Any]:
    """A chat.completion → the Messages `message` object."""
    choices = reply.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": str(reply.get("model") or model),
        "content": content_blocks(message),
        "stop_reason": stop_reason(choice.get("finish_reason"), bool(message.get("tool_calls"))),
        "stop_sequence": None,
        "usage": usage_of(reply.get("usage")),
    }
