"""The pydantic policy models: defaults, normalisation, strictness, references."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from router.policy.model import MISTAKE_KINDS, Escalation, Policy, Tier
from router.policy.references import reference_problems
from router.policy.route import ToolsCondition, When


def minimal(**extra: Any) -> dict[str, Any]:
    return {
        "version": 1,
        "models": {
            "fast": {"model": "openai/small", "api_base": "http://h:1/v1"},
            "full": {"model": "anthropic/claude-opus-4-6", "api_key": "sk-ant-xyz"},
        },
        "routes": [{"name": "default", "use": "full"}],
        **extra,
    }


def test_defaults() -> None:
    p = Policy.model_validate(minimal())
    assert p.aliases == {"*": "auto"}
    assert p.allow_tier_header is False
    assert p.client_keys == []
    assert p.store == "sqlite:///./.agent-router/state.db"
    assert p.escalation.chain == ()
    moves_on = ("agent_reported_error", "tier_open", "context_exceeded")  # known after delivery; move on anyway
    assert p.escalation.on == [k for k in MISTAKE_KINDS if k not in moves_on]
    assert (p.escalation.max_attempts, p.escalation.deadline) == (3, 300.0)
    assert p.escalation.after_agent_error.sticky_calls == 3
    fast = p.models["fast"]
    assert (fast.timeouts.connect, fast.timeouts.first_token, fast.timeouts.total) == (5.0, 60.0, 600.0)
    assert (fast.max_connections, fast.warm_connections, fast.params) == (64, 2, {})
    assert p.routes[0].when == When()


def test_tier_provider_and_upstream_model() -> None:
    assert Tier(model="openai/gemma-3-270m", api_base="http://h/v1").upstream_model == "gemma-3-270m"
    assert Tier(model="openai/org/model:tag", api_base="http://h/v1").upstream_model == "org/model:tag"
    anthropic = Tier(model="anthropic/claude-opus-4-6")
    assert (anthropic.provider, anthropic.upstream_model) == ("anthropic", "anthropic/claude-opus-4-6")
    bare = Tier(model="gpt-4o", api_base="http://h/v1")
    assert (bare.provider, bare.upstream_model) == ("openai", "gpt-4o")


def test_tier_context_window() -> None:
    assert Tier(model="openai/x", api_base="http://h/v1").context_window is None  # what the server reports
    assert Tier(model="openai/x", api_base="http://h/v1", context_window=32768).context_window == 32768
    for bad in (0, -1, "big"):
        with pytest.raises(ValidationError):
            Tier(model="openai/x", api_base="http://h/v1", context_window=bad)


def test_a_tier_asks_for_its_providers_fast_mode_only() -> None:
    """`speed` (Anthropic's fast mode) on anthropic/* tiers, `service_tier` on openai/* tiers: a tier
    is never configured to send a field its API does not take."""
    assert Tier(model="anthropic/claude-opus-4-6", speed="fast").speed == "fast"
    assert Tier(model="openai/gpt-5", api_base="http://h/v1", service_tier="priority").service_tier == "priority"
    assert Tier(model="anthropic/claude-opus-4-6").speed is None  # standard speed unless asked
    for bad, message in (
        ({"model": "openai/gpt-5", "api_base": "http://h/v1", "speed": "fast"}, "only anthropic/"),
        ({"model": "openai/gpt-5", "api_base": "http://h/v1", "params": {"speed": "fast"}}, "only anthropic/"),
        ({"model": "gemini/gemini-2.5-pro", "defaults": {"speed": "fast"}}, "only anthropic/"),
        ({"model": "anthropic/claude-opus-4-6", "service_tier": "priority"}, "openai/"),
        ({"model": "anthropic/claude-opus-4-6", "speed": "turbo"}, "speed"),
    ):
        with pytest.raises(ValidationError, match=message):
            Tier.model_validate(bad)


def test_openai_tier_needs_api_base() -> None:
    with pytest.raises(ValidationError, match="needs api_base"):
        Tier(model="openai/x")
    with pytest.raises(ValidationError, match="needs api_base"):
        Tier(model="bare-model-id")


def test_extra_keys_forbidden_everywhere() -> None:
    for bad in (
        minimal(extra=1),
        minimal(models={"f": {"model": "a/b", "nope": 1}}),
        minimal(routes=[{"name": "d", "use": "full", "when": {"tool": {}}}]),
        minimal(escalation={"after_agent_error": {"sticky": 1}}),
    ):
        with pytest.raises(ValidationError) as info:
            Policy.model_validate(bad)
        assert any(e["type"] == "extra_forbidden" for e in info.value.errors())


def test_when_normalises_roles_and_headers() -> None:
    w = When.model_validate({"last_role": "user", "headers": {"X-Team": "ops", "X-Env": ["a", "b*"]}})
    assert w.last_role == ["user"]
    assert w.headers == {"x-team": ["ops"], "x-env": ["a", "b*"]}
    with pytest.raises(ValidationError):
        When.model_validate({"last_role": ["robot"]})
    with pytest.raises(ValidationError):
        ToolsCondition.model_validate({"max_count": -1})


def test_escalation_chain() -> None:
    assert Escalation(to="full").chain == ("full",)
    assert Escalation(to=["mid", "full"]).chain == ("mid", "full")
    assert Escalation(to=["mid", "full"]).beyond("mid") == ("full",)
    assert Escalation(to=["mid", "full"]).beyond("fast") == ("mid", "full")  # a tier off the chain: all of it
    assert Escalation().beyond("fast") == ()
    with pytest.raises(ValidationError):
        Escalation.model_validate({"on": ["not_a_kind"]})
    with pytest.raises(ValidationError):
        Escalation.model_validate({"max_attempts": 0})


def test_models_are_frozen() -> None:
    p = Policy.model_validate(minimal())
    with pytest.raises(ValidationError):
        p.store = "memory://"  # type: ignore[misc]


def test_reference_validator_lists_every_problem() -> None:
    bad = minimal(
        aliases={"x": "nope"},
        routes=[{"name": "a", "use": "gone"}, {"name": "a", "use": "full"}],
        escalation={"to": ["full", "huge"]},
    )
    with pytest.raises(ValidationError) as info:
        Policy.model_validate(bad)
    (err,) = info.value.errors()
    assert err["msg"] == (
        "Value error, aliases.x: unknown tier 'nope' (tiers: fast, full); "
        "routes.0.use: unknown tier 'gone' (route 'a'); "
        "routes.1.name: duplicate route name 'a' (first used by routes.0); "
        "escalation.to.1: unknown tier 'huge'"
    )


def test_route_options_reference_tiers() -> None:
    bad = minimal(routes=[{"name": "d", "use": "full", "hedge": {"tier": "x"}, "adaptive": {"to": "y"}}])
    with pytest.raises(ValidationError) as info:
        Policy.model_validate(bad)
    assert info.value.errors()[0]["msg"] == (
        "Value error, routes.0.hedge.tier: unknown tier 'x' (route 'd'); "
        "routes.0.adaptive.to: unknown tier 'y' (route 'd')"
    )


def test_reference_problems_skips_wrong_types() -> None:
    routes = [{"use": 5}, {"name": "r"}, "junk", {"name": "h", "use": "fast", "hedge": {"tier": 3}, "adaptive": 1}]
    assert reference_problems(["fast"], {"a": 3, "b": "auto"}, routes, {"x": 1}) == []
    assert reference_problems(["fast"], {}, [], "full") == [(("escalation", "to"), "unknown tier 'full'")]


def test_resolve_alias_order() -> None:
    p = Policy.model_validate(minimal(aliases={"claude-*": "full", "*": "auto", "fast": "full", "m": "fast"}))
    assert p.resolve_alias("m") == "fast"  # exact alias
    assert p.resolve_alias("fast") == "full"  # exact alias beats the tier name
    assert p.resolve_alias("full") == "full"  # tier name
    assert p.resolve_alias("claude-opus") == "full"  # globs in file order
    assert p.resolve_alias("gpt-4o") == "auto"
    strict = Policy.model_validate(minimal(aliases={"gpt-4o": "auto"}))
    assert strict.resolve_alias("other") is None


def test_secrets_for_redaction() -> None:
    p = Policy.model_validate(minimal(client_keys=["client-secret-1", ""]))
    assert set(p.secrets()) == {"sk-ant-xyz", "client-secret-1"}
    none_key = Policy.model_validate(
        minimal(models={"f": {"model": "a/b", "api_key": "none"}}, routes=[{"name": "d", "use": "f"}])
    )
    assert none_key.secrets() == ()
    assert "sk-ant-xyz" not in repr(p)
    assert "client-secret-1" not in str(p.model_dump())
