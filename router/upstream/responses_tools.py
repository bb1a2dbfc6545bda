"""Responses tools as a chat tier sees them, and the tier's calls as the client offered them.

    ToolMap.of(tools, items)    the map of a request: its `tools`, then the tools of `additional_tools`
                                and `tool_search_output` items (Codex sends its tools that way), in order
    .chat_tools                 the function tools a chat tier gets
    .left_out                   the types of tools it does not get (hosted tools: web_search, ...)
    .chat_name(namespace, name) the function name a chat tier knows a client's tool by
    .call_item(...)             a chat tool call → the output item the client expects
    .client_text(text)          text a chat tier wrote, with the names it knows the client's tools by
                                written as the client's (`ClientText`: the same, delta by delta)

Chat tiers take only flat function tools, so of the Responses tool types:
  function            as it is (a deferred one, `defer_loading`, is offered right away: a chat tier
                      cannot search for it)
  namespace           each of its function and custom tools, as a function named `{namespace}__{name}`;
                      the call goes back as a `function_call` / `custom_tool_call` with `namespace`
  custom (freeform)   a function taking `{"input": string}` (the grammar, if any, in its description);
                      the call goes back as a `custom_tool_call` whose `input` is that string
  anything else       (web_search, file_search, code_interpreter, image_generation, local_shell, mcp,
                      computer_use, tool_search, ...) run by OpenAI's servers, not callable by a chat
                      tier: left out, and reported
Generated names keep to what chat tiers accept (`[A-Za-z0-9_-]`, at most 64 characters) and never
collide: a name that would gets a short hash of the original in its place. They are the router's, never
the client's: where a chat tier's text names a tool by one ("I will call clock__sleep"), the client
reads the tool's own name, `namespace.name` for a namespaced one ("I will call clock.sleep").
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

SEPARATOR = "__"
MAX_NAME = 64
TOOL_ITEMS = ("additional_tools", "tool_search_output")  # input items that carry tools
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_WORD = re.compile(r"[A-Za-z0-9_-]+")  # a run of name characters: a generated name is always a whole one


@dataclass(frozen=True, slots=True)
class Offered:
    kind: str  # "function" or "custom"
    name: str
    namespace: str | None = None


@dataclass
class ToolMap:
    chat_tools: list[dict[str, Any]] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    by_chat: dict[str, Offered] = field(default_factory=dict)
    _chat: dict[tuple[str | None, str], str] = field(default_factory=dict)
    _renamed: dict[str, str] | None = field(default=None, compare=False)  # `renamed`, once asked for

    @classmethod
    def of(cls, tools: Any, items: Iterable[Any] = ()) -> ToolMap:
        m = cls()
        for tool in tools if isinstance(tools, list) else ():
            m._add(tool, None)
        for item in items:
            if isinstance(item, dict) and item.get("type") in TOOL_ITEMS and isinstance(item.get("tools"), list):
                for tool in item["tools"]:
                    m._add(tool, None)
        return m

    @classmethod
    def of_request(cls, request: Mapping[str, Any]) -> ToolMap:
        inputs = request.get("input")
        return cls.of(request.get("tools"), inputs if isinstance(inputs, list) else ())

    def _add(self, tool: Any, namespace: str | None) -> None:
        if not isinstance(tool, dict):
            return
        kind = tool.get("type")
        inner = tool.get("tools")
        if kind == "namespace" and namespace is None and isinstance(tool.get("name"), str):
            for one in inner if isinstance(inner, list) else ():
                self._add(one, tool["name"])
            return
        name = tool.get("name")
        if kind not in ("function", "custom") or not isinstance(name, str) or not name:
            if kind == "function" and isinstance(tool.get("function"), dict):  # chat-shaped, as it is
                self._register(Offered("function", str(tool["function"].get("name", ""))), tool, tool)
                return
            self.left_out.append(str(kind)[:64])
            return
        if (namespace, name) in self._chat:
            return  # offered twice (a later additional_tools item repeating it): once is enough
        offered = Offered(kind, name, namespace)
        chat_name = self._fresh(namespace, name)
        if kind == "function":
            fn = {k: tool[k] for k in ("description", "parameters", "strict") if tool.get(k) is not None}
            self._register(offered, tool, {"type": "function", "function": {"name": chat_name, **fn}})
        else:
            self._register(offered, tool, {"type": "function", "function": _freeform(chat_name, tool)})

    def _register(self, offered: Offered, tool: Mapping[str, Any], chat_tool: dict[str, Any]) -> None:
        chat_name = chat_tool["function"]["name"]
        self._renamed = None
        self.by_chat[chat_name] = offered
        self._chat[(offered.namespace, offered.name)] = chat_name
        self.chat_tools.append(chat_tool)

    def _fresh(self, namespace: str | None, name: str) -> str:
        plain = flat_name(namespace, name)
        if plain not in self.by_chat:
            return plain
        digest = hashlib.sha256(f"{namespace}\0{name}".encode()).hexdigest()
        for n in range(8, 64, 8):  # a longer hash in the (astronomically unlikely) case of a collision
            candidate = f"{plain[: MAX_NAME - n - 1]}_{digest[:n]}"
            if candidate not in self.by_chat:
                return candidate
        raise AssertionError("unreachable: sha256 prefixes of distinct names collide")

    def chat_name(self, namespace: Any, name: str) -> str:
        """The function name a chat tier knows the client's tool by (offered or not)."""
        ns = namespace if isinstance(namespace, str) and namespace else None
        return self._chat.get((ns, name)) or flat_name(ns, name)

    def offered(self, chat_name: str) -> Offered:
        return self.by_chat.get(chat_name) or Offered("function", chat_name)

    @property
    def renamed(self) -> dict[str, str]:
        """Chat name → the client's name of that tool as text writes it (`namespace.name`), for every
        tool the router named otherwise than the client did (once the map is complete)."""
        if self._renamed is None:
            self._renamed = {}
            for chat, tool in self.by_chat.items():
                own = f"{tool.namespace}.{tool.name}" if tool.namespace is not None else tool.name
                if own != chat:
                    self._renamed[chat] = own
        return self._renamed

    def client_text(self, text: str) -> str:
        """`text` of a chat tier with every tool name the router made up written as the client's."""
        return client_names(text, self.renamed)

    def call_item(
        self, call_id: str, chat_name: str, arguments: str, *, item_id: str, status: str = "completed"
    ) -> dict[str, Any]:
        """The output item of a chat tool call: `function_call` or `custom_tool_call`, with the name
        (and namespace) the client offered."""
        tool = self.offered(chat_name)
        if tool.kind == "custom":
            item: dict[str, Any] = {"type": "custom_tool_call", "id": item_id, "call_id": call_id, "name": tool.name,
                                    "input": freeform_input(arguments), "status": status}  # fmt: skip
        else:
            item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": tool.name,
                    "arguments": arguments, "status": status}  # fmt: skip
        if tool.namespace is not None:
            item["namespace"] = tool.namespace
        return item


