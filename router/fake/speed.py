"""Fast modes as the providers define them, on the fake upstream (router/fake/server.py).

Anthropic (POST /v1/messages): `speed: "fast"` asks for fast mode. It is taken only with the
`anthropic-beta: fast-mode-2026-02-01` header (one of the header's comma-separated values) and only
for a model that matches one of `FakeConfig.fast_models` (globs); otherwise Anthropic's 400
`invalid_request_error` saying fast mode is not available. Beyond `fast_rate_limit` fast requests in
a minute (0: no limit), a 429 `rate_limit_error` with `retry-after` (seconds), as Anthropic's
separate fast-mode rate limit answers. A `speed` other than "fast" or "standard" is a 400. An answer
to a request that has the beta or a `speed` says which speed served it in `usage.speed`.

OpenAI (chat completions, Responses): a request's `service_tier` is answered with the tier that
served it — the one asked for; "default" for "auto" — in the answer's `service_tier` (every chunk of
a chat stream, the response object of Responses). A tier other than "auto" and "default" is taken
only for a model matching `fast_models`, else OpenAI's 400 ("Unsupported service_tier: flex"), and
counts against `fast_rate_limit` (beyond it: a 429 naming the service tier).

A refusal draws nothing from the fake's generator, as its other 400s.
"""

from __future__ import annotations

import fnmatch
import math
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from router.fake.wire import error_body

if TYPE_CHECKING:
    from router.fake.config import FakeConfig

FAST_MODE_BETA = "fast-mode-2026-02-01"
SPEEDS = ("standard", "fast")
_WINDOW = 60.0  # seconds the fast-mode rate limit counts over


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    body: bytes
    headers: dict[str, str]


class FastLimit:
    """Fast-mode requests taken in the last minute (a sliding window), at most `per_minute` (0: no limit)."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self.taken: deque[float] = deque()

    def take(self, now: float) -> float | None:
        """None: one more is taken now; else the seconds until one is."""
        if self.per_minute <= 0:
            return None
        while self.taken and self.taken[0] <= now - _WINDOW:
            self.taken.popleft()
        if len(self.taken) >= self.per_minute:
            return self.taken[0] + _WINDOW - now
        self.taken.append(now)
        return None


def betas(headers: Mapping[str, str]) -> set[str]:
    """The values of a request's `anthropic-beta` header (comma-separated)."""
    return {b.strip() for b in headers.get("anthropic-beta", "").split(",") if b.strip()}


def messages_speed(
    body: dict[str, Any], headers: Mapping[str, str], config: FakeConfig, limit: FastLimit
) -> str | Refusal | None:
    """The `usage.speed` of the answer to this Messages request (None: it says nothing of speed), or
    the refusal it gets."""
    speed, beta = body.get("speed"), FAST_MODE_BETA in betas(headers)
    if speed is None:
        return "standard" if beta else None
    if speed not in SPEEDS:
        return _refused(400, f"speed: Input should be 'standard' or 'fast' (got {str(speed)[:40]!r})")
    if speed == "standard":
        return "standard"
    model = str(body.get("model", ""))
    if not beta:
        return _refused(400, f"speed: fast mode requires the anthropic-beta header {FAST_MODE_BETA!r}")
    if not any(fnmatch.fnmatchcase(model, glob) for glob in config.fast_models):
        return _refused(400, f"Fast mode is not available for the model {model[:100]!r} in this organization.")
    wait = limit.take(time.monotonic())
    if wait is not None:
        refusal = _refused(429, "This request would exceed your organization's rate limit for fast mode.")
        refusal.headers["retry-after"] = str(max(1, math.ceil(wait)))
        return refusal
    return "fast"


def served_tier(body: dict[str, Any], config: FakeConfig, limit: FastLimit) -> str | Refusal | None:
    """The `service_tier` an OpenAI answer says served it — the one asked for ("auto": "default") —
    or the refusal it gets."""
    tier = body.get("service_tier")
    if not isinstance(tier, str) or not tier:
        return None
    if tier in ("auto", "default"):
        return "default"
    if not any(fnmatch.fnmatchcase(str(body.get("model", "")), glob) for glob in config.fast_models):
        return _refused(400, f"Unsupported service_tier: {tier[:40]}", anthropic=False)
    wait = limit.take(time.monotonic())
    if wait is not None:
        refusal = _refused(429, f"Rate limit reached for service_tier {tier[:40]}.", anthropic=False)
        refusal.headers["retry-after"] = str(max(1, math.ceil(wait)))
        return refusal
    return tier[:40]


def _refused(status: int, message: str, anthropic: bool = True) -> Refusal:
    return Refusal(status, error_body(status, message, anthropic), {"Content-Type": "application/json"})
