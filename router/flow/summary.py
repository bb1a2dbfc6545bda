"""What a client is told about its call's routing, on every transport, read from the call's frozen
`Outcome` (router/flow/outcome.py): the `x-router-*` headers (on an error of a routed call too:
`error_headers`) and the final decision as JSON (the `: router {json}` SSE trailer, `"router"` on
Responses' `response.completed`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from router.errors import RouterError

if TYPE_CHECKING:
    from router.flow.outcome import Outcome
    from router.upstream.base import Speed


def router_headers(outcome: Outcome) -> dict[str, str]:
    return {
        **({"x-router-tier": outcome.tier} if outcome.tried else {}),  # no tier asked (a refused repeat): none named
        "x-router-route": outcome.route,
        "x-router-escalated": "true" if outcome.escalated else "false",
        "x-router-mistakes": ",".join(outcome.mistakes),
        "x-router-repaired": "true" if outcome.repaired else "false",
        **({"x-router-exhausted": "true"} if outcome.exhausted else {}),
        **({"x-router-signs": ",".join(outcome.signs)} if outcome.signs else {}),
        "x-router-salvaged": "true" if outcome.salvaged else "false",
        **({"x-router-looped": "true"} if outcome.looped else {}),
        "x-router-lane": outcome.lane,
        **({"x-router-verified": ",".join(outcome.verdicts)} if outcome.verdicts else {}),
        **(
            {"x-router-prompt-tokens": prompt_tokens(outcome)}
            if outcome.prompt_evaluated or outcome.prompt_reused
            else {}
        ),
        **({"x-router-repeat": outcome.repeat} if outcome.repeat else {}),
        **({"x-router-sampled": outcome.sampled} if outcome.sampled else {}),
        **({"x-router-speed": speed_header(speed)} if (speed := outcome.speed) is not None else {}),
        **({"x-router-cost-usd": usd(cost)} if (cost := outcome.cost_usd) is not None else {}),
        **({"x-router-baseline-cost-usd": usd(base)} if (base := outcome.baseline_usd) is not None else {}),
    }


def error_headers(exc: RouterError) -> dict[str, str]:
    """An error's headers: its own (x-should-retry, retry-after) and, once the call was routed, the
    routing headers of what was tried."""
    return {**exc.headers(), **router_headers(exc.outcome)} if exc.outcome is not None else exc.headers()


def summary(outcome: Outcome) -> bytes:
    return orjson.dumps(
        {
            "tier": outcome.tier,
            "route": outcome.route,
            "reason": outcome.reason,
            "escalated": outcome.escalated,
            "mistakes": list(outcome.mistakes),
            "tiers": list(outcome.tried),
            **({"skipped": list(outcome.skipped)} if outcome.skipped else {}),
            "repaired": outcome.repaired,
            "exhausted": outcome.exhausted,
            **({"signs": list(outcome.signs)} if outcome.signs else {}),
            "salvaged": outcome.salvaged,
            **({"looped": True} if outcome.looped else {}),
            "verified": list(outcome.verdicts),
            "lane": outcome.lane,
            "prompt_tokens": {"evaluated": outcome.prompt_evaluated, "reused": outcome.prompt_reused},
            **({"repeat": outcome.repeat} if outcome.repeat else {}),
            **({"sampled": outcome.sampled} if outcome.sampled else {}),
            **({"speed": outcome.speed.served} if outcome.speed is not None else {}),
            **(
                {"speed_fallback": outcome.speed.fallback}
                if outcome.speed is not None and outcome.speed.fallback
                else {}
            ),
            "cost_usd": usd(outcome.cost_usd) if outcome.cost_usd is not None else None,
            "baseline_cost_usd": usd(outcome.baseline_usd) if outcome.baseline_usd is not None else None,
            "baseline_seconds": round(outcome.baseline_s, 3) if outcome.baseline_s is not None else None,
            **({"worth_unknown": outcome.why} if outcome.why else {}),
            "seconds": round(outcome.took, 3),
        }
    )


def usd(amount: float) -> str:
    """Dollars as a decimal string, to the millionth (a cost, a baseline): "0.001234"."""
    return f"{amount:.6f}"


def speed_header(speed: Speed) -> str:
    """The speed the answer was served at, in its provider's words (`fast`, `standard`; OpenAI's
    service_tier: `default`, `priority`, …), and why a fast-mode request was answered at standard
    speed instead: `standard; fallback=unavailable` (or `=rate_limited`)."""
    return f"{speed.served}; fallback={speed.fallback}" if speed.fallback else speed.served


def prompt_tokens(outcome: Outcome) -> str:
    """The tiers' servers' own count of the call's prompt: `evaluated=N reused=M` (from their cache)."""
    return f"evaluated={outcome.prompt_evaluated} reused={outcome.prompt_reused}"
