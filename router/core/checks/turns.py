"""The agent's newest turn: the tool results that end a request and the assistant message they answer.

After its tools ran, an agent's request ends with their results (role `tool`, each naming the call it
answers by `tool_call_id`), right after the assistant message that made the calls:

    … assistant(tool_calls=[a, b]) · tool(a) · tool(b)        ← `newest_turn(messages)`

Two readers: the checks (router/core/checks/validate.py: an answer made only of that turn's calls again is
`repeated_call`) and the agent's feedback (router/flow/feedback.py: a result that says the call
failed, or a call the agent repeats from an earlier turn). Both compare calls by `call_key`: the
tool's name and its arguments as canonical JSON (keys sorted, no whitespace) where they decode, so
a call is the same call however a client spells its arguments again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class Turn:
    """The newest turn of a conversation; empty (no `assistant`) when it does not end with results."""

    results: list[dict[str, Any]] = field(default_factory=list)  # the tool results that end the request
    assistant: dict[str, Any] | None = None  # the assistant message whose calls they answer
    earlier: list[dict[str, Any]] = field(default_factory=list)  # the assistant messages before it

    @property
    def calls(self) -> list[dict[str, Any]]:
        """The calls the results answer."""
        return tool_calls(self.assistant) if self.assistant is not None else []


def newest_turn(messages: Any) -> Turn:
    """The turn whose tool results end `messages` (a chat body's messages, as the client sent them)."""
    if not isinstance(messages, list):
        return Turn()
    i = len(messages)
    while i > 0 and isinstance(messages[i - 1], dict) and messages[i - 1].get("role") == "tool":
        i -= 1
    results = [m for m in messages[i:] if m.get("tool_call_id")]
    if not results or i == 0 or not isinstance(messages[i - 1], dict) or messages[i - 1].get("role") != "assistant":
        return Turn(results)
    earlier = [m for m in messages[: i - 1] if isinstance(m, dict) and m.get("role") == "assistant"]
    return Turn(results, messages[i - 1], earlier)


def tool_calls(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tool calls of a message of the client's history; whatever is not a call object is skipped."""
    calls = message.get("tool_calls")
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def call_key(call: Any) -> tuple[str, str]:
    """A call's tool and arguments, the arguments as canonical JSON where they decode (as sent, stripped,
    where they do not)."""
    fn = call.get("function") if isinstance(call, Mapping) else None
    fn = fn if isinstance(fn, Mapping) else {}
    arguments = fn.get("arguments")
    text = arguments.strip() if isinstance(arguments, str) else ""
    with contextlib.suppress(orjson.JSONDecodeError):
        text = orjson.dumps(orjson.loads(text or "{}"), option=orjson.OPT_SORT_KEYS).decode()
    return str(fn.get("name", "")), text
