"""One error tree. Every failure a client can see is a `RouterError`.

    RouterError                      500 api_error
    ├── BadRequest                   400 invalid_request_error
    │   ├── InvalidJSON              400 invalid_request_error / invalid_json
    │   └── ForbiddenField           400 invalid_request_error / forbidden_field   (api_base, api_key, ...)
    ├── Unauthorized                 401 authentication_error / invalid_api_key
    ├── NotFound                     404 invalid_request_error / model_not_found
    │   └── UnknownPath              404 (or 405) invalid_request_error / not_found
    ├── LaneRefused                  403 permission_error / lane_refused        (router/core/live/lanes.py)
    ├── RequestTimeout               408 invalid_request_error / request_timeout    (the body came too slowly)
    ├── UpgradeRequired              426 invalid_request_error / websocket_mode_off (use HTTP: WebSocket mode is off)
    ├── BodyTooLarge                 413 invalid_request_error / body_too_large
    ├── LaneBusy                     429 rate_limit_error / lane_busy            (Retry-After)
    ├── ClientGone                   499 client_gone: the client left; never sent, ends the call's work
    ├── Overloaded                   503 overloaded_error / overloaded          (Retry-After)
    │   ├── ShuttingDown             503 overloaded_error / shutting_down       (a call still open at shutdown)
    │   ├── TierOpen                 503 overloaded_error / tier_open           (every tier left is open: breaker)
    │   └── NotStarted               503 overloaded_error / not_started         (the proxy could not start)
    └── UpstreamError                502 upstream_error / upstream_error        (x-should-retry: false)
        ├── UpstreamTimeout          504 timeout_error / timeout
        ├── ExtraMissing             502 upstream_error / extra_missing         (a package extra the call needs)
        ├── UpstreamStatus           the request's fault (400, 413, 422, …) is passed on; else 502
        │   └── ContextExceeded      400 invalid_request_error / context_length_exceeded   (no tier's context fits)
        └── ChecksFailed             502 upstream_error / checks_failed         (x-should-retry: true)
            └── ChecksFailedRepeatedly  502 upstream_error / checks_failed      (x-should-retry: false: the same
                                     request failed in every run the router gives it, router/core/live/repeats.py)

`to_body()` gives the OpenAI error shape `{"error": {"message", "type", "param", "code"}}`. An error of
a call the router had routed carries its `outcome` (router/flow/outcome.py), so that the client is
told the call's routing (`x-router-*` headers) with the error as with an answer.
Messages are written by the router, never copied from a traceback, and upstream text is passed
through `redact()` before it is shown, so keys and key-bearing URLs never reach a client.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import orjson

from router.mistakes import TIMEOUT, UPSTREAM_ERROR

_SECRET_PATTERNS = (
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{6,}"),
    re.compile(r"(?i)((?:api[_-]?key|key|token|secret|password|sig)=)[^&\s\"']+"),
    re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_\-]{6,}"),
    re.compile(r"(?i)(://)[^/@\s:]+:[^/@\s]+@"),
)


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """Remove known secrets and anything shaped like a key or a credential from `text`."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    text = _SECRET_PATTERNS[0].sub(r"\1[redacted]", text)
    text = _SECRET_PATTERNS[1].sub(r"\1[redacted]", text)
    text = _SECRET_PATTERNS[2].sub("[redacted]", text)
    text = _SECRET_PATTERNS[3].sub(r"\1[redacted]@", text)
    return text


def upstream_text(text: str, secrets: tuple[str, ...] = (), limit: int = 300) -> str:
    """What of an upstream's error text may be shown: its first line, never a traceback, redacted."""
    text = text.split("Traceback (most recent call last)", 1)[0]
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return redact(first[:limit], secrets)


