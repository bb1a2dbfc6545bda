"""What one call says of its session: which conversation it belongs to, and which of its prompts.

    session_of(body, headers)   -> Session

Per client API, the conversation is named by, in order:

    x-session-id header                 any client that sets it
    x-claude-code-session-id header     Claude Code (its `metadata.user_id` carries the same id)
    metadata.user_id                    Claude Code: a JSON object's `session_id` (2.1), else `..._session_<id>`
    session_id / conversation_id header Codex CLI (and `prompt_cache_key`, the same conversation id)
    prompt_cache_key                    OpenAI clients that name their cache key (Responses, chat)
    previous_response_id                a Responses chain without any of the above (`resp:<id>`)
    user                                OpenAI chat's end-user id
    the opening                         a hash of the system prompt and first user message

A `Session` also names its *prefix* — a digest of what stands at the front of every one of its
prompts: the system and developer instructions and the offered tools, as the tier sees them. One
conversation holds several prefixes: its main loop, each sub-agent, each side call (a title, a
summary, a quota probe). A *side call* is a small call that offers no tools: it gets a server slot
of its own so that it never takes a main prompt's (router/sessions/affinity.py). The digest is
computed only when a tier asks for it (a tier with `sessions.slots`), never on other calls.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Mapping
from typing import Any

import orjson

SESSION_HEADER = "x-session-id"
SIDE_CALL_TOKENS = 2048  # a tool-less call under this many (estimated) prompt tokens is a side call
_CLIENT_HEADERS = ("x-claude-code-session-id", "session_id", "conversation_id")
_CLAUDE_USER_SESSION = re.compile(r"session_([0-9A-Za-z-]{8,64})")
_MAX_ID = 200


class Session:
    """One call's session: `id` (the conversation, the store's key for its state), `side` (a small
    tool-less call) and, computed on first use, `prefix` (a digest of its instructions and tools)."""

    __slots__ = ("_body", "_prefix", "id", "side")

    def __init__(self, id: str, body: Mapping[str, Any] | None = None, *, side: bool = False) -> None:
        self.id = id
        self.side = side
        self._body = body
        self._prefix: str | None = None

    @property
    def prefix(self) -> str:
        if self._prefix is None:
            self._prefix = prefix_digest(self._body or {})
            self._body = None
        return self._prefix

    @property
    def key(self) -> tuple[str, str]:
        """What a server slot holds the prompt of: this conversation's prompts of this prefix."""
        return self.id, self.prefix

    def __repr__(self) -> str:
        return f"Session({self.id!r}{', side' if self.side else ''})"


def session_of(
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    prompt_tokens: int = 0,
    *,
    request: Mapping[str, Any] | None = None,
    conversation: str | None = None,
) -> Session:
    """The session of a chat-completions body as the tiers get it. `headers` lower-cased;
    `prompt_tokens` the routing estimate (router/policy/decide.py), which tells a side call;
    `request` the client's own request where it was translated (its marks name the conversation);
    `conversation` an id already known (a Responses chain's)."""
    side = not body.get("tools") and prompt_tokens < SIDE_CALL_TOKENS
    return Session(conversation or conversation_of(request or body, headers), body, side=side)


def conversation_of(body: Mapping[str, Any], headers: Mapping[str, str]) -> str:
    """The conversation's id, by the first of the client's marks that is present (module docstring)."""
    if sid := headers.get(SESSION_HEADER):
        return sid[:_MAX_ID]
    for name in _CLIENT_HEADERS:
        if value := headers.get(name):
            return f"client:{value[:_MAX_ID]}"
    metadata = body.get("metadata")
    user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
    if isinstance(user_id, str) and (found := _claude_session(user_id)):
        return f"client:{found}"
    if isinstance(key := body.get("prompt_cache_key"), str) and key:
        return f"client:{key[:_MAX_ID]}"
    if isinstance(prev := body.get("previous_response_id"), str) and prev:
        return f"resp:{prev}"
    if isinstance(user := body.get("user"), str) and user:
        if found := _claude_session(user):  # Claude Code's user_id, as the Messages translation maps it
            return f"client:{found}"
        return f"user:{user[:_MAX_ID]}"
    return "h:" + _opening(body)


def _claude_session(user_id: str) -> str | None:
    """The session in Claude Code's `metadata.user_id`: a JSON object's `session_id` (2.1), else a
    `..._session_<id>` suffix (earlier versions)."""
    if user_id.startswith("{"):
        with contextlib.suppress(orjson.JSONDecodeError):
            found = orjson.loads(user_id)
            sid = found.get("session_id") if isinstance(found, dict) else None
            return sid[:_MAX_ID] if isinstance(sid, str) and sid else None
        return None
    match = _CLAUDE_USER_SESSION.search(user_id)
    return match.group(1) if match else None


def _opening(body: Mapping[str, Any]) -> str:
    """A digest of the system prompt and the first user message: the same conversation's turns share it."""
    h = hashlib.blake2b(digest_size=12)
    seen_user = False
    for m in body.get("messages") or body.get("input") or ():
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role in ("system", "developer") or (role == "user" and not seen_user):
            h.update(str(role).encode())
            h.update(orjson.dumps(m.get("content")))
            seen_user = seen_user or role == "user"
        if seen_user:
            break
    return h.hexdigest()


def prefix_digest(body: Mapping[str, Any]) -> str:
    """A digest of the instructions and tools a prompt opens with (system/developer messages before
    the first other message, and the tools): prompts that share it share their longest prefix."""
    h = hashlib.blake2b(digest_size=8)
    for m in body.get("messages") or ():
        if not isinstance(m, dict) or m.get("role") not in ("system", "developer"):
            break
        h.update(orjson.dumps(m.get("content")))
    if isinstance(instructions := body.get("instructions"), str):
        h.update(instructions.encode())
    h.update(orjson.dumps(body.get("tools") or ()))
    return h.hexdigest()
