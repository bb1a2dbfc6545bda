"""What a client is told about its call's routing, on every transport: the `x-router-*` headers
(on an error of a routed call too: `error_headers`) and the final decision as JSON (the
`: router {json}` SSE trailer, `"router"` on Responses' `response.completed`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from router.errors import RouterError

if TYPE_CHECKING:
    from router.core.escalation import Trace
    from router.upstream.base import Speed


def router_headers(trace: Trace) -> dict[str, str]:
    return {
        "x-router-tier": trace.tier,
        "x-router-route": trace.route,
        "x-router-escalated": "true" if trace.escalated else "false",
        "x-router-mistakes": ",".join(trace.mistakes),
        "x-router-repaired": "true" if trace.repaired else "false",
        **({"x-router-exhausted": "true"} if trace.exhausted else {}),
        "x-router-salvaged": "true" if trace.salvaged else "false",
        "x-router-lane": trace.lane.name,
        **({"x-router-verified": ",".join(trace.verdicts)} if trace.verdicts else {}),
        **({"x-router-prompt-tokens": prompt_tokens(trace)} if trace.prompt_evaluated or trace.prompt_reused else {}),
        **({"x-router-repeat": trace.repeat} if trace.repeat else {}),
        **({"x-router-speed": speed_header(speed)} if (speed := trace.speed) is not None else {}),
    }


def error_headers(exc: RouterError) -> dict[str, str]:
    """An error's headers: its own (x-should-retry, retry-after) and, once the call was routed, the
    routing headers of what was tried."""
    return {**exc.headers(), **router_headers(exc.trace)} if exc.trace is not None else exc.headers()


def summary(trace: Trace) -> bytes:
    return orjson.dumps(
        {
            "tier": trace.tier,
            "route": trace.route,
            "reason": trace.decision.reason,
            "escalated": trace.escalated,
            "mistakes": trace.mistakes,
            "tiers": trace.tried,
            **({"skipped": trace.skipped} if trace.skipped else {}),
            "repaired": trace.repaired,
            "exhausted": trace.exhausted,
            "salvaged": trace.salvaged,
            "verified": trace.verdicts,
            "lane": trace.lane.name,
            "prompt_tokens": {"evaluated": trace.prompt_evaluated, "reused": trace.prompt_reused},
            **({"repeat": trace.repeat} if trace.repeat else {}),
            **({"speed": trace.speed.served} if trace.speed is not None else {}),
            **({"speed_fallback": trace.speed.fallback} if trace.speed is not None and trace.speed.fallback else {}),
        }
    )


def speed_header(speed: Speed) -> str:
    """The speed the answer was served at, in its provider's words (`fast`, `standard`; OpenAI's
    service_tier: `default`, `priority`, …), and why a fast-mode request was answered at standard
    speed instead: `standard; fallback=unavailable` (or `=rate_limited`)."""
    return f"{speed.served}; fallback={speed.fallback}" if speed.fallback else speed.served


def prompt_tokens(trace: Trace) -> str:
    """The tiers' servers' own count of the call's prompt: `evaluated=N reused=M` (from their cache)."""
    return f"evaluated={trace.prompt_evaluated} reused={trace.prompt_reused}"
