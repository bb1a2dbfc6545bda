"""Reasoning state bound to a model, as the providers bind it, for the fake upstream (server.py).

Anthropic Messages, with `thinking` on (`enabled` or `adaptive`): the answer starts with a thinking
block whose `signature` is an HMAC, under the fake's `signing_key`, of the request's `model` and the
block's text (empty with `display: "omitted"`); a last user turn holding Anthropic's test string
(`REDACTED_TRIGGER`) gets a `redacted_thinking` block instead, its `data` sealed for the model the
same way. A request is refused with Anthropic's 400 (`invalid_request_error`) when

    a thinking block's signature, or a redacted block's data, was not made for the request's model:
        "messages.N.content.M: Invalid `signature` in `thinking` block" (`data`, `redacted_thinking`)
    `thinking: {type: "enabled"}` and the final assistant turn of a tool loop in progress (its
    tool_use answered by the last user turn's tool_result) does not start with a thinking block:
        "messages.N.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. ..."

OpenAI Responses, with `include: ["reasoning.encrypted_content"]`: the output starts with a
`reasoning` item whose `encrypted_content` is sealed for the request's model; an input item whose
`encrypted_content` was not (reasoning, compaction, ...) is refused with OpenAI's 400
`invalid_encrypted_content` ("The encrypted content gAAA...xyz= could not be verified.").

Thinking off (`thinking: {type: "disabled"}`, or no `thinking`) beside an effort level
(`effort_refusal`): a `disabled` object with any key but `type` is refused as Anthropic refuses it
("thinking.disabled.display: Extra inputs are not permitted"); an `output_config.effort` above the
fake's `effort_without_thinking` ("max": every level is taken; "high": Anthropic's newest models;
"none": no effort at all, as DeepSeek's Anthropic API) with that upstream's 400.

Chat completions, as servers with a reasoning parser answer (DeepSeek, vLLM, llama.cpp's
`reasoning_format`), per the fake's `reasoning_content`: "write" — each answer carries its
`reasoning_content` (a message field; in a stream, the first delta), naming the request's model;
"require" — as "write", and a tool loop's final assistant turn with tool calls but no
`reasoning_content` is refused as DeepSeek's thinking mode refuses it ("Missing `reasoning_content`
field in the assistant message at message index N"); "refuse" — a server without a parser, that
refuses the field in any message ("messages.N.reasoning_content: Extra inputs are not permitted").

Refusals are counted by kind (`signature`, `thinking_required`, `effort`, `encrypted_content`,
`reasoning_content`) in
/_fake/stats' `refused`. Nothing here draws from the fake's generator: every other answer is as before.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Any

import orjson

REDACTED_TRIGGER = "ANTHROPIC_MAGIC_STRING_TRIGGER_REDACTED_THINKING"
_FERNET_HEAD = b"\x80\x00\x00\x00\x00"  # what a Fernet token (OpenAI's encrypted content) starts with: "gAAAAA"
_NONCE = 12


def _mac(key: str, model: str, payload: bytes) -> bytes:
    return hmac.new(key.encode(), model.encode() + b"\0" + payload, hashlib.sha256).digest()


def signature(key: str, model: str, text: str) -> str:
    """A thinking block's signature: bound to `model` and to the block's text."""
    return base64.b64encode(_mac(key, model, text.encode())).decode()


def seal(key: str, model: str, seed: str, urlsafe: bool = False) -> str:
    """An opaque value only `model` takes (redacted thinking's `data`, Responses' `encrypted_content`)."""
    nonce = hashlib.sha256(seed.encode()).digest()[:_NONCE]
    raw = _FERNET_HEAD + nonce + _mac(key, model, nonce)
    return (base64.urlsafe_b64encode if urlsafe else base64.b64encode)(raw).decode()


def _sealed_for(key: str, model: str, value: Any, urlsafe: bool = False) -> bool:
    if not isinstance(value, str):
        return False
    try:
        raw = (base64.urlsafe_b64decode if urlsafe else base64.b64decode)(value.encode())
    except (binascii.Error, ValueError):
        return False
    head, nonce, mac = raw[: len(_FERNET_HEAD)], raw[len(_FERNET_HEAD) : -32], raw[-32:]
    return head == _FERNET_HEAD and len(nonce) == _NONCE and hmac.compare_digest(mac, _mac(key, model, nonce))


# -- Anthropic Messages --------------------------------------------------------------------------------
def _anthropic_error(message: str) -> bytes:
    return orjson.dumps({"type": "error", "error": {"type": "invalid_request_error", "message": message}})


def messages_refusal(body: dict[str, Any], key: str) -> tuple[str, bytes] | None:
    """(kind, Anthropic's 400 body) for a request Anthropic would refuse over its thinking blocks."""
    model = str(body.get("model") or "")
    messages = body["messages"]
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else ()):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "thinking":
                text = block.get("thinking")
                made = isinstance(text, str) and hmac.compare_digest(
                    str(block.get("signature")).encode(), signature(key, model, text).encode()
                )
                if not made:
                    return "signature", _anthropic_error(
                        f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                    )
            elif kind == "redacted_thinking" and not _sealed_for(key, model, block.get("data")):
                return "signature", _anthropic_error(
                    f"messages.{i}.content.{j}: Invalid `data` in `redacted_thinking` block"
                )
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        turn = _final_assistant_turn(messages)
        first = messages[turn]["content"][0] if turn is not None else None
        kind = first.get("type") if isinstance(first, dict) else None
        if turn is not None and kind not in ("thinking", "redacted_thinking"):
            return "thinking_required", _anthropic_error(
                f"messages.{turn}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{kind}`. "
                "When `thinking` is enabled, a final `assistant` message must start with a thinking block "
                "(preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include "
                "thinking blocks from previous turns. To avoid this requirement, disable `thinking`."
            )
    return None


