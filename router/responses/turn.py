"""One Responses request, whatever the transport: resolve → translate → pipeline → events → remember.

    previous(request, conn, state)     the `Stored` history its `previous_response_id` names (the
                                       connection's cache, then the process's, then the store), or 400
    prepare(request, headers, prev)    → Turn: the chat body as a `Call` (with the request itself, `native_body`,
                                       for tiers that serve Responses: router/upstream/openai_compat.py),
                                       the new messages, the session
    complete(runtime, turn, save)      → (outcome, Response object)        non-streaming
    events(turn, attempts, chunks, save) → Responses events of a pipeline stream
    warm_up(turn, save, upstream)      → created + completed events of `generate: false`
    prewarm(runtime, turn)             `generate: false` passed on to the tier the request would go to,
                                       when that tier keeps a WebSocket (router/upstream/responses_ws.py)
    turn_state(headers)                Codex's `x-codex-turn-state`, echoed
    failed(turn, exc)                  → created, in_progress, `response.failed`: a prompt no tier's
                                       context takes, on a stream (OpenAI's way; Codex compacts on it)
    left_out(runtime, turn, outcome)   what the answering tier was not sent (counted; the header)

The pipeline does routing, validation, escalation and recording; nothing here repeats it. `save`
receives the history through this response before its final event is sent, so a client that sends
its next request the moment it sees `response.completed` finds the state there.

A response that is one tier's native answer, unchanged (one attempt, nothing salvaged), remembers
that tier and the upstream's own id of it (`Stored.upstream`): the next turn's request carries them
(`Native.previous`, with how many of its input items are the chain written out), so that a tier
keeping a WebSocket sends only the new input after its own id. The router's ids never go upstream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from router.core.call import Call
from router.core.live.lanes import LANE_FIELDS
from router.core.live.response_state import ResponseCache, ResponseState, Stored, stored
from router.errors import BadRequest, ContextExceeded, RouterError
from router.flow import pipeline
from router.flow.attempts import Attempts
from router.flow.outcome import Outcome
from router.flow.summary import summary
from router.policy.decide import features_of
from router.policy.model import Policy
from router.responses.events import Event, EventBuilder
from router.responses.items import CARRIED, STATE_ITEMS, assistant_message, new_id, output_items
from router.responses.translate import native_body, response_object, translate
from router.sessions import SESSION_HEADER, session_of
from router.store.responses import StoreUnreachable
from router.upstream.base import Chunk, Native, Prewarms, prewarms, speaks
from router.upstream.responses_tools import ToolMap

if TYPE_CHECKING:
    from router.runtime import Runtime

log = logging.getLogger("router.responses")

Save = Callable[[Stored], Awaitable[None]]  # remember a response; returns once a follow-up elsewhere finds it
_ENDED = ("response.completed", "response.incomplete")
_MAX_TURN_STATE = 4096  # characters of `x-codex-turn-state` echoed at most


class PreviousResponseNotFound(BadRequest):
    code = "previous_response_not_found"


@dataclass(frozen=True, slots=True)
class Turn:
    request: Mapping[str, Any]  # the Responses body as the client sent it
    id: str
    created_at: int
    call: Call
    history: tuple[dict[str, Any], ...]  # messages of the previous response's chain
    new: list[dict[str, Any]]  # messages this request's input adds
    tools: ToolMap  # the chat names of the client's tools, and back
    left_out: Mapping[str, int]  # what a chat tier does not see: "tool:web_search" → how many

    def remember(self, output: list[dict[str, Any]], upstream: tuple[str, str] | None = None) -> Stored:
        answer = assistant_message(output, self.tools)
        state = [{"role": CARRIED, "item": dict(i)} for i in output if i.get("type") in STATE_ITEMS]  # reasoning
        added = [*self.new, *state, *([answer] if answer else ())]
        parent = self.request.get("previous_response_id")  # it resolved, or there would be no turn
        return stored(self.history, added, self.call.session.id, parent, upstream)

    @property
    def store(self) -> bool:
        return self.request.get("store") is not False


async def previous(request: Mapping[str, Any], conn: ResponseCache | None, state: ResponseState) -> Stored | None:
    prev = request.get("previous_response_id")
    if prev is None:
        return None
    if not isinstance(prev, str) or not prev:
        raise BadRequest("'previous_response_id' must be a string.", param="previous_response_id")
    if conn is not None and (entry := conn.get(prev)) is not None:
        state.count("lookup", "connection")
        return entry
    try:
        entry = await state.get(prev)
    except StoreUnreachable:
        raise PreviousResponseNotFound(
            f"Previous response with id {prev[:100]!r} could not be looked up: the router's response store "
            "is unreachable; send the full input without previous_response_id.",
            param="previous_response_id",
        ) from None
    if entry is not None:
        return entry
    raise PreviousResponseNotFound(
        f"Previous response with id {prev[:100]!r} not found (unknown, expired, or stored with store=false "
        "on another connection); send the full input without previous_response_id.",
        param="previous_response_id",
    )


def prepare(
    request: Mapping[str, Any], headers: Mapping[str, str], prev: Stored | None, *, stream: bool, native: bool = False
) -> Turn:
    """`native`: a tier of the policy serves Responses itself, so the call carries the request too."""
    history = prev.messages if prev is not None else ()
    t = translate(request, history, stream=stream)
    body = t.body
    # the header, else the chain's first response's, else (a first response) `user` or a hash of the opening
    chained = None if headers.get(SESSION_HEADER) or prev is None else prev.session
    features = features_of(body, headers)
    session = session_of(body, headers, features.prompt_tokens, request=request, conversation=chained)
    passed = None
    if native:
        written = native_body(request, history, t.tools)
        own = request.get("input")
        chain = len(written["input"]) - (1 if isinstance(own, str) else len(own or ())) if history else 0
        passed = Native("responses", written, {}, chain, prev.upstream if prev is not None else None)
    asks = None if native else {k: request[k] for k in LANE_FIELDS if k in request}  # not in a chat body
    call = Call(body, headers, features, session, passed, lane_fields=asks)
    return Turn(request, new_id("resp"), int(time.time()), call, history, t.new, t.tools, dict(t.left_out))


def left_out(runtime: Runtime, turn: Turn, outcome: Outcome) -> dict[str, str]:
    """What the tier answering `attempts` was not sent of this request: counted in `router_left_out_total`,
    its tool types named in the `x-router-dropped-tools` header. Nothing when that tier took the request
    as it came (`apis: [responses]`): only a chat tier's view leaves things out."""
    if outcome.native or not turn.left_out:
        return {}
    runtime.metrics.observe_left_out("responses", turn.left_out)
    return left_out_headers(turn)


