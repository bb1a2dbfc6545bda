"""Thinking off with an effort level, as Anthropic-compatible upstreams take it (anthropic.py).

Claude Code's subagents and side calls send `thinking: {type: "disabled"}` beside the session's
`output_config: {effort: ...}`, and sometimes with the session's `display` still in `thinking`.
What the upstreams do with that differs:

    Anthropic        `thinking.disabled` takes `type` alone: "thinking.disabled.display: Extra inputs are
                     not permitted"; some models take no effort above `high` with thinking off:
                     "output_config.effort 'xhigh' is not supported when thinking is disabled on this model"
    DeepSeek's       no effort at all with thinking off: "thinking options type cannot be disabled when
    Anthropic API    reasoning_effort is set"

So what a tier is sent (`tidy`): thinking off is `{type: "disabled"}`, nothing else (the published
shape; the other keys mean nothing with thinking off). And a tier that refuses the effort level
(`level`) with thinking off (`refused`) is sent the request once more without `output_config.effort`
(`without`) — the model's default effort — before anything reached the client; the tier remembers
the level, and sends it no more. Thinking that is not on (disabled,
or left out of the request, as provenance.py leaves it out when a tool loop lacks its thinking) is
"off" here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from router.errors import UpstreamStatus

# what a refusal of an effort level beside thinking off says (Anthropic's, DeepSeek's)
_REFUSED = re.compile(r"(?i)\beffort\b.*\bthinking\b|\bthinking\b.*\b(effort|reasoning_effort)\b")


def _off(body: Mapping[str, Any]) -> bool:
    thinking = body.get("thinking")
    return not isinstance(thinking, Mapping) or thinking.get("type") not in ("enabled", "adaptive")


def level(body: Mapping[str, Any]) -> str | None:
    """The effort level the request sets beside thinking off (None: it sets none, or thinking is on)."""
    config = body.get("output_config")
    said = config.get("effort") if isinstance(config, Mapping) and _off(body) else None
    return said if isinstance(said, str) else None


def tidy(body: dict[str, Any]) -> dict[str, Any]:
    """`body` with thinking off written as the API takes it (`{type: "disabled"}`); `body` itself
    when it already is."""
    thinking = body.get("thinking")
    if isinstance(thinking, Mapping) and thinking.get("type") == "disabled" and len(thinking) > 1:
        return {**body, "thinking": {"type": "disabled"}}
    return body


def refused(exc: UpstreamStatus) -> bool:
    """Is this the upstream's refusal of an effort level beside thinking off?"""
    return exc.upstream_status == 400 and _REFUSED.search(exc.detail) is not None


def without(body: dict[str, Any]) -> dict[str, Any]:
    """`body` without `output_config.effort` (and without `output_config`, when that was all of it)."""
    config = {k: v for k, v in body["output_config"].items() if k != "effort"}
    out = {k: v for k, v in body.items() if k != "output_config"}
    return {**out, "output_config": config} if config else out
