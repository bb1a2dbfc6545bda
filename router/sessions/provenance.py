"""Reasoning provenance: which model made each piece of reasoning state a client replays.

A session's turns move between tiers — an escalated turn, a sticky one, the next routed turn — and
the client sends back, turn after turn, the opaque reasoning state it was given:

    Anthropic Messages   `thinking` blocks' `signature`, `redacted_thinking` blocks' `data`
    OpenAI Responses     items' `encrypted_content` (`reasoning`, `compaction`), replayed with `store: false`

Each is bound to the model that made it: Anthropic refuses another model's with a 400 ("Invalid
`signature` in `thinking` block"), OpenAI with `invalid_encrypted_content`. So each tier gets the
ones its own model made, restored to the bytes that model sent, and none of another's. Provenance is
by model (the tier's `model`), not by tier name: tiers of one model — a fast-mode lane's variant
(Anthropic `speed: "fast"`) and its standard tier — keep everything.

How a value's model is known: the router marks each value it delivers with its model,

    ar1.<12 hex digits of BLAKE2b(model id)>.<the value as the upstream sent it>

(neither base64 alphabet has a ".", so no upstream value starts like that). The client stores the
value and replays it byte for byte; the tier's client (router/upstream/) keeps the values marked
with its own model, unmarked, and drops the others: marked for another model, or not marked at all
(made before the router was in between, or written by the client: no model is known to have made
them, and a dropped block costs a little context while a foreign one ends the session).

Why a mark in the value rather than a map in the store (digest of the value → model): the mark is
derived from the request itself, so every replica and every restart reads it alike — no shared store
(a memory:// store loses the map on restart, replicas need Redis), no write on an answer's path, no
lookup per replayed block (a long session replays hundreds), nothing to expire or bound. Its price:
the client holds bytes the upstream did not send, which only the router unmarks — a conversation
continued straight against the provider would have its marked blocks refused; and each value grows
by 17 characters. The mark is neither secret nor signed: a forged one gets the client's own request
refused by the upstream, which checks the value itself.

    mark(value, tag) / unmark(value, tag)      the scheme; `model_tag(model)` a model's tag
    messages_request(body, tag)                a Messages request as a tier of that model takes it
    mark_message(message, tag)                 a Messages answer's blocks marked (in place)
    MessagesMarks(tag).event(event)            a Messages stream's events marked (in place)
    responses_input(body, tag)                 a Responses request as a tier of that model takes it
    mark_items(items, tag), mark_event(...)    a Responses answer's items / stream events marked

Where the API then requires a block that is not there (Anthropic, with `thinking: {type: enabled}`:
the final assistant turn of a tool loop in progress — its tool_use answered by the last user turn's
tool_result — must start with a thinking block; it has none when it was another model's, or came
from a tier without thinking: a chat tier, a call made without it), the request is made valid by
that API's own rule: thinking is turned off for that call (and `context_management`'s thinking edits
with it, which need it on). Adaptive thinking may skip thinking, so it has no such rule. An item
that came with a dropped Responses reasoning item (the model's output after it) loses its upstream
`id`, which the other model's API cannot resolve.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

MARK = "ar1."
_TAG_CHARS = 12
_MARKED = len(MARK) + _TAG_CHARS + 1  # what a mark adds to a value
_THINKING = {"thinking": "signature", "redacted_thinking": "data"}  # block type → its model-bound field


def model_tag(model: str) -> str:
    """A model's tag: 12 hex digits of a digest of its id (e.g. `anthropic/claude-opus-4-6`)."""
    return hashlib.blake2b(model.encode(), digest_size=_TAG_CHARS // 2).hexdigest()


def mark(value: str, tag: str) -> str:
    """`value` marked as made by the model of `tag`. A value already marked (a router behind this
    one) is marked again: each router takes its own mark off on the way back."""
    return f"{MARK}{tag}.{value}"


def unmark(value: Any, tag: str) -> str | None:
    """The value as its model sent it, if `value` is marked with `tag`; else None (another model's,
    unmarked, not a string)."""
    if not isinstance(value, str) or not value.startswith(MARK) or len(value) < _MARKED:
        return None
    if value[len(MARK) : _MARKED - 1] != tag or value[_MARKED - 1] != ".":
        return None
    return value[_MARKED:]


# -- Anthropic Messages --------------------------------------------------------------------------------
def messages_request(body: dict[str, Any], tag: str) -> dict[str, Any]:
    """`body` with every thinking / redacted_thinking block of another model (or of none known) left
    out and this model's restored, made valid where that leaves what the API requires; `body` itself
    when nothing changes (it is never modified)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    out = _own_messages(messages, tag)
    request = body if out is messages else {**body, "messages": out}
    if _manual_thinking(request) and _loop_without_thinking(out):
        request = {k: v for k, v in request.items() if k != "thinking"}
        _without_thinking_edits(request)
    return request


def _own_messages(messages: list[Any], tag: str) -> list[Any]:
    """`messages` without another model's thinking blocks, this model's restored (`messages` itself
    when it holds no thinking block)."""
    if not any(isinstance(m, dict) and isinstance(m.get("content"), list) and any(map(_thinking, m["content"]))
               for m in messages):  # fmt: skip
        return messages
    out: list[Any] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list) or not any(_thinking(b) for b in content):
            out.append(message)
            continue
        kept = [own for b in content if (own := _own_block(b, tag)) is not None]
        if kept:  # else nothing but another model's thinking: no message left (the API joins the turns around it)
            out.append({**message, "content": kept})
    return out


def _thinking(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") in _THINKING


def _own_block(block: Any, tag: str) -> Any:
    """The block as this model takes it: itself (not a thinking block), restored (this model's), or None."""
    if not _thinking(block):
        return block
    field = _THINKING[block["type"]]
    original = unmark(block.get(field), tag)
    return None if original is None else {**block, field: original}


def _manual_thinking(body: Mapping[str, Any]) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") == "enabled"


def _loop_without_thinking(messages: list[Any]) -> bool:
    """A tool loop is in progress and its final assistant turn does not start with a thinking block."""
    loop = _open_tool_loop(messages)
    return loop is not None and not _thinking(messages[loop]["content"][0])


def _open_tool_loop(messages: list[Any]) -> int | None:
    """The first message of the final assistant turn when a tool loop is in progress: the user's turn
    after it (the last) holds a tool_result. Consecutive messages of one role are one turn to the API;
    mid-conversation system messages are passed over."""
    i = len(messages) - 1
    answered = False
    while i >= 0 and isinstance(messages[i], dict) and messages[i].get("role") in ("user", "system"):
        content = messages[i].get("content")
        answered = answered or (
            isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
        )
        i -= 1
    if not answered or i < 0 or not isinstance(messages[i], dict) or messages[i].get("role") != "assistant":
        return None
    while i > 0 and isinstance(messages[i - 1], dict) and messages[i - 1].get("role") == "assistant":
        i -= 1
    content = messages[i].get("content")
    return i if isinstance(content, list) and content else None


def _without_thinking_edits(request: dict[str, Any]) -> None:
    """`context_management` without its `clear_thinking_*` edits, which need thinking on."""
    management = request.get("context_management")
    if not isinstance(management, dict) or not isinstance(edits := management.get("edits"), list):
        return
    kept = [e for e in edits if not (isinstance(e, dict) and str(e.get("type", "")).startswith("clear_thinking"))]
    if len(kept) == len(edits):
        return
    if kept:
        request["context_management"] = {**management, "edits": kept}
    else:
        request.pop("context_management")


def mark_message(message: Mapping[str, Any], tag: str) -> bool:
    """Mark the thinking blocks of a Messages answer (in place); True if any was."""
    changed = False
    for block in message.get("content") or ():
        changed = _mark_block(block, tag) or changed
    return changed


def _mark_block(block: Any, tag: str) -> bool:
    if not _thinking(block):
        return False
    field = _THINKING[block["type"]]
    value = block.get(field)
    if not isinstance(value, str) or not value:
        return False  # a thinking block's signature comes later, in a signature_delta
    block[field] = mark(value, tag)
    return True


class MessagesMarks:
    """A Messages stream's events, marked as they pass (in place). A thinking block's signature comes
    in `signature_delta` events, which a client joins: the block's first non-empty piece is marked."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self._marked: set[Any] = set()  # block indexes whose value is marked

    def event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        index = event.get("index")
        if kind == "content_block_start":
            if _mark_block(event.get("content_block"), self.tag):
                self._marked.add(index)
            else:
                self._marked.discard(index)
        elif kind == "content_block_delta" and index not in self._marked:
            delta = event.get("delta")
            if isinstance(delta, dict) and delta.get("type") == "signature_delta":
                signature = delta.get("signature")
                if isinstance(signature, str) and signature:
                    delta["signature"] = mark(signature, self.tag)
                    self._marked.add(index)


# -- OpenAI Responses ---------------------------------------------------------------------------------
def responses_input(body: dict[str, Any], tag: str) -> dict[str, Any]:
    """`body` with every input item of another model's `encrypted_content` (or of none known) left
    out, this model's restored, and the upstream `id` of the output that came with a dropped item
    (the items up to the next input of the client's) removed; `body` itself when nothing changes."""
    items = body.get("input")
    if not isinstance(items, list) or not any(_sealed(i) for i in items):
        return body
    out: list[Any] = []
    foreign = False  # in the output of an item left out
    for item in items:
        if _sealed(item):
            original = unmark(item["encrypted_content"], tag)
            foreign = original is None
            if not foreign:
                out.append({**item, "encrypted_content": original})
        elif foreign and _produced(item):
            out.append({k: v for k, v in item.items() if k != "id"})
        else:
            foreign = foreign and _produced(item)
            out.append(item)
    return {**body, "input": out}


def _sealed(item: Any) -> bool:
    return isinstance(item, dict) and isinstance(item.get("encrypted_content"), str)


def _produced(item: Any) -> bool:
    """An item of a model's output: an assistant message, a call (function, custom, built-in tools'),
    reasoning; not the client's own (a message of another role, a call's output)."""
    if not isinstance(item, dict):
        return False
    kind = str(item.get("type") or ("message" if "role" in item else ""))
    return (kind == "message" and item.get("role") == "assistant") or kind.endswith("_call") or kind == "reasoning"


def mark_items(items: Any, tag: str) -> bool:
    """Mark the `encrypted_content` of a Responses answer's output items (in place); True if any was."""
    changed = False
    for item in items if isinstance(items, list) else ():
        if _sealed(item) and item["encrypted_content"]:
            item["encrypted_content"] = mark(item["encrypted_content"], tag)
            changed = True
    return changed


def mark_event(event: dict[str, Any], tag: str) -> None:
    """Mark the items a Responses stream event carries (in place): its `item`, its response's `output`."""
    mark_items([event.get("item")], tag)
    response = event.get("response")
    if isinstance(response, dict):
        mark_items(response.get("output"), tag)
