"""What of a refused request an OpenAI-compatible tier (openai_compat.py) can change so the upstream
takes it: `again(refusal, body)`, which `PooledHTTP` (http.py) sends once more, before anything was
read of the answer, so before anything reached the client:

    a service tier beyond the default — the tier's `service_tier`, or the client's on a lane that
    forwards it — refused ("Unsupported service_tier: flex", a 429): sent without it, as Anthropic's
    fast mode falls back (speed.py); the answer's speed says why (`Speed.fallback`), which the stats
    and metrics count
    a tool loop's turn without its `reasoning_content` (another model's, which the tier does not get:
    router/sessions/reasoning_text.py), refused by a server that requires it (DeepSeek's thinking
    mode): sent with an empty one there
    `reasoning_content` refused by a server that takes no such field: sent without any
"""

from __future__ import annotations

from router.errors import UpstreamStatus
from router.sessions.reasoning_text import reasoning_refused
from router.upstream.speed import fallback, standard_payload


def again(exc: UpstreamStatus, data: bytes) -> tuple[bytes, str | None] | None:
    """The refused request, changed to be taken, and why its speed fell back (None: not its speed);
    None: nothing the router can change about it."""
    reason = fallback(exc)
    if reason is not None and (plain := standard_payload(data)) is not None:
        return plain, reason
    if (fixed := reasoning_refused(exc.upstream_status, exc.detail, data)) is not None:
        return fixed, None
    return None