def left_out_headers(turn: Turn) -> dict[str, str]:
    """`x-router-dropped-tools`: the types of the client's tools a chat tier was not offered (a
    character no header value may hold — a control character, beyond Latin-1 — is escaped)."""
    tools = sorted({k.split(":", 1)[1] for k in turn.left_out if k.startswith("tool:")})
    return {"x-router-dropped-tools": _header_safe(", ".join(tools))} if tools else {}


def _header_safe(text: str) -> str:
    return "".join(c if c.isprintable() and ord(c) < 256 else c.encode("unicode_escape").decode() for c in text)


def passes_through(policy: Policy) -> bool:
    """Whether a tier of `policy` takes Responses calls as they are (`apis: [responses]`)."""
    return any("responses" in tier.apis for tier in policy.models.values())


async def complete(runtime: Runtime, turn: Turn, save: Save) -> tuple[Outcome, dict[str, Any]]:
    outcome, reply = await pipeline.complete(runtime, turn.call)
    choices = reply.data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    output = reply.native["output"] if reply.native is not None else output_items(message, tools=turn.tools)
    response = response_object(
        turn.request,
        turn.id,
        turn.created_at,
        status="completed",
        output=output,
        model=reply.data.get("model"),
        usage=reply.data.get("usage"),
        finish_reason=choice.get("finish_reason"),
    )
    answered = reply.native.get("id") if reply.native is not None else None
    await save(turn.remember(output, _upstream(outcome, answered)))
    return outcome, response


def event_builder(turn: Turn) -> EventBuilder:
    return EventBuilder(turn.request, turn.id, turn.created_at, turn.tools)


async def events(
    turn: Turn, attempts: Attempts, chunks: AsyncIterator[Chunk], save: Save
) -> AsyncGenerator[Event, None]:
    """The events of one streamed response, from a pipeline stream (whose first chunk is there
    already: `response.created` names its model at no wait). The chunk stream is closed however
    this ends (closing the pipeline's generator closes the upstream connection mid-answer)."""
    b = event_builder(turn)
    answered: str | None = None  # the upstream's id of the native answer that ended
    try:
        first = await anext(chunks, None)
        answer = first if first is not None and not first.beat else None  # a keep-alive: no answer yet
        for ev in b.start(answer.data if answer is not None else None):
            yield ev
        for ev in _feed(b, answer) if answer is not None else ():
            yield ev
        async for chunk in chunks:
            if chunk.native is not None and chunk.native.get("type") in _ENDED:
                answered = chunk.data.get("id")
            for ev in _feed(b, chunk):
                yield ev
    except RouterError as exc:
        # the routing, as on `response.completed`
        yield {**b.error(exc), "router": orjson.loads(summary(attempts.outcome()))}
        return
    except Exception as exc:  # no traceback: it could carry request data or upstream details
        log.error("unexpected %s while streaming response %s", type(exc).__name__, turn.id)
        yield b.error(RouterError("The router failed unexpectedly; the error was logged."))
        return
    finally:
        if (aclose := getattr(chunks, "aclose", None)) is not None:
            await aclose()
    for ev in b.close():
        yield ev
    outcome = attempts.outcome()
    await save(turn.remember(b.output, _upstream(outcome, answered)))
    yield b.final(router=orjson.loads(summary(outcome)))


