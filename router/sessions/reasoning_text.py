"""Chat completions' `reasoning_content`, bound to the model that wrote it (provenance.py's rule, for text).

Servers with a reasoning parser — DeepSeek, vLLM, llama.cpp's `reasoning_format` — answer with the
model's reasoning in `reasoning_content` (a message field; in a stream, deltas before the answer).
Clients send it back with the turn, and some servers want it: DeepSeek's thinking mode refuses a
tool loop's turn without it. It is one model's reasoning, for that model's next turn: another model
gets none of it (a server without a parser refuses the field outright).

The mark is provenance.py's tag, but the value is text a client shows, so the mark is invisible: the
tag's 12 hex digits written as 24 zero-width characters (two bits each) between two invisible
separators, in front of the text. The client shows and stores the text as it is and sends it back;
a tier's client restores its own model's (unmarked) and sends none of the others': another model's,
or a text not marked (written before the router was in between, or by the client).

    mark_reasoning(text, tag)          the text, marked
    mark_choices(completion, tag)      a chat completion's reasoning marked (in place)
    own_reasoning(messages, tag)       `messages` with this model's reasoning restored and every other
                                       left out (`messages` itself when none carries any)
    ReasoningMarks(tag).chunk(data)    a chat stream's chunks: the first reasoning delta marked (in place)
    reasoning_refused(status, detail, body)   a refused request, changed to be taken (router/upstream/resend.py):
                                       a tool loop's turn without reasoning, given an empty one where the
                                       server requires it; every reasoning left out where it takes none
"""

from __future__ import annotations

import re
from typing import Any

import orjson

FIELD = "reasoning_content"
_EDGE = "\u2063"  # INVISIBLE SEPARATOR, on both sides of the tag
_DIGITS = "\u200b\u200c\u200d\u2060"  # zero width space, non-joiner, joiner; word joiner: base 4
_VALUE = {c: i for i, c in enumerate(_DIGITS)}
_MARK_CHARS = 26  # the edges and 24 digits
_MISSING = re.compile(r"(?i)\bmissing\b.*\breasoning_content\b|\breasoning_content\b.*\brequired\b")


def _invisible(tag: str) -> str:
    bits = int(tag, 16)
    return _EDGE + "".join(_DIGITS[(bits >> shift) & 3] for shift in range(46, -2, -2)) + _EDGE


def mark_reasoning(text: str, tag: str) -> str:
    return _invisible(tag) + text


def mark_choices(completion: dict[str, Any], tag: str) -> bool:
    """Mark each choice's `message.reasoning_content` (in place); True if any was."""
    changed = False
    for choice in completion.get("choices") or ():
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict) and isinstance(text := message.get(FIELD), str) and text:
            message[FIELD] = mark_reasoning(text, tag)
            changed = True
    return changed


def _own(value: Any, mark: str) -> str | None:
    """The text as the model wrote it, if `value` carries `mark`; else None."""
    if not isinstance(value, str) or not value.startswith(mark):
        return None
    return value[_MARK_CHARS:]


def own_reasoning(messages: list[Any], tag: str) -> list[Any]:
    if not any(isinstance(m, dict) and FIELD in m for m in messages):
        return messages
    mark = _invisible(tag)
    out: list[Any] = []
    for message in messages:
        if not isinstance(message, dict) or FIELD not in message:
            out.append(message)
            continue
        text = _own(message[FIELD], mark)
        kept = {k: v for k, v in message.items() if k != FIELD}
        out.append(kept if text is None else {**kept, FIELD: text})
    return out


class ReasoningMarks:
    """A chat stream's chunks, marked as they pass: a client joins the deltas, so the first non-empty
    `reasoning_content` delta of each choice carries the mark."""

    __slots__ = ("_marked", "mark")

    def __init__(self, tag: str) -> None:
        self.mark = _invisible(tag)
        self._marked: set[Any] = set()  # choice indexes whose reasoning is marked

    def chunk(self, data: dict[str, Any]) -> bool:
        """Mark the chunk's first reasoning delta of a choice (in place); True if it changed."""
        changed = False
        for choice in data.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict) or not isinstance(text := delta.get(FIELD), str) or not text:
                continue
            if choice.get("index") not in self._marked:
                self._marked.add(choice.get("index"))
                delta[FIELD] = self.mark + text
                changed = True
        return changed


def reasoning_refused(status: int, detail: str, data: bytes) -> bytes | None:
    """`data` (a chat request's body) changed as a refusal that names `reasoning_content` asks: an
    empty one on each assistant turn with tool calls but none (the server requires it: DeepSeek's
    thinking mode), or none at all (the server takes no such field); None: nothing to change."""
    if status != 400 or FIELD not in detail:
        return None
    body = orjson.loads(data)
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        return None
    if _MISSING.search(detail):
        lacking = [isinstance(m, dict) and m.get("tool_calls") and not isinstance(m.get(FIELD), str) for m in messages]
        if not any(lacking):
            return None
        filled = [{**m, FIELD: ""} if lack else m for m, lack in zip(messages, lacking, strict=True)]
        return orjson.dumps({**body, "messages": filled})
    if not any(isinstance(m, dict) and FIELD in m for m in messages):
        return None
    plain = [{k: v for k, v in m.items() if k != FIELD} if isinstance(m, dict) else m for m in messages]
    return orjson.dumps({**body, "messages": plain})
