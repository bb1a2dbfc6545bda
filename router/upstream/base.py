"""What every upstream tier offers the pipeline: one answer, or a stream of chunks.

    Upstream.complete(body, deadline) -> Reply      # a whole chat.completion
    Upstream.stream(body, deadline)   -> Chunks     # chat.completion.chunk dicts, in order

A tier that also speaks a client's own API (`dialects`, e.g. "messages" for `anthropic/*` tiers)
takes that request unchanged through `complete_native` / `stream_native`: its replies and chunks
carry the native answer in `native` for the transport, and its chat-completions equivalent in `data`
for the checks.

Failures raise `router.errors.UpstreamError` (or its `UpstreamTimeout` / `UpstreamStatus`),
whose `.mistake` names the mistake kind to record. Nothing an upstream raises carries its key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from router.errors import UpstreamError


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on what a tier may send (router/settings.py); `tripped(limit)` counts each one hit."""

    max_body_bytes: int = 16 * 1024 * 1024  # a JSON answer, or one SSE event
    max_answer_chars: int = 4 * 1024 * 1024  # text + tool-call names and arguments of one stream
    tripped: Callable[[str], None] = lambda limit: None


@dataclass(slots=True)
class Reply:
    data: dict[str, Any]
    raw: bytes | None = None  # the upstream's exact body; forwarded untouched when present
    native: dict[str, Any] | None = None  # the answer in the client's own API, from a tier that speaks it


@dataclass(slots=True)
class Chunk:
    data: dict[str, Any]
    raw: bytes | None = None  # the upstream's exact JSON of this SSE event
    more: bool = False  # the next event was already received (the transport may coalesce writes)
    native: dict[str, Any] | None = None  # the upstream's event in the client's own API (pass-through)


class Upstream(Protocol):
    tier: str

    async def start(self, warm: bool = True) -> None: ...

    async def close(self) -> None: ...

    async def complete(self, body: dict[str, Any], deadline: float) -> Reply: ...

    def stream(self, body: dict[str, Any], deadline: float) -> AsyncIterator[Chunk]: ...


@dataclass(frozen=True, slots=True)
class Native:
    """A client's request in its own API, for tiers that speak it (pass-through)."""

    dialect: str  # "messages"
    body: dict[str, Any]
    headers: dict[str, str]  # the client's headers of that API worth forwarding (e.g. anthropic-beta)


def token_count(value: Any) -> int:
    """A token count as a tier reported it; what is not a count (text, a list, a negative) is 0."""
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 2**63 else 0


def native_event(raw: bytes, tier: str) -> dict[str, Any]:
    """One SSE event of a tier's own API (`data:` payload), parsed: an object with a string `type`."""
    try:
        event = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise UpstreamError(f"tier {tier!r} sent a malformed SSE event", tier=tier) from None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise UpstreamError(f"tier {tier!r} sent an SSE event without a type", tier=tier)
    return event
