"""Wire formats of the fake upstream: OpenAI chat completions and Anthropic Messages, JSON and SSE.

Pure functions from an ``Answer`` (see ``fake_tools``) to bytes; ``router.fake`` serves them.
"""

from __future__ import annotations

from typing import Any

import orjson

from router.fake.tools import Answer

Tools = list[tuple[str, Any]]  # (name, JSON schema of the arguments)

_OPENAI_ERRORS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "not_found"),
    429: ("requests", "rate_limit_exceeded"),
}
_ANTHROPIC_ERRORS: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}
MALFORMED_CHAT = b'data: {"id": "chatcmpl-broken", "choices": [{"delta": {"content": "oops\n\n'
MALFORMED_ANTHROPIC = b"event: content_block_delta\ndata: {not json\n\n"


def error_body(status: int, message: str, anthropic: bool) -> bytes:
    if anthropic:
        kind = _ANTHROPIC_ERRORS.get(status, "api_error")
        return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})
    default = ("server_error" if status >= 500 else "invalid_request_error", None)
    kind, code = _OPENAI_ERRORS.get(status, default)
    return orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})


def prompt_tokens(body: dict[str, Any]) -> int:
    """A rough, serialization-independent token count: text length / 4 plus 4 per message."""
    chars, count = 0, 0
    system = body.get("system")
    for message in [*body["messages"], {"content": system}] if system else body["messages"]:
        count += 1
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            for part in content:
                text = part.get("text") if isinstance(part, dict) else part
                chars += len(text) if isinstance(text, str) else 0
    return chars // 4 + 4 * count + 1


