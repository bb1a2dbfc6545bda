"""What a chat request offers the model, read for the checks (router/core/checks/validate.py):

tool_index(tools)      name -> its parameters schema (None: none) or FREEFORM (a custom tool)
ToolSet / NO_TOOLS     an offered tool list as the validator read it (cached per distinct list)
tool_choice(choice)    (no tools allowed, a call required, the named tool)
json_answer(request)   did the client ask for a JSON answer (`response_format`)?
content_text(message)  an answer's text, from a string or content parts
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

FREEFORM: Final = object()  # a custom tool: free-text input, nothing to parse


def content_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):  # content parts
        return "".join(
            str(part.get("text") or "")
            for part in content
            if isinstance(part, Mapping) and part.get("type") in ("text", "output_text")
        )
    return ""


def tool_index(tools: Any) -> dict[str, Any]:
    """name -> parameters schema (None: no schema) or `FREEFORM`."""
    index: dict[str, Any] = {}
    if not isinstance(tools, Sequence) or isinstance(tools, str):
        return index
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        kind = tool.get("type", "function")
        spec = tool.get(kind) if isinstance(kind, str) else None
        if not isinstance(spec, Mapping):
            spec = tool  # Responses / Anthropic: flat definition
        name = spec.get("name")
        if isinstance(name, str) and name:
            if kind == "custom":
                index[name] = FREEFORM
            else:
                index[name] = spec.get("parameters", spec.get("input_schema"))
    return index


def json_answer(request: Mapping[str, Any]) -> bool:
    """Did the client ask for a JSON answer (`response_format`)? Then JSON text is the answer, not a call."""
    fmt = request.get("response_format")
    return isinstance(fmt, Mapping) and fmt.get("type") in ("json_object", "json_schema")


@dataclass(frozen=True, slots=True)
class ToolSet:
    """An offered tool list, read (by `admit`, for `check`): `tool_index`'s map, the cache key of
    each tool's schema (None: not JSON, cannot check; free-text and schema-less tools have none),
    the names, and the size of the list as JSON (what the tool definitions add to a prompt)."""

    index: dict[str, Any]
    keys: dict[str, bytes | None]
    names: frozenset[str]
    chars: int = 0


NO_TOOLS: Final = ToolSet({}, {}, frozenset())


def tool_choice(choice: Any) -> tuple[bool, bool, str]:
    """(no tools allowed, a call is required, the named tool or "")."""
    if isinstance(choice, str):
        return choice == "none", choice in ("required", "any"), ""
    if isinstance(choice, Mapping):
        kind = choice.get("type")
        if kind in ("function", "tool", "custom"):
            spec = choice.get(kind)
            name = (spec if isinstance(spec, Mapping) else choice).get("name")
            return False, True, name if isinstance(name, str) else ""
        if kind == "allowed_tools":  # restricting the set is not checked; only its mode
            inner = choice.get("allowed_tools")
            mode = choice.get("mode") or (inner.get("mode") if isinstance(inner, Mapping) else None)
            return False, mode == "required", ""
        return kind == "none", kind == "any", ""
    return False, False, ""
