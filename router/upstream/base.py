"""What every upstream tier offers the pipeline: one answer, or a stream of chunks.

    Upstream.complete(body, deadline) -> Reply      # a whole chat.completion
    Upstream.stream(body, deadline)   -> Chunks     # chat.completion.chunk dicts, in order
    Upstream.context_window(deadline) -> int | None # its context in tokens, as its server reports it
    Upstream.count_tokens(body, deadline, native) -> int | None   # a prompt's tokens, by its tokenizer

A tier that also speaks a client's own API (its `dialects`, e.g. "messages" for `anthropic/*` tiers)
is a `NativeUpstream` (`speaks(upstream, dialect)`): it takes that request unchanged through
`complete_native` / `stream_native`, and its replies and chunks carry the native answer in `native`
for the transport, and its chat-completions equivalent in `data` for the checks.

Failures raise `router.errors.UpstreamError` (or its `UpstreamTimeout` / `UpstreamStatus`),
whose `.mistake` names the mistake kind to record. Nothing an upstream raises carries its key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard

import orjson

from router.errors import UpstreamError
from router.sessions import Session
from router.sessions.sockets import Budget
from router.settings import default


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on what a tier may send (router/settings.py); `tripped(limit)` counts each one hit."""

    max_body_bytes: int = default("upstream_max_body_bytes")  # a JSON answer, or one SSE event
    max_answer_chars: int = default("upstream_max_answer_chars")  # text + tool-call names and arguments of a stream
    tripped: Callable[[str], None] = lambda limit: None
    sockets: Budget = field(default_factory=Budget)  # the process's upstream WebSockets (router/sessions/sockets.py)


@dataclass(frozen=True, slots=True)
class Usage:
    """A call's tokens by its tier's own count: the prompt tokens it evaluated (of them, `written` to
    its prompt cache: Anthropic's cache writes), the prompt tokens it reused from its cache (a
    session's kept prefix: router/sessions/affinity.py), and the answer's `output` tokens. What a
    server does not say is 0."""

    evaluated: int
    reused: int
    output: int = 0
    written: int = 0

    @property
    def prompt(self) -> int:
        return self.evaluated + self.reused

    def then(self, later: Usage) -> Usage:
        """This count, with what a later event of the same answer says instead (a stream says its
        prompt first and its output at the end: Anthropic's `message_start`, then `message_delta`)."""
        return Usage(
            later.evaluated or self.evaluated,
            later.reused or self.reused,
            later.output or self.output,
            later.written or self.written,
        )


@dataclass(frozen=True, slots=True)
class Speed:
    """The speed an answer was served at, in its provider's words (router/upstream/speed.py):
    Anthropic's `usage.speed` ("fast", "standard"), OpenAI's `service_tier` ("default", "priority",
    ...); `fallback`: why a fast-mode request was answered at standard speed ("unavailable",
    "rate_limited")."""

    served: str
    fallback: str | None = None


@dataclass(slots=True)
class Reply:
    data: dict[str, Any]
    raw: bytes | None = None  # the upstream's exact body; forwarded untouched when present
    native: dict[str, Any] | None = None  # the answer in the client's own API, from a tier that speaks it
    usage: Usage | None = None  # the server's count of the call's tokens, where it gives one
    speed: Speed | None = None  # the speed it was served at, where its provider says (or the router knows)
    looped: bool = False  # it went round in a loop and was stopped there (router/upstream/loops.py)


@dataclass(slots=True)
class Chunk:
    data: dict[str, Any]
    raw: bytes | None = None  # the upstream's exact JSON of this SSE event
    more: bool = False  # the next event was already received (the transport may coalesce writes)
    native: dict[str, Any] | None = None  # the upstream's event in the client's own API (pass-through)
    usage: Usage | None = None  # the server's count of the call's tokens (on the events that carry usage)
    beat: bool = False  # no answer yet: a keep-alive for the client (router/flow/pipeline.py's `stream`)
    speed: Speed | None = None  # the speed the answer is served at (on the events that say it)
    looped: bool = False  # the answer went round in a loop and ends here (router/upstream/loops.py)


class Tiers(Protocol):
    """Tier name → its client (`router.upstream.Upstreams`, or any mapping)."""

    def __getitem__(self, tier: str, /) -> Upstream: ...