def _fragments(text: str, parts: int = 4) -> list[str]:
    step = max(1, -(-len(text) // parts))
    return [text[i : i + step] for i in range(0, len(text), step)]


def _words(text: str) -> list[str]:
    return [(w if i == 0 else " " + w) for i, w in enumerate(text.split(" "))]


# ---------------------------------------------------------------- OpenAI chat completions


def openai_tools(body: dict[str, Any]) -> tuple[Tools, str | None]:
    """The offered function tools and the forced tool name; no tools when ``tool_choice`` is "none"."""
    choice, tools = body.get("tool_choice"), body.get("tools")
    if not isinstance(tools, list) or not tools or choice == "none":
        return [], None
    out: Tools = []
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            out.append((fn["name"], fn.get("parameters") or {}))
    named = choice.get("function", choice) if isinstance(choice, dict) else None
    chosen = named.get("name") if isinstance(named, dict) else None
    return out, chosen if isinstance(chosen, str) else None


def chat_completion(
    answer: Answer,
    cid: str,
    created: int,
    model: str,
    usage: dict[str, int],
    service_tier: str | None = None,
    reasoning: str | None = None,
) -> bytes:
    """`service_tier`: the tier that served it, when the request asked for one (router/fake/speed.py);
    `reasoning`: the message's `reasoning_content` (router/fake/reasoning.py)."""
    message: dict[str, Any] = {"role": "assistant", "content": answer.text, "refusal": None}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    finish = "stop"
    if answer.tool_name is not None:
        function = {"name": answer.tool_name, "arguments": answer.tool_args}
        message["tool_calls"] = [{"id": answer.call_id, "type": "function", "function": function}]
        finish = "tool_calls"
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
    served = {"service_tier": service_tier} if service_tier is not None else {}
    return orjson.dumps(
        {"id": cid, "object": "chat.completion", "created": created, "model": model, **served,
         "system_fingerprint": "fake", "choices": [choice], "usage": usage}
    )  # fmt: skip


def chat_chunks(
    answer: Answer,
    cid: str,
    created: int,
    model: str,
    usage: dict[str, int] | None,
    service_tier: str | None = None,
    reasoning: str | None = None,
) -> list[bytes]:
    """SSE events shaped like OpenAI's; ``usage`` given means ``stream_options.include_usage``;
    ``service_tier`` is in every chunk when given; ``reasoning`` comes first, word by word, in
    ``reasoning_content`` deltas."""
    prefix = b'data: {"id":"%s","object":"chat.completion.chunk","created":%d,"model":%s,' % (
        cid.encode(),
        created,
        orjson.dumps(model),
    )
    if service_tier is not None:
        prefix += b'"service_tier":' + orjson.dumps(service_tier) + b","
    prefix += b'"system_fingerprint":"fake",'
    head = prefix + b'"choices":[{"index":0,"delta":'
    end = b',"usage":null}\n\n' if usage is not None else b"}\n\n"
    tail = b',"logprobs":null,"finish_reason":null}]' + end
    out: list[bytes] = []
    if reasoning is not None:
        out += [head + orjson.dumps({"role": "assistant", "content": None, "reasoning_content": word}) + tail
                for word in _words(reasoning)]  # fmt: skip
    if answer.tool_name is not None:
        function = {"name": answer.tool_name, "arguments": ""}
        call = {"index": 0, "id": answer.call_id, "type": "function", "function": function}
        out.append(head + orjson.dumps({"role": "assistant", "content": None, "tool_calls": [call]}) + tail)
        for piece in _fragments(answer.tool_args or ""):
            delta = {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
            out.append(head + orjson.dumps(delta) + tail)
        finish = b'"tool_calls"'
    else:
        out.append(head + b'{"role":"assistant","content":""}' + tail)
        out += [head + orjson.dumps({"content": word}) + tail for word in _words(answer.text or "")]
        finish = b'"stop"'
    out.append(head + b'{},"logprobs":null,"finish_reason":' + finish + b"}]" + end)
    if usage is not None:
        out.append(prefix + b'"choices":[],"usage":' + orjson.dumps(usage) + b"}\n\n")
    out.append(b"data: [DONE]\n\n")
    return out


# ---------------------------------------------------------------- Anthropic Messages


def anthropic_tools(body: dict[str, Any]) -> tuple[Tools, str | None]:
    choice = body.get("tool_choice")
    choice = choice if isinstance(choice, dict) else {}
    tools = body.get("tools")
    if not isinstance(tools, list) or choice.get("type") == "none":
        return [], None
    out = [(t["name"], t.get("input_schema") or {}) for t in tools if isinstance(t, dict) and "name" in t]
    chosen = choice.get("name") if choice.get("type") == "tool" else None
    return out, chosen if isinstance(chosen, str) else None


def anthropic_message(
    answer: Answer, mid: str, model: str, usage: tuple[int, int], thinking: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """`thinking`: the blocks the answer starts with (router/fake/reasoning.py)."""
    content: list[dict[str, Any]] = list(thinking or ())
    if answer.text is not None:
        content.append({"type": "text", "text": answer.text})
    if answer.tool_name is not None:
        try:
            args: Any = orjson.loads(answer.tool_args or "{}")
        except orjson.JSONDecodeError:
            args = answer.tool_args  # invalid_json: the raw text, as no object can carry it
        call_id = (answer.call_id or "").replace("call_", "toolu_", 1)
        content.append({"type": "tool_use", "id": call_id, "name": answer.tool_name, "input": args})
    return {
        "id": mid, "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": "tool_use" if answer.tool_name else "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }  # fmt: skip


def _sse(data: dict[str, Any]) -> bytes:
    kind: str = data["type"]
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def anthropic_events(answer: Answer, message: dict[str, Any]) -> list[bytes]:
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    out = [_sse({"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            empty: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": word} for word in _words(block["text"])]
        elif block["type"] == "thinking":  # as Anthropic streams it: the text, then the signature
            empty = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": word} for word in _words(block["thinking"]) if word]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif block["type"] == "redacted_thinking":  # whole in its start event
            empty, deltas = block, []
        else:
            empty = {**block, "input": {}}
            pieces = _fragments(answer.tool_args or "")
            deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in pieces]
        out.append(_sse({"type": "content_block_start", "index": index, "content_block": empty}))
        out += [_sse({"type": "content_block_delta", "index": index, "delta": d}) for d in deltas]
        out.append(_sse({"type": "content_block_stop", "index": index}))
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    out.append(_sse({"type": "message_delta", "delta": delta, "usage": {"output_tokens": usage["output_tokens"]}}))
    out.append(_sse({"type": "message_stop"}))
    return out
