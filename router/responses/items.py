"""Responses input and output items ↔ chat messages.

    input_messages(input, tools, left_out)   `input` (a string or items) → chat messages
    items_of(messages, tools)                chat messages → Responses items (the inverse, for native
                                             tiers and tests)
    output_items(message, tools=...)         one assistant chat message → output items (message,
                                             function_call, custom_tool_call)
    assistant_message(output, tools)         output items → the chat message the history remembers

Calls take the names a chat tier knows (router/upstream/responses_tools.py) on the way in and the client's
names, namespaces and item types on the way out. What no chat message can hold is carried in the
history as `{"role": CARRIED, "item": ...}` (tools of `additional_tools` items, item types unknown
here, and the model's own state — reasoning and compaction items, input and output alike, so a
chain resolved by `previous_response_id` gives a native tier its reasoning back: native tiers get
them, each only its own model's (router/sessions/provenance.py); chat tiers never see them) or left
out (content parts such as files, roles other than user, assistant, system and developer), and
counted in `left_out`.
A call or output without a `call_id` gets a made-up one, consistent for both sides.
"""

from __future__ import annotations

import hashlib
import secrets
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from router.errors import BadRequest
from router.upstream.responses_tools import TOOL_ITEMS, ToolMap, freeform_arguments

_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text", "reasoning_text"})
STATE_ITEMS = frozenset({"reasoning", "compaction", "compaction_summary"})  # the model's own: a chat tier has none
CARRIED = "x-router-item"  # a history entry holding an input item no chat message can


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


# -- items → messages --------------------------------------------------------------------------------
def input_messages(
    input_: Any, tools: ToolMap | None = None, left_out: Counter[str] | None = None
) -> list[dict[str, Any]]:
    """`input` → chat messages. Consecutive calls (and the assistant text before them) form one
    assistant message; what no chat message can hold is carried (`CARRIED`) or left out (counted)."""
    if input_ is None:
        return []
    if isinstance(input_, str):
        return [{"role": "user", "content": input_}]
    if not isinstance(input_, list):
        raise BadRequest("Invalid type for 'input': expected a string or an array of items.", param="input")
    return _Items(tools or ToolMap(), left_out if left_out is not None else Counter()).convert(input_)


class _Items:
    def __init__(self, tools: ToolMap, left_out: Counter[str]) -> None:
        self.tools = tools
        self.left_out = left_out
        self.out: list[dict[str, Any]] = []
        self.answered: set[str] = set()  # call ids with an output already

    def convert(self, items: list[Any]) -> list[dict[str, Any]]:
        for i, item in enumerate(items):
            param = f"input[{i}]"
            if not isinstance(item, dict):
                raise BadRequest(f"Invalid type for '{param}': expected an object.", param=param)
            kind = item.get("type") or ("message" if "role" in item else None)
            if kind == "message":
                self._message(item, param)
            elif kind in ("function_call", "custom_tool_call"):
                self._call(item, kind, param)
            elif kind in ("function_call_output", "custom_tool_call_output"):
                self._output(item, param)
            elif kind in STATE_ITEMS:  # carried, not counted: nothing a chat tier could have used
                self.out.append({"role": CARRIED, "item": item})
            else:  # additional_tools (its tools are in the ToolMap) and item types a chat tier has no form for
                if kind not in TOOL_ITEMS:
                    self.left_out[f"item:{str(kind)[:64]}"] += 1
                self.out.append({"role": CARRIED, "item": item})
        return self.out

    def _message(self, item: Mapping[str, Any], param: str) -> None:
        role = _ROLES.get(str(item.get("role")))
        if role is None:
            self.left_out[f"role:{str(item.get('role'))[:64]}"] += 1
            self.out.append({"role": CARRIED, "item": dict(item)})
            return
        content = _content(item.get("content"), f"{param}.content", role == "assistant", self.left_out)
        self.out.append({"role": role, "content": content})

    def _call(self, item: Mapping[str, Any], kind: str, param: str) -> None:
        name = _str(item, "name", param)
        if kind == "custom_tool_call":
            arguments = freeform_arguments(item.get("input"))
        else:
            arguments = str(item.get("arguments") or "")
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:  # carried with an id of its own, used for its output too
            call_id = _made_id(param, name)
        chat_name = self.tools.chat_name(item.get("namespace"), name)
        call = {"id": call_id, "type": "function", "function": {"name": chat_name, "arguments": arguments}}
        last = self.out[-1] if self.out else None
        if last is not None and last["role"] == "assistant":
            last.setdefault("tool_calls", []).append(call)
        else:
            self.out.append({"role": "assistant", "content": None, "tool_calls": [call]})

    def _output(self, item: Mapping[str, Any], param: str) -> None:
        output = item.get("output")
        content = output if isinstance(output, str) else _content(output, f"{param}.output", True, self.left_out)
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            call_id = self._pair(item, param)
        self.answered.add(call_id)
        self.out.append({"role": "tool", "tool_call_id": call_id, "content": content})

    def _pair(self, item: Mapping[str, Any], param: str) -> str:
        """The call an output without `call_id` answers: the latest unanswered call of its name, else
        a call made up for it (so the tier sees a call and its result, not a dangling result)."""
        name = item.get("name") if isinstance(item.get("name"), str) else None
        chat_name = self.tools.chat_name(item.get("namespace"), name) if name else None
        for m in reversed(self.out):
            for call in reversed(m.get("tool_calls") or ()):
                if call["id"] not in self.answered and chat_name in (None, call["function"]["name"]):
                    return str(call["id"])
        made = _made_id(param, name or "tool")
        fn = {"name": chat_name or "tool", "arguments": "{}"}
        self.out.append({"role": "assistant", "content": None, "tool_calls": [{"id": made, "type": "function",
                                                                                "function": fn}]})  # fmt: skip
        return made