def client_names(text: str, renamed: Mapping[str, str]) -> str:
    """`text` with each whole run of name characters that is a key of `renamed` replaced by its value."""
    if not renamed or not any(chat in text for chat in renamed):
        return text
    return _WORD.sub(lambda m: renamed.get(m.group(0), m.group(0)), text)


class ClientText:
    """A chat tier's streamed text as the client reads it (`ToolMap.client_text`, delta by delta).

    A generated name can arrive split over deltas ("clock_" + "_sleep"), so the run of name characters
    a delta ends with is held while it could still become one (at most `MAX_NAME` characters), and goes
    out with the next delta or `flush()`: text that cannot be a name is never delayed."""

    __slots__ = ("_held", "renamed")

    def __init__(self, tools: ToolMap) -> None:
        self.renamed = tools.renamed
        self._held = ""

    def feed(self, text: str) -> str:
        """What of the text so far may be sent: all of it but a trailing name in the making."""
        if not self.renamed:
            return text
        text = self._held + text
        start, stop = len(text), max(0, len(text) - MAX_NAME - 1)
        while start > stop and text[start - 1] in _NAME_CHARS:
            start -= 1
        tail = text[start:]
        if not tail or (start > 0 and text[start - 1] in _NAME_CHARS):  # no run, or one too long to be a name
            self._held = ""
            return client_names(text, self.renamed)
        self._held = tail if any(chat.startswith(tail) for chat in self.renamed) else ""
        return client_names(text[: len(text) - len(self._held)], self.renamed)

    def flush(self) -> str:
        """The text held back, now that no more follows."""
        held, self._held = self._held, ""
        return client_names(held, self.renamed)


def flat_name(namespace: str | None, name: str) -> str:
    raw = f"{namespace}{SEPARATOR}{name}" if namespace else name
    safe = _UNSAFE.sub("_", raw)
    if safe == raw and len(safe) <= MAX_NAME:
        return safe
    digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
    return f"{safe[: MAX_NAME - 9]}_{digest}"


def _freeform(chat_name: str, tool: Mapping[str, Any]) -> dict[str, Any]:
    note = "Free-form text, sent to the tool as it is (not JSON)."
    fmt = tool.get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "grammar" and isinstance(fmt.get("definition"), str):
        note += f" It must match this {fmt.get('syntax', '')} grammar:\n{fmt['definition']}"
    fn: dict[str, Any] = {"name": chat_name}
    if isinstance(tool.get("description"), str):
        fn["description"] = tool["description"]
    fn["parameters"] = {
        "type": "object",
        "properties": {"input": {"type": "string", "description": note}},
        "required": ["input"],
        "additionalProperties": False,
    }
    return fn


def freeform_input(arguments: str) -> str:
    """A freeform tool's input from the chat call's arguments (`{"input": ...}`; else the raw text)."""
    try:
        parsed = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return arguments
    return parsed["input"] if isinstance(parsed, dict) and isinstance(parsed.get("input"), str) else arguments


def freeform_arguments(text: Any) -> str:
    """The chat arguments that carry a freeform call's input."""
    return orjson.dumps({"input": text if isinstance(text, str) else ""}).decode()
