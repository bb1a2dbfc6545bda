"""Fast modes as the providers define them, for the tiers' clients (anthropic.py, openai_compat.py).

Anthropic: a Messages request with `speed: "fast"` — the tier's `speed: fast`, or the client's own
request passed on — goes with the fast-mode beta header, added to the client's own `anthropic-beta`
values (`with_fast_beta`). Anthropic refuses it with a 400 saying fast mode is not available (to the
model, or to the organization), or with a 429 of the fast-mode rate limit: `fallback(exc)` names
that reason, and the tier sends the request once more without `speed` (nor the beta it added), to
the same model, before anything reached the client. The answer's `usage.speed` says the speed it got.

OpenAI: a tier's `service_tier` — or the client's, on a lane that forwards it — is sent as it is;
the answer's `service_tier` says the tier it got ("fast" is OpenAI's newer name of "priority";
"ultrafast" its fastest). Refused — "Unsupported service_tier: ..." (400), or a 429 — a request
asking for a tier other than the default is sent once more without it (`standard_payload`), before
anything reached the client, as Anthropic's fast mode is (openai_compat.py; not on the upstream
WebSocket, whose turn is an event on an open socket). `speed` is no field of OpenAI's APIs: what goes
to an openai/* tier never carries it.

What is recorded of a provider's word is bounded (`served`): a known value, else "other".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from router.errors import UpstreamStatus
from router.upstream.base import Speed

FAST_MODE_BETA = "fast-mode-2026-02-01"
BETA_HEADER = "anthropic-beta"
UNAVAILABLE, RATE_LIMITED = "unavailable", "rate_limited"  # why a fast request fell back
OTHER = "other"  # a provider's word the router does not know (kept out of the metrics' labels)
# Anthropic's `usage.speed`; OpenAI's `service_tier` ("fast" is its newer name of "priority")
KNOWN = ("fast", "standard", "default", "priority", "flex", "scale", "auto", "ultrafast")
_SERVED = {value: Speed(value) for value in (*KNOWN, OTHER)}
# what a 400 that refuses fast mode says: "Fast mode is not available ...", "speed: ...",
# "Unsupported service_tier: ..."
_FAST_REFUSED = re.compile(r"(?i)\bfast[ _-]?mode\b|\bspeed\b|\bservice[ _]tier\b")
_ASKS_NOTHING = (None, "auto", "default")  # service tiers that ask for no speed


def served(value: Any, fallback: str | None = None) -> Speed | None:
    """The speed a provider says an answer got (None: it says nothing), bounded to the known words."""
    if not isinstance(value, str) or not value:
        return None
    speed = _SERVED.get(value) or _SERVED[OTHER]
    return Speed(speed.served, fallback) if fallback else speed


def messages_speed(usage: Any, fast: bool, fallback: str | None = None) -> Speed | None:
    """A Messages answer's speed: its `usage.speed`, else what the request asked for (`fast`),
    standard when it asked for nothing."""
    said = usage.get("speed") if isinstance(usage, Mapping) else None
    return served(said if isinstance(said, str) else "fast" if fast else "standard", fallback)


def with_fast_beta(headers: dict[str, str]) -> dict[str, str]:
    """`headers` with the fast-mode beta among `anthropic-beta`'s values, the client's own kept."""
    betas = [b.strip() for b in headers.get(BETA_HEADER, "").split(",") if b.strip()]
    if FAST_MODE_BETA in betas:
        return headers
    return {**headers, BETA_HEADER: ",".join([*betas, FAST_MODE_BETA])}


def standard_payload(data: bytes) -> bytes | None:
    """An OpenAI request's encoded body without the `service_tier` it asks for; None when it asks
    for none beyond the default (nothing to send again without)."""
    if b'"service_tier"' not in data:
        return None
    body = orjson.loads(data)
    if not isinstance(body, dict) or body.get("service_tier") in _ASKS_NOTHING:
        return None
    return orjson.dumps({k: v for k, v in body.items() if k != "service_tier"})


def fallback(exc: UpstreamStatus) -> str | None:
    """Why a provider's refusal of a fast request (Anthropic's fast mode, an OpenAI service tier)
    sends it again at standard speed; None when it is not such a refusal (it is the call's failure
    as any other)."""
    if exc.upstream_status == 429:
        return RATE_LIMITED
    if exc.upstream_status == 400 and _FAST_REFUSED.search(exc.detail):
        return UNAVAILABLE
    return None
