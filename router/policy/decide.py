"""The routing decision: a pure function of the call's features, the policy and live state.

`features_of()` reads what routes can match on from the parsed body once; `decide()` never does
I/O, never mutates, and is tested as a table of inputs → decisions.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from router.errors import NotFound
from router.policy.model import Policy
from router.policy.route import Route, When

TIER_HEADER = "x-router-tier"
CHARS_PER_TOKEN = 4  # a cheap, tokenizer-free estimate; good enough for routing thresholds


@dataclass(frozen=True, slots=True)
class Features:
    model: str
    tool_names: tuple[str, ...] = ()
    prompt_tokens: int = 0  # estimated tokens of the messages' text (characters / CHARS_PER_TOKEN)
    last_role: str | None = None
    stream: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)
    pinned_tool: str | None = None  # the function a named tool_choice forces
    tool_tokens: int = 0  # estimated tokens of the tool definitions (their JSON / CHARS_PER_TOKEN), set once read

    @property
    def context_tokens(self) -> int:
        """The estimated prompt a tier's context must hold: the messages and the tool definitions."""
        return self.prompt_tokens + self.tool_tokens

    def with_tools(self, chars: int) -> Features:
        """These features with tool definitions of `chars` characters (as JSON). Built directly:
        `dataclasses.replace` costs a few µs more, on every call that offers tools."""
        if not chars:
            return self
        return Features(self.model, self.tool_names, self.prompt_tokens, self.last_role, self.stream, self.headers,
                        self.pinned_tool, chars // CHARS_PER_TOKEN)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Live:
    """What the router knows beyond the call itself (filled from the store; empty by default)."""

    sticky_tier: str | None = None  # set while a session is sticky after an agent-reported error
    # adaptive routing: (route, tool) → windowed mistake rate of the route's tier, when over threshold
    degraded: Mapping[tuple[str, str], float] = field(default_factory=dict)
    # adaptive routing: (route, tool) → calls diverted so far (every probe_every-th one probes)
    diverted: Mapping[tuple[str, str], int] = field(default_factory=dict)
    # tier → its context window in tokens, where known (router/core/live/context.py)
    windows: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Decision:
    tier: str
    route: str
    reason: str
    diverted_tool: str | None = None  # adaptive routing diverted (or probed) the call because of this tool


def _text_len(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(p.get("text") or "") for p in content if isinstance(p, dict))
    return 0


def features_of(body: Mapping[str, Any], headers: Mapping[str, str]) -> Features:
    """Routing features of a chat-completions body. `headers` must have lower-case names."""
    tools = body.get("tools") or ()
    names = tuple(str(_name(t.get("function")) or t.get("name") or "") for t in tools if isinstance(t, dict))
    messages = body.get("messages") or ()
    chars = sum(_text_len(m.get("content")) for m in messages if isinstance(m, dict))
    last = messages[-1] if messages and isinstance(messages[-1], dict) else None
    choice = body.get("tool_choice")
    pinned = _name(choice.get("function")) if isinstance(choice, dict) else None
    return Features(
        pinned_tool=str(pinned) if pinned else None,
        model=str(body.get("model") or ""),
        tool_names=names,
        prompt_tokens=chars // CHARS_PER_TOKEN,
        last_role=str(last.get("role")) if last else None,
        stream=bool(body.get("stream")),
        headers=headers,
    )


def _name(function: Any) -> Any:
    """The `name` of a client's `function` object; None when it is not an object."""
    return function.get("name") if isinstance(function, dict) else None


def _matches(when: When, f: Features) -> bool:
    if (t := when.tools) is not None:
        n = len(f.tool_names)
        if t.present is not None and t.present != (n > 0):
            return False
        if t.min_count is not None and n < t.min_count:
            return False
        if t.max_count is not None and n > t.max_count:
            return False
        if t.any_of is not None and not set(t.any_of) & set(f.tool_names):
            return False
        if t.none_of is not None and set(t.none_of) & set(f.tool_names):
            return False
    if when.min_prompt_tokens is not None and f.prompt_tokens < when.min_prompt_tokens:
        return False
    if when.max_prompt_tokens is not None and f.prompt_tokens > when.max_prompt_tokens:
        return False
    if when.last_role is not None and f.last_role not in when.last_role:
        return False
    if when.model is not None and not any(fnmatch.fnmatchcase(f.model, p) for p in when.model):
        return False
    if when.stream is not None and when.stream != f.stream:
        return False
    if when.headers:
        for name, patterns in when.headers.items():
            value = f.headers.get(name)
            if value is None or not any(fnmatch.fnmatchcase(value, p) for p in patterns):
                return False
    return True


def first_match(routes: list[Route], f: Features) -> Route | None:
    return next((r for r in routes if _matches(r.when, f)), None)


def routed_by_policy(f: Features, policy: Policy) -> bool:
    """The call's model is `auto` and no tier is forced: only then may a sticky session decide
    (so a forced or aliased call does not use up one of its sticky calls)."""
    if policy.allow_tier_header and f.headers.get(TIER_HEADER):
        return False
    return policy.resolve_alias(f.model) == "auto"


def fits(tokens: int, window: int | None) -> bool:
    """A prompt of `tokens` fits a context of `window` tokens (None: not known, taken to fit). One
    that fills it does not: there is no room for an answer (llama-server refuses it)."""
    return window is None or tokens < window


def decide(f: Features, policy: Policy, live: Live = Live()) -> Decision:
    """Which tier answers this call, by which route, and why. Raises NotFound for unknown models.
    A call whose estimated prompt does not fit the tier's known context window goes to the first
    tier it would escalate to that it fits (`fitted`)."""
    decision = _routed(f, policy, live)
    return fitted(decision, f.context_tokens, policy, live.windows) if live.windows else decision


def fitted(decision: Decision, tokens: int, policy: Policy, windows: Mapping[str, int]) -> Decision:
    """`decision`, or — when a prompt of `tokens` does not fit its tier's window — the first tier of
    its escalation chain that the prompt fits (an unknown window is taken to fit). When none does,
    the one with the largest window: its server counts the prompt exactly, and says if it is too long."""
    window = windows.get(decision.tier)
    if fits(tokens, window):
        return decision
    beyond = policy.escalation.beyond(decision.tier)
    tier = next((t for t in beyond if fits(tokens, windows.get(t))), None)
    if tier is None:
        tier = max((decision.tier, *beyond), key=lambda t: windows.get(t, 0))
        if tier == decision.tier:
            return decision
    reason = f"{decision.reason}; the prompt (~{tokens} tokens) does not fit {decision.tier!r} ({window} tokens)"
    return Decision(tier, decision.route, reason, decision.diverted_tool)


def _routed(f: Features, policy: Policy, live: Live) -> Decision:
    target = policy.resolve_alias(f.model)
    if target is None:
        raise NotFound(f"The model {f.model!r} is not served here; see GET /v1/models.", param="model")
    if policy.allow_tier_header and (forced := f.headers.get(TIER_HEADER)):
        if forced not in policy.models:
            raise NotFound(f"{TIER_HEADER}: unknown tier {forced!r}.", param=TIER_HEADER)
        return Decision(forced, "header", f"forced by {TIER_HEADER}")
    if target != "auto":
        return Decision(target, f"alias:{f.model}", f"model {f.model!r} is an alias of tier {target!r}")
    if live.sticky_tier is not None:
        return Decision(live.sticky_tier, "sticky", "session is sticky after an agent-reported error")
    route = first_match(policy.routes, f)
    if route is None:
        raise NotFound("No route matches this call and the policy has no catch-all route.", param="model")
    if route.adaptive is not None and live.degraded:
        return _adapt(route, f, policy, live)
    return Decision(route.use, route.name, f"first matching route {route.name!r}")


def _adapt(route: Route, f: Features, policy: Policy, live: Live) -> Decision:
    """Divert the call when a tool it may call is degraded on the route's tier; probe now and then."""
    assert route.adaptive is not None
    tools = (f.pinned_tool,) if f.pinned_tool else f.tool_names
    worst = max(((live.degraded[(route.name, t)], t) for t in tools if (route.name, t) in live.degraded), default=None)
    if worst is None:
        return Decision(route.use, route.name, f"first matching route {route.name!r}")
    rate, tool = worst
    target = route.adaptive.to or (policy.escalation.chain[-1] if policy.escalation.chain else route.use)
    if target == route.use:
        return Decision(route.use, route.name, f"first matching route {route.name!r}")
    if (live.diverted.get((route.name, tool), 0) + 1) % route.adaptive.probe_every == 0:
        reason = f"probe: {route.use!r} mistake rate for {tool!r} is {rate:.2f}"
        return Decision(route.use, f"{route.name}:probe", reason, diverted_tool=tool)
    reason = f"adaptive: {route.use!r} mistake rate for {tool!r} is {rate:.2f} > {route.adaptive.max_mistake_rate}"
    return Decision(target, f"{route.name}:adaptive", reason, diverted_tool=tool)