EFFORTS = ("low", "medium", "high", "xhigh", "max")


def effort_refusal(body: dict[str, Any], highest: str) -> tuple[str, bytes] | None:
    """("effort", the 400 body) for thinking off written with more than its `type`, or beside an
    effort level above `highest` ("none": any)."""
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "disabled":
        if extra := sorted(k for k in thinking if k != "type"):
            return "effort", _anthropic_error(f"thinking.disabled.{extra[0]}: Extra inputs are not permitted")
    elif thinking is not None:
        return None
    config = body.get("output_config")
    level = config.get("effort") if isinstance(config, dict) else None
    if not isinstance(level, str) or highest == "max":
        return None
    if highest == "none":
        return "effort", _anthropic_error("thinking options type cannot be disabled when reasoning_effort is set")
    if level in EFFORTS and EFFORTS.index(level) > EFFORTS.index(highest):
        return "effort", _anthropic_error(
            f"output_config.effort {level!r} is not supported when thinking is disabled on this model. "
            f"Use effort {highest!r} or below, or enable thinking."
        )
    return None


def _final_assistant_turn(messages: list[Any]) -> int | None:
    """The index of the final assistant turn's first message when the turns after it (user, system)
    hold a tool_result, i.e. a tool loop is in progress; None otherwise."""
    results = False
    i = len(messages) - 1
    while i >= 0 and isinstance(messages[i], dict) and messages[i].get("role") != "assistant":
        content = messages[i].get("content")
        blocks = content if isinstance(content, list) else ()
        results = results or any(isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks)
        i -= 1
    if i < 0 or not results:
        return None
    while i > 0 and isinstance(messages[i - 1], dict) and messages[i - 1].get("role") == "assistant":
        i -= 1
    content = messages[i].get("content")
    return i if isinstance(content, list) and content else None


def thinking_blocks(body: dict[str, Any], key: str, tool: str | None) -> list[dict[str, Any]]:
    """The thinking block an answer starts with when the request turns thinking on; none otherwise."""
    thinking = body.get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "adaptive"):
        return []
    model = str(body.get("model") or "")
    last = _last_user_text(body["messages"])
    if REDACTED_TRIGGER in last:
        return [{"type": "redacted_thinking", "data": seal(key, model, last)}]
    text = f"{len(body['messages'])} messages so far; " + (f"calling {tool}." if tool else "answering in words.")
    if thinking.get("display") == "omitted":
        text = ""
    return [{"type": "thinking", "thinking": text, "signature": signature(key, model, text)}]


def _last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            blocks = content if isinstance(content, list) else ()
            return " ".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text")
    return ""


# -- chat completions ---------------------------------------------------------------------------------
def _openai_error(message: str, param: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}})


def chat_refusal(body: dict[str, Any], mode: str) -> tuple[str, bytes] | None:
    """("reasoning_content", the 400 body) for a chat request the fake's `reasoning_content` mode refuses."""
    messages = body["messages"]
    if mode == "refuse":
        for i, message in enumerate(messages):
            if isinstance(message, dict) and "reasoning_content" in message:
                param = f"messages.{i}.reasoning_content"
                return "reasoning_content", _openai_error(f"{param}: Extra inputs are not permitted", param)
    elif mode == "require":
        i = len(messages) - 1
        while i >= 0 and isinstance(messages[i], dict) and messages[i].get("role") == "tool":
            i -= 1  # the loop's results; before them, its final assistant turn
        last = messages[i] if i >= 0 and i < len(messages) - 1 else None
        if isinstance(last, dict) and last.get("tool_calls") and not isinstance(last.get("reasoning_content"), str):
            return "reasoning_content", _openai_error(
                f"Missing `reasoning_content` field in the assistant message at message index {i}. In thinking "
                "mode, the reasoning of a turn that called tools must be passed back."
            )
    return None


def chat_reasoning(body: dict[str, Any], mode: str, tool: str | None) -> str | None:
    """The `reasoning_content` an answer carries (None: the mode writes none)."""
    if mode not in ("write", "require"):
        return None
    return f"{body.get('model')} read {len(body['messages'])} messages; " + (
        f"calling {tool}." if tool else "answering in words."
    )


# -- OpenAI Responses ---------------------------------------------------------------------------------
def responses_refusal(body: dict[str, Any], key: str) -> tuple[str, bytes] | None:
    """(kind, OpenAI's 400 body) for input items whose encrypted content was not made for the model."""
    model = str(body.get("model") or "")
    items = body.get("input")
    for item in items if isinstance(items, list) else ():
        value = item.get("encrypted_content") if isinstance(item, dict) else None
        if isinstance(value, str) and not _sealed_for(key, model, value, urlsafe=True):
            shown = f"{value[:4]}...{value[-4:]}" if len(value) > 8 else value
            message = f"The encrypted content {shown} could not be verified."
            error = {"message": message, "type": "invalid_request_error", "param": None,
                     "code": "invalid_encrypted_content"}  # fmt: skip
            return "encrypted_content", orjson.dumps({"error": error})
    return None


def reasoning_items(body: dict[str, Any], key: str, rid: str) -> list[dict[str, Any]]:
    """The reasoning item an answer starts with when the request includes encrypted reasoning."""
    include = body.get("include")
    if not isinstance(include, list) or "reasoning.encrypted_content" not in include:
        return []
    sealed = seal(key, str(body.get("model") or ""), rid, urlsafe=True)
    return [{"type": "reasoning", "id": f"rs_{rid}", "summary": [], "encrypted_content": sealed}]
