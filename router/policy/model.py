"""The policy file, as pydantic models. Unknown keys are errors everywhere (`Strict`, strict.py).

A policy names tiers (`models`), maps incoming model names to `auto` or a tier (`aliases`), and
lists first-match `routes` (their models: route.py). `escalation` says which mistakes send a call
to a stronger tier. Every default lives next to the field it belongs to.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, model_validator

from router.mistakes import ESCALATE_BY_DEFAULT, MISTAKE_KINDS, MistakeKind  # noqa: F401 (MISTAKE_KINDS: named here too)
from router.policy.price import Price
from router.policy.references import reference_problems
from router.policy.route import Route
from router.policy.strict import PositiveFloat, Strict


class Timeouts(Strict):
    """Seconds. `first_token`: until the response headers (JSON) or the first SSE event (stream)."""

    connect: PositiveFloat = 5.0
    first_token: PositiveFloat = 60.0
    total: PositiveFloat = 600.0


class Breaker(Strict):
    """When the router stops calling a tier for a while (router/core/live/breaker.py): after `failures`
    upstream errors in a row it is skipped for `cooldown` s, then one trial call goes through;
    each failed trial doubles the cooldown, up to `max_cooldown`."""

    failures: int = Field(5, ge=0, description="upstream errors in a row that open the tier (0 = never)")
    cooldown: PositiveFloat = Field(10.0, description="seconds a tier stays open before a trial call")
    max_cooldown: PositiveFloat = Field(60.0, description="the longest cooldown, after trials that failed")

    @model_validator(mode="after")
    def _ordered(self) -> Breaker:
        if self.max_cooldown < self.cooldown:
            raise ValueError("max_cooldown must be at least cooldown")
        return self


class Sessions(Strict):
    """Keep each agent session's prompt prefix on this tier's servers (router/sessions/affinity.py),
    so that a turn evaluates only the tokens it adds."""

    slots: int = Field(
        default=0,
        ge=0,
        description="llama.cpp server slots (llama-server --parallel): each session is pinned to one with "
        "id_slot + cache_prompt; 0: no pinning (vLLM, SGLang cache prefixes by themselves)",
    )
    side_slots: int = Field(
        default=1, ge=0, description="of the slots, those kept for side calls (small tool-less calls: titles, probes)"
    )
    warm: bool = Field(
        default=False,
        description="prefill a session's prompt here in the background when another tier answers it, so that "
        "an escalated or sticky turn evaluates only its new tokens (router/core/live/warming.py)",
    )


class Tier(Strict):
    model: str = Field(
        description='"openai/<id>" for OpenAI-compatible servers, "anthropic/<id>" for Anthropic, else a litellm '
        "provider string"
    )
    api_base: str | list[str] | None = Field(
        default=None, description="the server's URL; a list: replicas, each session kept on one of them"
    )
    api_key: SecretStr | None = None
    timeouts: Timeouts = Timeouts()
    breaker: Breaker = Breaker()
    max_connections: int = Field(64, ge=1, description="pool size of this tier's keep-alive connections")
    warm_connections: int = Field(2, ge=0, description="connections opened at start-up")
    keep_warm: float = Field(
        30.0, ge=0, description="seconds idle after which warm_connections are used again (0 = never)"
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="body fields set on every request to this tier (e.g. temperature)"
    )
    defaults: dict[str, Any] = Field(
        default_factory=dict, description="body fields set on requests to this tier that do not carry them"
    )
    tools_system: str | None = Field(
        default=None,
        description="when tools are offered and no system message was sent, insert one with this text "
        "(llama-cpp-python's chatml-function-calling shows tools only inside a system message)",
    )
    apis: list[Literal["responses"]] = Field(
        default_factory=list,
        description="client APIs this openai/ tier serves itself (POST {api_base}/responses): passed through",
    )
    websocket: bool = Field(
        default=False,
        description="with apis: [responses]: Responses calls go over one WebSocket per client session "
        "(GET {api_base}/responses, OpenAI's WebSocket mode), each turn sending only its new input after the "
        "tier's own previous_response_id (router/upstream/responses_ws.py)",
    )
    sessions: Sessions = Sessions()
    cut_loops: bool = Field(
        default=False,
        description="read answers as streams and stop one that goes round in a loop (the same stretch of 32+ "
        "characters 3 times in a row), keeping its text up to the first copy's end (router/upstream/loops.py)",
    )
    max_output_tokens: int | None = Field(
        default=None,
        ge=1,
        description="tokens this tier writes per answer at most: a request asking more, or not saying, is "
        "capped (a small local model that loops would write until its context is full; Claude Code asks 128k)",
    )
    context_window: int | None = Field(
        default=None,
        ge=1,
        description="prompt tokens this tier takes at most; the least of it and what its server reports "
        "counts (router/core/live/context.py). Default: what the server reports (llama-server, vLLM, Anthropic)",
    )
    speed: Literal["fast"] | None = Field(
        default=None,
        description="anthropic/* tiers: Anthropic's fast mode (`speed: fast` and its beta header); a call it is "
        "not available to, or over its rate limit, is answered at standard speed (router/upstream/speed.py)",
    )
    service_tier: str | None = Field(
        default=None, min_length=1, description="openai/* tiers: the `service_tier` asked for (OpenAI: `priority`)"
    )
    price: Price | None = Field(
        default=None,
        description="USD per million tokens (input, cached_input, cache_write, output) or a multiplier of the "
        "maintained table's; default: the table's for a hosted tier, 0 for a local one (router/policy/price.py)",
    )

    @property
    def provider(self) -> str:
        return self.model.split("/", 1)[0] if "/" in self.model else "openai"

    @property
    def upstream_model(self) -> str:
        """The model id sent upstream: the part after `openai/`, or the whole litellm string."""
        return self.model.split("/", 1)[1] if self.provider == "openai" and "/" in self.model else self.model

    @property
    def pinned_temperature(self) -> float | None:
        """The temperature its `params` pin, which every request to it is answered at (None: the request's)."""
        pinned = self.params.get("temperature")
        return pinned if isinstance(pinned, int | float) and not isinstance(pinned, bool) else None

    @property
    def api_bases(self) -> tuple[str, ...]:
        """The server URLs: one, or a tier's replicas."""
        if self.api_base is None:
            return ()
        return (self.api_base,) if isinstance(self.api_base, str) else tuple(self.api_base)

    @model_validator(mode="after")
    def _openai_needs_base(self) -> Tier:
        if self.provider == "openai" and not self.api_base:
            raise ValueError("an openai/<id> tier needs api_base (the OpenAI-compatible server's /v1 URL)")
        if self.apis and self.provider != "openai":
            raise ValueError("apis: only openai/<id> tiers take it (anthropic/* tiers serve Messages natively)")
        if self.websocket and "responses" not in self.apis:
            raise ValueError("websocket: true needs apis: [responses] (it carries Responses calls as they are)")
        if isinstance(self.api_base, list) and self.provider != "openai":
            raise ValueError("api_base: a list of replicas is for openai/<id> tiers")
        if (self.speed or "speed" in self.params or "speed" in self.defaults) and self.provider != "anthropic":
            raise ValueError("speed: only anthropic/* tiers take it (fast mode); openai/* tiers have service_tier")
        if self.service_tier is not None and self.provider != "openai":
            raise ValueError("service_tier: a key of openai/* tiers; anthropic/* tiers have speed")
        if self.cut_loops and self.provider != "openai":
            raise ValueError("cut_loops: for openai/<id> tiers (llama.cpp, vLLM, SGLang)")
        if (self.sessions.slots or self.sessions.warm) and self.provider != "openai":
            raise ValueError("sessions.slots and sessions.warm are for openai/<id> tiers (llama.cpp, vLLM, SGLang)")
        for base in self.api_bases:
            url = urlsplit(base)
            if url.scheme not in ("http", "https") or not url.hostname or url.query or url.fragment:
                raise ValueError("api_base must be an http(s) URL without query or fragment, e.g. http://host:8081/v1")
            if url.username or url.password:
                raise ValueError("api_base must not carry credentials; use api_key")
        return self


DEFAULT_FAILURE_PATTERNS = (
    r"(?i)^\s*(error|exception|fatal)\b",
    r"Traceback \(most recent call last\)",
    r"(?i)\b(exit|return) (code|status)\W{0,3}[1-9]",
)


class AfterAgentError(Strict):
    """A tool result the agent sends back that reports failure, for a call the router routed."""

    sticky_calls: int = Field(default=3, ge=0, description="next calls of the session that go to the escalation tier")
    patterns: list[re.Pattern[str]] = Field(
        default_factory=lambda: [re.compile(p) for p in DEFAULT_FAILURE_PATTERNS],
        description="regexes that, found in a tool result, mean the call failed",
    )
    repeated_call: bool = Field(default=True, description="a call repeated verbatim means the earlier one failed")


class Repeat(Strict):
    """A request identical to one whose every attempt failed the checks — most often the agent retrying
    the router's retryable `checks_failed` error — is not run the same way again (router/core/live/repeats.py):
    the first `resample` such repeats start on `tier` with every attempt sampled at `temperature`; the
    next one is refused at once (a non-retryable `checks_failed`), as is the error of the last resampled run.
    A `tier` whose params pin temperature 0 would answer a resampled run the same way: none is run."""

    resample: int = Field(
        default=2, ge=0, description="repeats of an exhausted request run again resampled; later ones are refused"
    )
    temperature: float = Field(
        default=0.7, gt=0, le=2, description="temperature of a resampled run's attempts (the client's seed dropped)"
    )
    tier: str | None = Field(
        default=None,
        description="tier of a resampled run (default: the escalation chain's last, else the route's); a tier "
        "whose params pin temperature keeps its own, and a greedy one (0) gets no resampled run: a sampled "
        "variant of a greedy tier goes here",
    )


class Escalation(Strict):
    to: str | list[str] | None = Field(default=None, description="tier, or chain of tiers tried in order")
    on: list[MistakeKind] = Field(default_factory=lambda: list(ESCALATE_BY_DEFAULT))
    max_attempts: int = Field(default=3, ge=1, description="upstream calls per client call, all tiers together")
    deadline: PositiveFloat = Field(default=300.0, description="seconds for the whole call, escalations included")
    after_agent_error: AfterAgentError = AfterAgentError()
    on_exhausted: Literal["error", "deliver"] = Field(
        default="error",
        description="when every attempt failed the checks: answer with a retryable error, or deliver the last answer",
    )
    repeat: Repeat | None = Field(
        default_factory=Repeat,
        description="how a repeat of a request whose every attempt failed the checks is run (null: as it comes)",
    )

    @property
    def chain(self) -> tuple[str, ...]:
        if self.to is None:
            return ()
        return (self.to,) if isinstance(self.to, str) else tuple(self.to)

    def beyond(self, tier: str) -> tuple[str, ...]:
        """The tiers a call on `tier` escalates to, in order: the chain after it (all of it when
        `tier` is not in it)."""
        chain = self.chain
        return chain[chain.index(tier) + 1 :] if tier in chain else chain


class Lane(Strict):
    """A lane a call may ask for — Anthropic's `speed`, OpenAI's `service_tier`, or the router's
    `x-router-lane: <name>` header — and how it is served: tier variants (e.g. a low-batch replica),
    body fields for upstreams that schedule by them (vLLM's `priority`), the request's own fields
    passed on, a cap on calls in flight, or a refusal. A call asking for nothing is on lane `standard`."""

    speed: list[str] | None = Field(
        default=None, description="`speed` values that ask for this lane (default: the lane's name)"
    )
    service_tier: list[str] | None = Field(
        default=None, description="`service_tier` values that ask for this lane (default: the lane's name)"
    )
    tiers: dict[str, str] = Field(default_factory=dict, description="tier → the tier serving it on this lane")
    params: dict[str, Any] = Field(default_factory=dict, description="body fields set on this lane's upstream calls")
    forward: bool = Field(default=False, description="pass the request's `speed` / `service_tier` on upstream")
    max_concurrent: int | None = Field(default=None, ge=1, description="calls in flight on this lane at most")
    over_limit: Literal["standard", "refuse"] = Field(
        default="standard", description="beyond max_concurrent: serve on the standard lane, or refuse (429)"
    )
    refuse: bool = Field(default=False, description="refuse calls that ask for this lane (403)")


class Discovery(Strict):
    """The names `GET /v1/models` also lists the routes and tiers under, for clients that keep only
    some model ids: Claude Code's gateway discovery keeps the ids that match /(claude|anthropic)/i.
    `prefix` names `auto` (the routes decide) and `prefix-<tier>` each tier; a request naming one
    goes where it says. `prefix: null`: no such names."""

    prefix: str | None = Field(
        "claude-router",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        description="listed for `auto`, and with `-<tier>` for each tier (null: none)",
    )

    def names(self, tiers: Iterable[str]) -> dict[str, str]:
        """Listed name → "auto" or a tier."""
        if self.prefix is None:
            return {}
        return {self.prefix: "auto"} | {f"{self.prefix}-{tier}": tier for tier in tiers}


class Policy(Strict):
    version: Literal[1]
    models: dict[str, Tier] = Field(min_length=1)
    aliases: dict[str, str] = Field(default_factory=lambda: {"*": "auto"})
    routes: list[Route] = Field(min_length=1)
    escalation: Escalation = Escalation()
    allow_tier_header: bool = Field(False, description="let clients force a tier with `x-router-tier`")
    client_keys: list[SecretStr] = Field(default_factory=list, description="if set, clients must send one")
    store: str = "sqlite:///./.agent-router/state.db"
    store_required: bool = Field(
        True, description="false: serve on (degraded, /readyz 503) when the store cannot be used at start"
    )
    lanes: dict[str, Lane] = Field(
        default_factory=dict, description="lanes calls may ask for (router/core/live/lanes.py)"
    )
    discovery: Discovery = Field(default_factory=Discovery, description="names clients' model pickers keep")
    baseline: str | None = Field(
        default=None,
        description="the tier a call's cost and time are set against (default: the escalation chain's last)",
    )

    @model_validator(mode="after")
    def _lanes_valid(self) -> Policy:
        for name, lane in self.lanes.items():
            if name == "standard":
                raise ValueError("lanes.standard: 'standard' is the lane of calls that ask for none; pick another name")
            for tier, variant in lane.tiers.items():
                for role, ref in (("tier", tier), ("variant", variant)):
                    if ref not in self.models:
                        raise ValueError(
                            f"lanes.{name}.tiers: unknown {role} {ref!r} (tiers: {', '.join(self.models)})"
                        )
        return self

    @model_validator(mode="after")
    def _references_exist(self) -> Policy:
        routes = [r.model_dump(include={"name", "use", "hedge", "adaptive", "verify", "shadow"}) for r in self.routes]
        repeat = self.escalation.repeat
        problems = reference_problems(
            self.models, self.aliases, routes, self.escalation.to, repeat.tier if repeat is not None else None
        )
        if self.baseline is not None and self.baseline not in self.models:
            problems.append((("baseline",), f"unknown tier {self.baseline!r}"))
        if problems:
            raise ValueError("; ".join(f"{'.'.join(map(str, loc))}: {msg}" for loc, msg in problems))
        return self

    @property
    def baseline_tier(self) -> str | None:
        """The tier a call's cost and time are set against: `baseline`, else the chain's last tier."""
        chain = self.escalation.chain
        return self.baseline or (chain[-1] if chain else None)

    def resolve_alias(self, model: str) -> str | None:
        """Incoming model name → "auto" or a tier; exact names first, then tier names, then the names
        `discovery` lists, then globs."""
        if model in self.aliases:
            return self.aliases[model]
        if model in self.models:
            return model
        if (listed := self.discovery.names(self.models).get(model)) is not None:
            return listed
        for pattern, target in self.aliases.items():
            if fnmatch.fnmatchcase(model, pattern):
                return target
        return None

    def secrets(self) -> tuple[str, ...]:
        """Every secret in the policy, for redaction."""
        keys = [t.api_key.get_secret_value() for t in self.models.values() if t.api_key]
        keys += [k.get_secret_value() for k in self.client_keys]
        return tuple(k for k in keys if k and k != "none")