def _made_id(param: str, name: str) -> str:
    """A call id for an item that came without one: the same for the same item in the same place."""
    return "call_" + hashlib.sha256(f"{param}\0{name}".encode()).hexdigest()[:24]


def _str(item: Mapping[str, Any], key: str, param: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"Missing required parameter: '{param}.{key}'.", param=f"{param}.{key}")
    return value


def _content(content: Any, param: str, flatten: bool, left_out: Counter[str]) -> Any:
    """Message content → chat content: a string when it is all text, else a list of chat parts; parts a
    chat message cannot hold (files, audio, images in assistant text or tool output) are left out."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"Invalid type for '{param}': expected a string or an array of parts.", param=param)
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(part, dict):
            raise BadRequest(f"Invalid type for '{param}[{j}]': expected an object.", param=f"{param}[{j}]")
        if kind in _TEXT_PARTS:
            parts.append({"type": "text", "text": str(part.get("text") or "")})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal") or "")})
        elif kind == "input_image" and isinstance(part.get("image_url"), str) and not flatten:
            image = {"url": part["image_url"], **({"detail": part["detail"]} if part.get("detail") else {})}
            parts.append({"type": "image_url", "image_url": image})
        else:
            left_out[f"part:{str(kind)[:64]}"] += 1
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


# -- messages → items --------------------------------------------------------------------------------
def items_of(messages: Sequence[Mapping[str, Any]], tools: ToolMap | None = None) -> list[dict[str, Any]]:
    """Chat messages → Responses input items (system messages become `system` role messages; calls and
    their outputs take the names and types the client offered; carried items come back as they were)."""
    items: list[dict[str, Any]] = []
    outputs: dict[str, str] = {}  # call id → the output item type that answers it
    for m in messages:
        role = m.get("role")
        if role == CARRIED:
            items.append(dict(m["item"]))
        elif role == "assistant":
            calls = output_items(m, tools=tools)
            outputs.update({str(c["call_id"]): c["type"] + "_output" for c in calls if "call_id" in c})
            items += calls
        elif role == "tool":
            call_id = str(m.get("tool_call_id"))
            kind = outputs.get(call_id, "function_call_output")
            items.append({"type": kind, "call_id": call_id, "output": _text(m)})
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


def output_items(
    message: Mapping[str, Any], *, status: str = "completed", tools: ToolMap | None = None
) -> list[dict[str, Any]]:
    """One assistant chat message → a message item (if it has text, with the client's own tool names)
    and one call item per tool call."""
    items: list[dict[str, Any]] = []
    if text := _text(message):
        items.append(message_item(tools.client_text(text) if tools else text, status=status))
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        call_id, name, arguments = (
            str(call.get("id") or new_id("call")),
            str(fn.get("name") or ""),
            str(fn.get("arguments") or ""),
        )
        items.append((tools or ToolMap()).call_item(call_id, name, arguments, item_id=new_id("fc")))
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


def assistant_message(output: Sequence[Mapping[str, Any]], tools: ToolMap | None = None) -> dict[str, Any] | None:
    """The chat message for a response's output items (what the history remembers of the answer)."""
    kept = [dict(i) for i in output if i.get("type") in ("message", "function_call", "custom_tool_call")]
    messages = input_messages(kept, tools)
    return messages[0] if messages else None
