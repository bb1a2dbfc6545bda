"""The access log: one line per request at info level on the `router.access` logger.

    POST /v1/chat/completions 200 tier=fast route=tool-call escalated=false evaluated=64 reused=11600 3.1ms

A pure ASGI middleware, so it sees every request the app answers (errors, refusals and streams
included, a stream when its last byte is sent) and costs one dict lookup per response start. The
tier, route and escalation come from the `x-router-*` headers the call was answered with, or — for a
stream, whose headers left with its first chunk — from the call's final decision (`note`, when the
stream ends: after an escalation that came once text was sent, the tier that answered) or, for a call
that failed once routed, from its error (`note_failure`); `-` where a request was not routed.
`evaluated` and `reused` are the prompt tokens the tiers' servers evaluated and reused from their
cache, by their own count (`-` where a server gives none). A WebSocket connection is one line when
it closes (status 101), and each of its turns one as it ends (`turn`: 200, or the status of its
`error` event):

    WS /v1/responses 200 tier=fast route=tool-call escalated=false evaluated=64 reused=11600 812.4ms

`AGENT_ROUTER_ACCESS_LOG=false` (or `serve --no-access-log`) turns it off.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from router.flow.summary import prompt_tokens

if TYPE_CHECKING:
    from router.errors import RouterError
    from router.flow.outcome import Outcome

log = logging.getLogger("router.access")

_WANTED = {
    b"x-router-tier": "tier",
    b"x-router-route": "route",
    b"x-router-escalated": "escalated",
    b"x-router-prompt-tokens": "prompt",
}
_NO_PROMPT = "evaluated=- reused=-"
_SEEN = "router.access"  # the scope's key of what the line will say


def turn(scope: Scope, status: int, outcome: Outcome | None, started: float) -> None:
    """A WebSocket turn's line (`started`: its `time.perf_counter()`); nothing when the log is off."""
    if scope.get(_SEEN) is None:
        return
    tier, route, escalated = (
        (outcome.tier, outcome.route, str(outcome.escalated).lower()) if outcome else ("-", "-", "-")
    )
    prompt = prompt_tokens(outcome) if outcome and (outcome.prompt_evaluated or outcome.prompt_reused) else _NO_PROMPT
    log.info(
        "WS %s %s tier=%s route=%s escalated=%s %s %.1fms",  # the middleware's line, for one turn
        scope.get("path", ""), status, tier, route, escalated, prompt, (time.perf_counter() - started) * 1000,
    )  # fmt: skip


def note(scope: Scope, outcome: Outcome) -> None:
    """The call's final decision, for its line (nothing when the log is off)."""
    if (seen := scope.get(_SEEN)) is not None:
        seen.update(tier=outcome.tier, route=outcome.route, escalated="true" if outcome.escalated else "false")
        if outcome.prompt_evaluated or outcome.prompt_reused:
            seen["prompt"] = prompt_tokens(outcome)


def note_failure(scope: Scope, exc: RouterError) -> None:
    """A call that failed once routed: its line names the tier and route it failed on."""
    if exc.outcome is not None:
        note(scope, exc.outcome)


class AccessLog:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or not log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        seen: dict[str, Any] = {"status": 101 if scope["type"] == "websocket" else 500}
        scope[_SEEN] = seen

        async def sending(message: Message) -> None:
            if message["type"] in ("http.response.start", "websocket.http.response.start"):  # or a WS denial
                seen["status"] = message["status"]
                for name, value in message.get("headers", ()):
                    if (key := _WANTED.get(name)) is not None:
                        seen[key] = value.decode("latin-1")
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            method = scope.get("method", "WS")
            log.info(
                "%s %s %s tier=%s route=%s escalated=%s %s %.1fms",
                method, scope.get("path", ""), seen["status"], seen.get("tier", "-"), seen.get("route", "-"),
                seen.get("escalated", "-"), seen.get("prompt", _NO_PROMPT), (time.perf_counter() - started) * 1000,
            )  # fmt: skip
