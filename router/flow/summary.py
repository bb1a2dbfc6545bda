"""What a client is told about its call's routing, on every transport: the `x-router-*` headers
(on an error of a routed call too: `error_headers`) and the final decision as JSON (the
`: router {json}` SSE trailer, `"router"` on Responses' `response.completed`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from router.errors import RouterError

if TYPE_CHECKING:
    from router.flow.attempts import Attempts
    from router.upstream.base import Speed


def router_headers(attempts: Attempts) -> dict[str, str]:
    return {
        "x-router-tier": attempts.tier,
        "x-router-route": attempts.route,
        "x-router-escalated": "true" if attempts.escalated else "false",
        "x-router-mistakes": ",".join(attempts.mistakes),
        "x-router-repaired": "true" if attempts.repaired else "false",
        **({"x-router-exhausted": "true"} if attempts.exhausted else {}),
        **({"x-router-signs": ",".join(attempts.signs)} if attempts.signs else {}),
        "x-router-salvaged": "true" if attempts.salvaged else "false",
        **({"x-router-looped": "true"} if attempts.looped else {}),
        "x-router-lane": attempts.lane.name,
        **({"x-router-verified": ",".join(attempts.verdicts)} if attempts.verdicts else {}),
        **(
            {"x-router-prompt-tokens": prompt_tokens(attempts)}
            if attempts.prompt_evaluated or attempts.prompt_reused
            else {}
        ),
        **({"x-router-repeat": attempts.repeat} if attempts.repeat else {}),
        **({"x-router-sampled": attempts.sampled} if attempts.sampled else {}),
        **({"x-router-speed": speed_header(speed)} if (speed := attempts.speed) is not None else {}),
    }


def error_headers(exc: RouterError) -> dict[str, str]:
    """An error's headers: its own (x-should-retry, retry-after) and, once the call was routed, the
    routing headers of what was tried."""
    return {**exc.headers(), **router_headers(exc.attempts)} if exc.attempts is not None else exc.headers()


def summary(attempts: Attempts) -> bytes:
    return orjson.dumps(
        {
            "tier": attempts.tier,
            "route": attempts.route,
            "reason": attempts.decision.reason,
            "escalated": attempts.escalated,
            "mistakes": attempts.mistakes,
            "tiers": attempts.tried,
            **({"skipped": attempts.skipped} if attempts.skipped else {}),
            "repaired": attempts.repaired,
            "exhausted": attempts.exhausted,
            **({"signs": attempts.signs} if attempts.signs else {}),
            "salvaged": attempts.salvaged,
            **({"looped": True} if attempts.looped else {}),
            "verified": attempts.verdicts,
            "lane": attempts.lane.name,
            "prompt_tokens": {"evaluated": attempts.prompt_evaluated, "reused": attempts.prompt_reused},
            **({"repeat": attempts.repeat} if attempts.repeat else {}),
            **({"sampled": attempts.sampled} if attempts.sampled else {}),
            **({"speed": attempts.speed.served} if attempts.speed is not None else {}),
            **(
                {"speed_fallback": attempts.speed.fallback}
                if attempts.speed is not None and attempts.speed.fallback
                else {}
            ),
        }
    )


def speed_header(speed: Speed) -> str:
    """The speed the answer was served at, in its provider's words (`fast`, `standard`; OpenAI's
    service_tier: `default`, `priority`, …), and why a fast-mode request was answered at standard
    speed instead: `standard; fallback=unavailable` (or `=rate_limited`)."""
    return f"{speed.served}; fallback={speed.fallback}" if speed.fallback else speed.served


def prompt_tokens(attempts: Attempts) -> str:
    """The tiers' servers' own count of the call's prompt: `evaluated=N reused=M` (from their cache)."""
    return f"evaluated={attempts.prompt_evaluated} reused={attempts.prompt_reused}"
