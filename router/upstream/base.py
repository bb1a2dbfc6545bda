"""What every upstream tier offers the pipeline: one answer, or a stream of chunks.

    Upstream.complete(body, deadline) -> Reply      # a whole chat.completion
    Upstream.stream(body, deadline)   -> Chunks     # chat.completion.chunk dicts, in order

Failures raise `router.errors.UpstreamError` (or its `UpstreamTimeout` / `UpstreamStatus`),
whose `.mistake` names the mistake kind to record. Nothing an upstream raises carries its key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(slots=True)
class Reply:
    data: dict[str, Any]
    raw: bytes | None = None  # the upstream's exact body; forwarded untouched when present


@dataclass(slots=True)
class Chunk:
    data: dict[str, Any]
    raw: bytes | None = None  # the upstream's exact JSON of this SSE event
    more: bool = False  # the next event was already received (the transport may coalesce writes)


class Upstream(Protocol):
    tier: str

    async def start(self, warm: bool = True) -> None: ...

    async def close(self) -> None: ...

    async def complete(self, body: dict[str, Any], deadline: float) -> Reply: ...

    def stream(self, body: dict[str, Any], deadline: float) -> AsyncIterator[Chunk]: ...