def _upstream(outcome: Outcome, answered: Any) -> tuple[str, str] | None:
    """(tier, the upstream's id) when this response is that one native answer unchanged: one attempt,
    the client's request as it came, nothing salvaged."""
    if not isinstance(answered, str) or not answered or len(outcome.tried) != 1 or outcome.salvaged:
        return None
    return (outcome.tier, answered) if outcome.native else None


def _feed(b: EventBuilder, chunk: Chunk) -> list[Event]:
    if chunk.beat:  # no answer yet (the stream started with `response.created`): a keep-alive
        return [b.event("response.in_progress", response=b.response("in_progress"))]
    return b.feed(chunk.data) if chunk.native is None else b.feed_native(chunk.native, chunk.data)


async def warm_up(turn: Turn, save: Save, upstream: tuple[str, str] | None = None) -> list[Event]:
    """`generate: false`: remember the input as a response of its own, call no model (`upstream`:
    what `prewarm` left on a tier's WebSocket)."""
    await save(turn.remember([], upstream))
    b = event_builder(turn)
    created = b.event("response.created", response=b.response("in_progress"))
    return [created, b.event("response.completed", response=b.response("completed"))]


def failed(turn: Turn, exc: ContextExceeded) -> list[Event]:
    """The events of a streamed response whose prompt no tier's context takes: `response.created`,
    `.in_progress` and `response.failed` with `context_length_exceeded`, as OpenAI's Responses API
    streams it (a client such as Codex compacts its conversation on that, not on an HTTP 400).
    Nothing is remembered of it."""
    b = event_builder(turn)
    events = b.start()
    error = {"code": exc.code, "message": exc.message}
    events.append(b.event("response.failed", response={**b.response("failed"), "error": error}))
    return events


async def prewarm(runtime: Runtime, turn: Turn) -> tuple[str, str] | None:
    """A warm-up passed on to the tiers that keep a WebSocket: the one this request would be routed to
    gets it (`generate: false` on the session's socket: the upstream takes the input, so the next turn
    there sends only what it adds); the others open the session's socket, so that its first turn
    there pays no handshake (Codex warms up with no input and no tools, which routing sends elsewhere
    than its first turn) — unless the call is pinned to its tier (`x-router-tier`, an alias). (tier,
    the upstream's id), or None (no such tier, or it failed: the warm-up is then the router's alone)."""
    native = turn.call.native
    if native is None:
        return None
    policy = runtime.policy.current
    decision = pipeline.decided(runtime, turn.call)
    decided = decision.tier
    pinned = decision.route == "header" or decision.route.startswith("alias:")  # the session keeps to it
    warmed: list[tuple[str, Prewarms]] = []
    for tier, config in policy.models.items():
        if pinned and tier != decided:
            continue
        try:
            upstream = runtime.upstreams[tier]
        except KeyError:  # the policy changed meanwhile
            continue
        if config.websocket and speaks(upstream, "responses") and prewarms(upstream):
            warmed.append((tier, upstream))
    if not warmed:
        return None
    loop = asyncio.get_running_loop()

    async def one(tier: str, upstream: Prewarms) -> str | None:
        timeouts = policy.models[tier].timeouts
        deadline = loop.time() + timeouts.connect + timeouts.first_token
        try:
            return await upstream.prewarm(native, deadline, turn.call.session, generate=tier == decided)
        except Exception as exc:  # an in-process tier's own method: the warm-up goes on without it
            log.warning("tier %s: warm-up failed (%s)", tier, type(exc).__name__)
            return None

    found = await asyncio.gather(*(one(tier, upstream) for tier, upstream in warmed))
    return next(((tier, id_) for (tier, _), id_ in zip(warmed, found, strict=True) if id_ and tier == decided), None)


TURN_STATE = "x-codex-turn-state"


def turn_state(headers: Mapping[str, str]) -> dict[str, str]:
    """Codex's sticky-routing token, sent back as it came (on the WebSocket's upgrade, on a response):
    Codex keeps the token a response gives it and replays it on its turn's next requests."""
    value = headers.get(TURN_STATE)
    return {TURN_STATE: value} if value and len(value) <= _MAX_TURN_STATE else {}
