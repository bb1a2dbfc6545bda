"""Salvage: a tool call the model wrote as text becomes the structured call it meant.

Small models often answer a tool-calling request with the call as text — a ```json block, Qwen's
`<tool_call>…</tool_call>`, a bare `{"name": …, "arguments": …}` — instead of a tool call. When
every call so written names an offered tool and its arguments validate against that tool's schema
(the same checks every answer gets, router/core/checks/validate.py), the answer is rewritten into the
structured call(s) before it is judged: no extra model call, nothing escalated. A call written
again word for word is made once (seen: the 0.5B writing one call 40 times until max_tokens). What fails salvage
is judged as written (a `text_tool_call` mistake) and escalates as before. The calls are checked as
one answer, so a sweep of the offered tools, each call valid, is not salvaged: it is judged as the
text it is, a `tool_sweep`. A sign is no defect (router/mistakes.py): the agent's last call written
again, or a spray, is salvaged and then judged as the call it is — the 1.5B writes its repeats as
text, and judged as text each went through a repair that only made the same call again.

    salvaged_message(message, request, names, validator)   the rewritten message, or None
    salvage_reply(attempts, tier, reply)                   a whole answer, in place (pipeline)
    salvage_stream(attempts, tier, gate)                   a held stream's answer (pipeline)

On by default for every route; a route turns it off with `salvage: false`. A salvaged answer is
counted (`salvaged` in stats, per tier, route and tool) and marked (`x-router-salvaged: true`).
A call that opens like one but stops short of its closing brackets (`{"name": "x", "arguments": {"a": 1}`:
small models end early) is closed — at most `_MAX_CLOSERS` brackets, only after a complete value,
never inside a string — and then salvaged like any other, schema check included.
Text the client already received cannot be taken back: in a stream only text the `Gate` held (it
holds text that opens like a call when tools are offered) is salvaged.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from router.core.checks.text_calls import opens_like_call, written_call_objects
from router.core.checks.validate import Validator
from router.mistakes import SIGNS

if TYPE_CHECKING:
    from router.flow.attempts import Attempts
    from router.flow.streaming import Gate
    from router.upstream.base import Reply

# What is left around the calls once they are cut out: fences, tags, a "functions.x:" or "json" label.
_WRAPPING = re.compile(
    r"```[ \t]*[\w-]*|</?tool_call>|<\|im_(?:start|end)\|>|\bfunctions\.[\w.-]+:|^\s*(?:json|tool_call)\s*$",
    re.I | re.M,
)


_MAX_CLOSERS = 3
_MAX_CLOSE_SCAN = 16_384  # characters: a call cut short is short; longer text is not scanned
_CLOSER = {"{": "}", "[": "]"}


def _closed(text: str) -> str | None:
    """`text` with the brackets it leaves open closed, if it ends right after a complete JSON value
    with at most `_MAX_CLOSERS` open; else None (inside a string, after `:` or `,`, or balanced)."""
    if len(text) > _MAX_CLOSE_SCAN:
        return None
    stack: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in _CLOSER:
            stack.append(_CLOSER[ch])
        elif ch in "}]" and (not stack or stack.pop() != ch):
            return None
    tail = text.rstrip()
    if in_string or not stack or len(stack) > _MAX_CLOSERS or not tail or tail[-1] in ":,{[":
        return None
    return tail + "".join(reversed(stack))


def _call_id() -> str:
    return "call_" + secrets.token_hex(12)


def _arguments(value: Any) -> str | None:
    """A written call's arguments as the JSON object text a tool call carries; None if not an object."""
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
    return orjson.dumps(value).decode() if isinstance(value, dict) else None


def salvaged_message(
    message: Mapping[str, Any], request: Mapping[str, Any], names: Collection[str], validator: Validator
) -> dict[str, Any] | None:
    """`message` with its text calls made structured, or None: nothing written as a call, a call
    whose arguments are not an object, or any mistake in the result (schema, tool_choice...)."""
    content = message.get("content")
    if message.get("tool_calls") or not isinstance(content, str) or not names:
        return None
    written = written_call_objects(content, names)
    if not written and opens_like_call(content) and (closed := _closed(content)) is not None:
        content = closed
        written = written_call_objects(content, names)
    if not written:
        return None
    calls, seen = [], set()
    for call in written:
        if (args := _arguments(call.arguments)) is None:
            return None
        if (call.name, args) in seen:  # written again word for word: one call (a small model looping)
            continue
        seen.add((call.name, args))
        calls.append({"id": _call_id(), "type": "function", "function": {"name": call.name, "arguments": args}})
    kept, at = [], 0
    for call in written:
        if call.start >= at:  # a list of calls shares one span
            kept.append(content[at : call.start])
            at = call.end
    kept.append(content[at:])
    rest = _WRAPPING.sub("", "".join(kept)).strip()
    if not any(ch.isalnum() for ch in rest):  # stray brackets or punctuation: no words for the client
        rest = ""
    out = {**message, "content": rest or None, "tool_calls": calls}
    if any(m.kind not in SIGNS for m in validator.check(out, request, finish_reason="tool_calls")):
        return None
    return out  # a sign (the agent's last call again, a spray) is no defect: judged as the call it is


def _enabled(attempts: Attempts) -> bool:
    return attempts.route_spec is None or attempts.route_spec.salvage


def _salvage(attempts: Attempts, tier: str, message: Mapping[str, Any]) -> dict[str, Any] | None:
    if not _enabled(attempts):
        return None
    names = attempts.call.features.tool_names
    fixed = salvaged_message(message, attempts.call.body, names, attempts.parts.validator)
    if fixed is None:
        return None
    attempts.salvaged = True
    tools = [c["function"]["name"] for c in fixed["tool_calls"]]
    attempts.record.salvaged(tier, tools)
    return fixed


def salvage_reply(attempts: Attempts, tier: str, reply: Reply) -> None:
    """Rewrite a whole answer in place when its text calls salvage. A tier answering in the
    client's own API (`reply.native`) is left as it is."""
    choices = reply.data.get("choices")
    if reply.native is not None or not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return
    message = choices[0].get("message")
    if not isinstance(message, dict) or (fixed := _salvage(attempts, tier, message)) is None:
        return
    choices[0] = {**choices[0], "message": fixed, "finish_reason": "tool_calls"}
    reply.raw = None  # the upstream's bytes no longer say what the client gets


def salvage_stream(attempts: Attempts, tier: str, gate: Gate) -> None:
    """Rewrite a held stream's answer when its text calls salvage (the gate then releases calls)."""
    if not gate.text_held():
        return
    if (fixed := _salvage(attempts, tier, gate.message())) is not None:
        gate.replace_text(fixed.get("content"), fixed["tool_calls"])