class RouterError(Exception):
    status: ClassVar[int] = 500
    type: ClassVar[str] = "api_error"
    code: ClassVar[str | None] = "internal_error"
    should_retry: ClassVar[bool | None] = None
    retry_after: ClassVar[str | None] = None  # seconds, sent as Retry-After
    outcome: Any = None  # the routed call's Outcome (router/flow/outcome.py), set by the pipeline

    def __init__(self, message: str, *, param: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status_override = status

    @property
    def http_status(self) -> int:
        return self.status_override or self.status

    def to_body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_body())

    def headers(self) -> dict[str, str]:
        out = {} if self.should_retry is None else {"x-should-retry": "true" if self.should_retry else "false"}
        if self.retry_after is not None:
            out["retry-after"] = self.retry_after
        return out


class BadRequest(RouterError):
    status = 400
    type = "invalid_request_error"
    code = "invalid_request"
    should_retry = False


class InvalidJSON(BadRequest):
    code = "invalid_json"


class ForbiddenField(BadRequest):
    code = "forbidden_field"


class Unauthorized(RouterError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"
    should_retry = False


class NotFound(RouterError):
    status = 404
    type = "invalid_request_error"
    code = "model_not_found"
    should_retry = False


class UnknownPath(NotFound):
    """No such URL (404) or method (405): not a model that was not found."""

    code = "not_found"


class LaneRefused(RouterError):
    """The call asked for a lane the policy refuses."""

    status = 403
    type = "permission_error"
    code = "lane_refused"
    should_retry = False


class LaneBusy(RouterError):
    """The call asked for a lane that is at its `max_concurrent` with `over_limit: refuse`."""

    status = 429
    type = "rate_limit_error"
    code = "lane_busy"
    should_retry = True
    retry_after = "1"


class BodyTooLarge(RouterError):
    status = 413
    type = "invalid_request_error"
    code = "body_too_large"
    should_retry = False


class RequestTimeout(RouterError):
    """The request body did not arrive within `body_timeout`; the connection is closed."""

    status = 408
    type = "invalid_request_error"
    code = "request_timeout"
    should_retry = False

    def headers(self) -> dict[str, str]:
        return {**super().headers(), "connection": "close"}  # the rest of the body is not read


class UpgradeRequired(RouterError):
    """The Responses WebSocket mode is off (`ws_enabled`): its handshake is answered 426, the status
    after which Codex sends the turn over HTTP at once instead of retrying the socket."""

    status = 426
    type = "invalid_request_error"
    code = "websocket_mode_off"
    should_retry = False


class ClientGone(RouterError):
    """The client closed its connection: the call's work (its upstream call) is cancelled."""

    status = 499
    code = "client_gone"


class Overloaded(RouterError):
    status = 503
    type = "overloaded_error"
    code = "overloaded"
    should_retry = True
    retry_after = "1"


class NotStarted(Overloaded):
    """The proxy could not start (its store, its tiers): a call made before it did gets this."""

    code = "not_started"


class ShuttingDown(Overloaded):
    """The process is stopping: a call or stream still open at the grace period ends with this."""

    code = "shutting_down"


class TierOpen(Overloaded):
    """Every tier the call could still go to is skipped by its breaker (router/core/live/breaker.py):
    retry after `retry_after` seconds, when the first of them takes a trial call."""

    code = "tier_open"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.wait = retry_after

    def headers(self) -> dict[str, str]:
        return {**super().headers(), "retry-after": str(self.wait)}


class UpstreamError(RouterError):
    """A tier failed: refused, reset, 5xx, malformed answer. Carries the mistake kind."""

    status = 502
    type = "upstream_error"
    code = "upstream_error"
    should_retry = False  # the router already retried and escalated; the SDK must not multiply that
    mistake: ClassVar[str] = UPSTREAM_ERROR
    tier_fault: ClassVar[bool] = True  # counted by the tier's breaker (router/core/live/breaker.py)

    def __init__(self, message: str, *, tier: str = "", status: int | None = None) -> None:
        super().__init__(message, status=status)
        self.tier = tier


class UpstreamTimeout(UpstreamError):
    status = 504
    type = "timeout_error"
    code = "timeout"
    mistake = TIMEOUT


class ExtraMissing(UpstreamError):
    """The call needs a package extra that is not installed — litellm, for a chat-completions or
    Responses client of an `anthropic/*` tier: not the tier's fault (its breaker does not count it),
    another tier may take the call (it escalates), and the message names the extra to install."""

    code = "extra_missing"
    tier_fault = False


class UpstreamStatus(UpstreamError):
    """The upstream answered with an HTTP error. 4xx are the client's fault and pass through."""

    # 4xx that say the router (its key, URL or model id) or the upstream's load is at fault, not the
    # client's request: they escalate like a 5xx and reach the client as 502.
    ROUTER_FAULTS = frozenset({401, 403, 404, 405, 408, 409, 429})

    def __init__(self, message: str, *, tier: str, upstream_status: int, detail: str = "") -> None:
        client_fault = 400 <= upstream_status < 500 and upstream_status not in self.ROUTER_FAULTS
        super().__init__(message, tier=tier, status=upstream_status if client_fault else 502)
        self.upstream_status = upstream_status
        self.client_fault = client_fault
        self.detail = detail  # the upstream's own message, as `upstream_text` shows it (in `message` too)

    def to_body(self) -> dict[str, Any]:
        body = super().to_body()
        if self.client_fault:
            body["error"]["type"] = "invalid_request_error"
            body["error"]["code"] = "upstream_rejected"
        return body


class ContextExceeded(UpstreamStatus):
    """The prompt is longer than a tier's context window (its server said so: a 400 the router reads
    in every form it comes in, router/upstream/context.py). Not the tier's fault: no breaker, no
    mistake; the call goes on to a tier whose window is larger, and when none is left the client gets
    its own API's error: OpenAI's `context_length_exceeded`, Anthropic's "prompt is too long: N
    tokens > M maximum" (`anthropic_message`). `prompt_tokens` and `window` are what is known of them."""

    code = "context_length_exceeded"

    def __init__(self, *, tier: str, prompt_tokens: int | None = None, window: int | None = None) -> None:
        self.prompt_tokens = prompt_tokens
        self.window = window
        super().__init__(self._openai_message(), tier=tier, upstream_status=400)

    def known(self, prompt_tokens: int | None, window: int | None) -> ContextExceeded:
        """The same error with what the router knows besides filled in where the tier said nothing."""
        tokens, limit = self.prompt_tokens or prompt_tokens, self.window or window
        if (tokens, limit) == (self.prompt_tokens, self.window):
            return self
        return ContextExceeded(tier=self.tier, prompt_tokens=tokens, window=limit)

    def _openai_message(self) -> str:
        limit = f"This model's maximum context length is {self.window} tokens." if self.window else (
            "The prompt exceeds this model's context window.")  # fmt: skip
        asked = f" However, your messages resulted in {self.prompt_tokens} tokens." if self.prompt_tokens else ""
        return f"{limit}{asked} Please reduce the length of the messages."

    @property
    def anthropic_message(self) -> str:
        """Anthropic's own wording, which Claude Code answers by compacting the conversation."""
        if self.prompt_tokens and self.window:
            return f"prompt is too long: {self.prompt_tokens} tokens > {self.window} maximum"
        if self.prompt_tokens:
            return f"prompt is too long: {self.prompt_tokens} tokens"
        return "prompt is too long"

    def to_body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": "invalid_request_error", "param": "messages",
                          "code": self.code}}  # fmt: skip


class ChecksFailed(UpstreamError):
    """Every attempt's answer failed the checks and none is left: nothing malformed is delivered.
    A new sample may well pass, so clients are told to retry (their SDKs do, with backoff)."""

    code = "checks_failed"
    should_retry = True


class ChecksFailedRepeatedly(ChecksFailed):
    """The same request failed the checks in every run the router gives it, resampled ones included
    (router/core/live/repeats.py): asked again the same way it is refused at once, so clients are told not to."""

    should_retry = False
