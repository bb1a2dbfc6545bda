"""A policy's `routes`: a `Route` is what a call must look like (`When`) and the tier it goes to
(`use`), with what the route adds to its answers — repair, salvage, hedging (`Hedge`), adaptive
diversion (`Adaptive`), a verifier (`Verify`), shadow comparison (`Shadow`). The first route that
matches wins (router/policy/decide.py); the policy that lists them is router/policy/model.py.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from router.policy.strict import PositiveFloat, Strict

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class ToolsCondition(Strict):
    present: bool | None = None
    min_count: int | None = Field(None, ge=0)
    max_count: int | None = Field(None, ge=0)
    any_of: list[str] | None = Field(None, description="at least one of these tool names is offered")
    none_of: list[str] | None = Field(None, description="none of these tool names is offered")


class When(Strict):
    """All given conditions must hold. An empty `when` always matches."""

    tools: ToolsCondition | None = None
    min_prompt_tokens: int | None = Field(default=None, ge=0)
    max_prompt_tokens: int | None = Field(default=None, ge=0)
    last_role: list[Role] | None = None
    model: list[str] | None = Field(default=None, description="incoming model names; glob patterns allowed")
    headers: dict[str, str | list[str]] | None = Field(
        default=None,
        description="request header → value or values; glob patterns allowed; names case-insensitive",
    )
    stream: bool | None = None

    @field_validator("last_role", mode="before")
    @classmethod
    def _one_role(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("headers")
    @classmethod
    def _lower_headers(cls, v: dict[str, str | list[str]] | None) -> dict[str, list[str]] | None:
        if v is None:
            return None
        return {k.lower(): ([x] if isinstance(x, str) else x) for k, x in v.items()}


class Hedge(Strict):
    """Start a second tier when the routed one has produced nothing valid in time."""

    after: PositiveFloat = Field(default=0.5, description="seconds to wait for the routed tier first")
    tier: str | None = Field(default=None, description="tier to hedge with (default: the escalation tier)")


class Adaptive(Strict):
    """Divert a tool's calls from this route's tier while that tier fumbles the tool too often."""

    window: PositiveFloat = Field(default=600.0, description="seconds of history the mistake rate is read over")
    max_mistake_rate: float = Field(default=0.25, gt=0, le=1, description="divert above this rate")
    min_samples: int = Field(default=20, ge=1, description="answers needed before a rate counts")
    probe_every: int = Field(default=10, ge=2, description="one of every N diverted calls probes the tier again")
    to: str | None = Field(default=None, description="tier to divert to (default: the escalation tier)")


class Verify(Strict):
    """Check a tool call that passed the format checks, before the client gets it; a rejection is a
    `verifier_reject` mistake and escalates (whatever `escalation.on` lists: asking for a verifier is
    asking for its verdict to count)."""

    kind: Literal["judge", "agree", "logprobs", "score"] = Field(
        description="judge: a tier answers accept/reject; agree: n samples must agree; logprobs: token confidence; "
        "score: a tier's log-probability of the call given the prompt (one prefill, router/upstream/scoring.py)"
    )
    tier: str | None = Field(
        default=None, description="judge, score: the judging / scoring tier (default: the escalation tier)"
    )
    samples: int = Field(default=3, ge=2, le=8, description="agree: answers compared, the original included")
    temperature: float = Field(default=0.8, ge=0, le=2, description="agree: temperature of the extra samples")
    threshold: float = Field(default=-1.0, le=0, description="logprobs, score: reject when the measure is below this")
    measure: Literal["mean", "min"] = Field(default="mean", description="logprobs, score: mean or min token logprob")
    via: Literal["echo", "forced"] = Field(
        default="echo",
        description="score: echo = prompt logprobs from llama-cpp-python's completions endpoint; forced = the call "
        "generated under a grammar on llama.cpp's llama-server, each token's raw logprob (router/upstream/scoring.py)",
    )
    if_unsure: Literal["accept", "reject"] = Field(
        default="accept",
        description="when no verdict is possible (judge unreadable or failing, no logprobs, no samples)",
    )
    max_tokens: int = Field(default=64, ge=8, description="judge: max_tokens of its answer")


class Shadow(Strict):
    """Also send a share of this route's answered calls to a reference tier, in the background (the
    client never waits), have a judge compare the two answers, and keep the redacted sample for
    `agent-router qa` and the stats' `shadow` key (router/core/live/shadow.py). Calls answered by the
    reference tier itself are not shadowed."""

    rate: float = Field(default=0.05, ge=0, le=1, description="share of answered calls shadowed")
    tier: str | None = Field(default=None, description="reference tier (default: the escalation chain's last)")
    judge: str | None = Field(default=None, description="tier comparing the answers (default: the reference tier)")
    mode: Literal["judge", "record"] = Field(
        default="judge", description="judge: answer and compare now; record: keep the sample only, `qa` judges later"
    )
    max_tokens: int = Field(default=256, ge=16, description="max_tokens of the judge's answer")


class Route(Strict):
    name: str = Field(min_length=1)
    when: When = When()
    use: str = Field(description="tier name")
    repair: bool = Field(
        default=False, description="retry the same tier once with tool_choice pinned to the tool it fumbled"
    )
    salvage: bool = Field(
        default=True, description="a call written as text that validates becomes a tool call (no escalation)"
    )
    hedge: Hedge | None = None
    adaptive: Adaptive | None = None
    verify: Verify | None = None
    shadow: Shadow | None = None