class Upstream(Protocol):
    """`session`: the call's session (router/sessions), for tiers that keep its prompt prefix on a
    server slot or replica (`sessions` in the tier's policy); others ignore it."""

    tier: str
    dialects: frozenset[str]  # client APIs it also speaks as they are (a `NativeUpstream`); mostly none

    async def start(self, warm: bool = True) -> None: ...

    async def close(self) -> None: ...

    async def complete(self, body: dict[str, Any], deadline: float, session: Session | None = None) -> Reply: ...

    def stream(self, body: dict[str, Any], deadline: float, session: Session | None = None) -> AsyncIterator[Chunk]: ...

    async def context_window(self, deadline: float) -> int | None:
        """The tier's context window in tokens as its server reports it (a slot's, where the server
        splits its context); None when it reports none, or cannot be asked. Never raises."""
        ...

    async def count_tokens(self, body: dict[str, Any], deadline: float, native: Native | None = None) -> int | None:
        """The prompt tokens of `body` (a chat request; or `native`, the client's own request, when
        this tier speaks its dialect) as this tier's tokenizer counts them, its chat template and
        tools included; None when it has no tokenizer to ask. Calls no model; never raises."""
        ...


@dataclass(frozen=True, slots=True)
class Native:
    """A client's request in its own API, for tiers that speak it (pass-through)."""

    dialect: str  # "messages"
    body: dict[str, Any]
    headers: dict[str, str]  # the client's headers of that API worth forwarding (e.g. anthropic-beta)
    # Responses, for a tier keeping a WebSocket (router/upstream/responses_ws.py): how many of the body's
    # `input` items, at the front, are the router's chain written out (the rest are the request's own),
    # and (tier, the upstream's response id) when the router's previous response was that tier's answer
    # unchanged: that tier may send only the request's own items after its own id
    chain_items: int = 0
    previous: tuple[str, str] | None = None
    left_out: tuple[str, ...] = ()  # what a tier of another API does not get of it (Messages: translate.py)


class NativeUpstream(Upstream, Protocol):
    """A tier that takes requests of its `dialects` as they are."""

    async def complete_native(self, native: Native, deadline: float, session: Session | None = None) -> Reply: ...

    def stream_native(
        self, native: Native, deadline: float, session: Session | None = None
    ) -> AsyncIterator[Chunk]: ...


class Prefills(Protocol):
    """A tier that can read a prompt into its cache without answering it (a session's warm-up,
    router/core/live/warming.py)."""

    async def prefill(self, body: dict[str, Any], session: Session, deadline: float) -> None: ...


class Prewarms(Protocol):
    """A tier that can take a Responses request's input ahead of its turn without answering it
    (`generate: false` on its WebSocket; without `generate`, only the socket opened): the upstream's
    response id, or None (nothing sent, or it could not)."""

    async def prewarm(
        self, native: Native, deadline: float, session: Session, generate: bool = True
    ) -> str | None: ...


def prewarms(upstream: Upstream) -> TypeGuard[Prewarms]:
    return callable(getattr(upstream, "prewarm", None))


def prefills(upstream: Upstream) -> TypeGuard[Prefills]:
    return callable(getattr(upstream, "prefill", None))


class Scores(Protocol):
    """A tier that can score a call: the log-probabilities of its tokens given the request, read in
    one prefill (the `score` verifier, router/core/checks/verify.py; how: router/upstream/scoring.py)."""

    async def score_call(
        self, body: dict[str, Any], call: dict[str, Any], deadline: float, session: Session | None, via: str
    ) -> list[float] | None: ...


def scores(upstream: Upstream) -> TypeGuard[Scores]:
    return callable(getattr(upstream, "score_call", None))


def speaks(upstream: Upstream, dialect: str) -> TypeGuard[NativeUpstream]:
    return dialect in upstream.dialects


def chat_usage(prompt: Any, completion: Any) -> dict[str, int]:
    """A chat completion's usage as OpenAI's clients read it: prompt, completion and total tokens, each
    a count (the Agents SDK's chat model fails a run on a usage without one)."""
    prompt, completion = token_count(prompt), token_count(completion)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


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
