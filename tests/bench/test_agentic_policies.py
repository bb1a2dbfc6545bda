"""bench/agentic's configurations: every policy is valid, and the variants differ from
policies/local.yaml (the `routed` configuration, as is) in what they say they change, nothing else —
so a change to local.yaml that is not carried over shows here."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.agentic.run import CONFIGS, ROOT
from router.policy.loader import check_file

LOCAL = ROOT / "policies" / "local.yaml"


def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("config", CONFIGS)
def test_every_configuration_is_a_valid_policy(config: str) -> None:
    assert check_file(CONFIGS[config].policy) == []


def test_routed_is_local_yaml_as_is() -> None:
    assert CONFIGS["routed"].policy == LOCAL


@pytest.mark.parametrize("tier", ["fast", "full"])
def test_single_tier_configurations(tier: str) -> None:
    """fast-only / full-only: the same tiers, no session read in the background, answers read to
    their end (no loop cut); every call on the one tier, delivered as written (one attempt, no
    repeat handling: full-resample unused)."""
    expected = copy.deepcopy(_load(LOCAL))
    for model in expected["models"].values():
        if "sessions" in model:
            model["sessions"]["warm"] = False
        model.pop("cut_loops", None)
    expected["routes"] = [{"name": "all", "use": tier}]
    expected["escalation"] = {"max_attempts": 1, "on_exhausted": "deliver", "repeat": None}
    assert _load(CONFIGS[f"{tier}-only"].policy) == expected


@pytest.mark.parametrize(
    ("config", "key", "value"),
    [
        ("routed-judge", "verify", {"kind": "judge", "tier": "full"}),
        (
            "routed-score",
            "verify",
            {"kind": "score", "tier": "full", "via": "forced", "threshold": -0.67, "measure": "mean"},
        ),
        (
            "routed-adaptive",
            "adaptive",
            {"window": 1800.0, "max_mistake_rate": 0.25, "min_samples": 10, "probe_every": 5},
        ),
        ("routed-hedged", "hedge", {"after": 0.1}),
    ],
)
def test_routed_variants_add_one_key_to_the_tool_route(config: str, key: str, value: dict[str, Any]) -> None:
    expected = copy.deepcopy(_load(LOCAL))
    assert expected["routes"][0]["name"] == "tool-call"
    expected["routes"][0][key] = value
    assert _load(CONFIGS[config].policy) == expected


def test_routed_learned_adds_one_route_before_the_tool_route() -> None:
    """The route learned from the train half's runs (docs/agentic.md): a task's opening turn —
    tools offered, the agent's own message last — on full; the rest as local.yaml routes it."""
    expected = copy.deepcopy(_load(LOCAL))
    opening = {"name": "opening-call", "when": {"tools": {"present": True}, "last_role": "user"}, "use": "full"}
    expected["routes"].insert(0, opening)
    assert _load(CONFIGS["routed-learned"].policy) == expected


def test_the_learned_route_takes_the_opening_turn_only() -> None:
    """On the chat-completions body every client API becomes: the opening turn (the agent's message
    last) goes to full; a turn after a tool result (role tool) to fast, as before."""
    from router.policy.decide import decide, features_of
    from router.policy.loader import load_policy

    policy = load_policy(CONFIGS["routed-learned"].policy)
    tools = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]
    opening = {"model": "auto", "tools": tools, "messages": [{"role": "user", "content": "What is in /docs?"}]}
    after = {**opening, "messages": [*opening["messages"],
             {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                                                                  "function": {"name": "ls", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "c1", "content": "notes.md"}]}  # fmt: skip
    assert decide(features_of(opening, {}), policy).route == "opening-call"
    assert decide(features_of(opening, {}), policy).tier == "full"
    assert decide(features_of(after, {}), policy).tier == "fast"
