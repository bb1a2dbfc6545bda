"""`decide` as a table of inputs → decisions, and `features_of` on realistic chat bodies."""

from __future__ import annotations

from typing import Any

import pytest

from router.errors import NotFound
from router.policy.decide import CHARS_PER_TOKEN, Decision, Features, Live, decide, features_of, fits
from router.policy.loader import parse_policy
from router.policy.model import Policy

POLICY_YAML = """\
version: 1
models:
  fast: {model: openai/small, api_base: http://127.0.0.1:1/v1}
  full: {model: openai/big, api_base: http://127.0.0.1:2/v1}
  code: {model: openai/coder, api_base: http://127.0.0.1:3/v1}
aliases:
  router-full: full
  "claude-*": full
  "*": auto
routes:
  - name: ops-header
    when: {headers: {X-Team: [ops, "sre-*"]}}
    use: code
  - name: mini-models
    when: {model: ["*-mini", "tiny-*"]}
    use: fast
  - name: shell-tools
    when: {tools: {any_of: [bash, shell]}}
    use: code
  - name: many-tools
    when: {tools: {min_count: 9}}
    use: full
  - name: simple-tool-call
    when:
      tools: {present: true, max_count: 8, none_of: [deploy]}
      max_prompt_tokens: 100
      last_role: [user, tool]
    use: fast
  - name: long
    when: {min_prompt_tokens: 1000}
    use: full
  - name: streaming-chat
    when: {stream: true, tools: {present: false}, last_role: user}
    use: fast
  - name: default
    use: full
"""


@pytest.fixture(scope="module")
def policy() -> Policy:
    return parse_policy(POLICY_YAML, "decide.yaml", {})


def tools(*names: str) -> tuple[str, ...]:
    return names


CASES: list[tuple[str, Features, Live, tuple[str, str]]] = [
    # (case id, features, live state, (tier, route))
    ("no tools → default", Features("gpt-4o", last_role="user"), Live(), ("full", "default")),
    (
        "few tools, short → fast",
        Features("gpt-4o", tools("read", "write"), 50, "user"),
        Live(),
        ("fast", "simple-tool-call"),
    ),
    ("after a tool result → fast", Features("gpt-4o", tools("read"), 50, "tool"), Live(), ("fast", "simple-tool-call")),
    (
        "last role assistant → not simple",
        Features("gpt-4o", tools("read"), 50, "assistant"),
        Live(),
        ("full", "default"),
    ),
    (
        "prompt at the max bound → fast",
        Features("gpt-4o", tools("read"), 100, "user"),
        Live(),
        ("fast", "simple-tool-call"),
    ),
    ("prompt over the bound → default", Features("gpt-4o", tools("read"), 101, "user"), Live(), ("full", "default")),
    ("long prompt at min bound → long", Features("gpt-4o", (), 1000, "user"), Live(), ("full", "long")),
    (
        "8 tools → fast",
        Features("gpt-4o", tuple(f"t{i}" for i in range(8)), 10, "user"),
        Live(),
        ("fast", "simple-tool-call"),
    ),
    (
        "9 tools → many-tools",
        Features("gpt-4o", tuple(f"t{i}" for i in range(9)), 10, "user"),
        Live(),
        ("full", "many-tools"),
    ),
    ("any_of matches → code", Features("gpt-4o", tools("read", "bash"), 10, "user"), Live(), ("code", "shell-tools")),
    (
        "none_of blocks simple route",
        Features("gpt-4o", tools("read", "deploy"), 10, "user"),
        Live(),
        ("full", "default"),
    ),
    (
        "streaming chat without tools",
        Features("gpt-4o", (), 10, "user", stream=True),
        Live(),
        ("fast", "streaming-chat"),
    ),
    (
        "streaming with tools is not streaming-chat",
        Features("gpt-4o", tools("x"), 500, "user", True),
        Live(),
        ("full", "default"),
    ),
    ("incoming model glob *-mini", Features("gpt-4o-mini", tools("read"), 50, "user"), Live(), ("fast", "mini-models")),
    ("incoming model glob tiny-*", Features("tiny-llama"), Live(), ("fast", "mini-models")),
    ("header condition, exact", Features("gpt-4o", headers={"x-team": "ops"}), Live(), ("code", "ops-header")),
    ("header condition, glob", Features("gpt-4o", headers={"x-team": "sre-eu"}), Live(), ("code", "ops-header")),
    ("header condition, no match", Features("gpt-4o", headers={"x-team": "dev"}), Live(), ("full", "default")),
    (
        "first match wins: header before tools",
        Features("gpt-4o-mini", tools("bash"), 10, "user", headers={"x-team": "ops"}),
        Live(),
        ("code", "ops-header"),
    ),
    (
        "first match wins: model before tools",
        Features("gpt-4o-mini", tools("bash"), 10, "user"),
        Live(),
        ("fast", "mini-models"),
    ),
    (
        "alias → tier, routes skipped",
        Features("router-full", tools("read"), 10, "user"),
        Live(),
        ("full", "alias:router-full"),
    ),
    (
        "glob alias → tier",
        Features("claude-sonnet", tools("read"), 10, "user"),
        Live(),
        ("full", "alias:claude-sonnet"),
    ),
    ("tier name as model", Features("code", tools("read"), 10, "user"), Live(), ("code", "alias:code")),
    ("sticky session", Features("gpt-4o", tools("read"), 10, "user"), Live(sticky_tier="full"), ("full", "sticky")),
    ("alias beats sticky", Features("fast"), Live(sticky_tier="full"), ("fast", "alias:fast")),
    (
        "tier header ignored when not allowed",
        Features("gpt-4o", headers={"x-router-tier": "fast"}),
        Live(),
        ("full", "default"),
    ),
]


@pytest.mark.parametrize(("features", "live", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decide_table(policy: Policy, features: Features, live: Live, expected: tuple[str, str]) -> None:
    decision = decide(features, policy, live)
    assert (decision.tier, decision.route) == expected
    assert decision.reason


def test_decide_is_pure(policy: Policy) -> None:
    before = policy.model_dump()
    f = Features("gpt-4o", tools("read"), 10, "user")
    assert (
        decide(f, policy)
        == decide(f, policy)
        == Decision("fast", "simple-tool-call", "first matching route 'simple-tool-call'")
    )
    assert policy.model_dump() == before


def test_unknown_model_is_not_found() -> None:
    strict = parse_policy(POLICY_YAML.replace('  "*": auto\n', ""), "p.yaml", {})
    with pytest.raises(NotFound) as info:
        decide(Features("llama-9000"), strict)
    assert info.value.http_status == 404
    assert info.value.param == "model"
    assert decide(Features("claude-3"), strict).route == "alias:claude-3"
    assert decide(Features("code"), strict).route == "alias:code"


def test_no_catch_all_route_is_not_found() -> None:
    text = POLICY_YAML[: POLICY_YAML.index("  - name: default")]
    p = parse_policy(text, "p.yaml", {})
    with pytest.raises(NotFound):
        decide(Features("gpt-4o", last_role="assistant"), p)


def test_tier_header_when_allowed(policy: Policy) -> None:
    allowing = policy.model_copy(update={"allow_tier_header": True})
    d = decide(Features("gpt-4o", tools("read"), 10, "user", headers={"x-router-tier": "code"}), allowing)
    assert (d.tier, d.route) == ("code", "header")
    # the header also beats an alias and a sticky session
    d = decide(Features("router-full", headers={"x-router-tier": "fast"}), allowing, Live(sticky_tier="full"))
    assert (d.tier, d.route) == ("fast", "header")
    with pytest.raises(NotFound) as info:
        decide(Features("gpt-4o", headers={"x-router-tier": "nope"}), allowing)
    assert info.value.param == "x-router-tier"
    # unknown models are refused before the header is looked at
    strict = allowing.model_copy(update={"aliases": {"gpt-4o": "auto"}})
    with pytest.raises(NotFound) as info:
        decide(Features("other", headers={"x-router-tier": "fast"}), strict)
    assert info.value.param == "model"


def chat_body(**extra: Any) -> dict[str, Any]:
    return {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "You are a coding agent." * 10},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Fix the failing test in tests/test_x.py."},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "text", "text": "Be brief."},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "tests/test_x.py"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "def test(): ..."}]},
        ],
        "tools": [
            {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}},
        ],
        **extra,
    }


def test_features_of_chat_body() -> None:
    body = chat_body(stream=True)
    f = features_of(body, {"x-team": "ops"})
    texts = ["You are a coding agent." * 10, "Fix the failing test in tests/test_x.py.", "Be brief.", "def test(): ..."]
    assert f == Features(
        model="gpt-4o",
        tool_names=("read_file", "bash"),
        prompt_tokens=sum(map(len, texts)) // CHARS_PER_TOKEN,
        last_role="tool",
        stream=True,
        headers={"x-team": "ops"},
    )


def test_features_of_minimal_and_odd_bodies() -> None:
    assert features_of({}, {}) == Features(model="")
    f = features_of({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": None}, {})
    assert (f.tool_names, f.prompt_tokens, f.last_role, f.stream) == ((), 0, "user", False)
    # Anthropic-style / Responses-style flat tool definitions use a top-level name.
    f = features_of({"model": "m", "messages": [], "tools": [{"name": "grep", "input_schema": {}}, "junk"]}, {})
    assert (f.tool_names, f.last_role) == (("grep",), None)


def test_features_feed_decide(policy: Policy) -> None:
    body = chat_body()
    assert decide(features_of(body, {}), policy).route == "shell-tools"
    body["tools"] = body["tools"][:1]
    d = decide(features_of(body, {}), policy)
    assert (d.tier, d.route) == ("fast", "simple-tool-call")
    assert decide(features_of(body, {"x-team": "sre-1"}), policy).route == "ops-header"
    body["messages"][0]["content"] = "x" * 4 * 1000
    assert decide(features_of(body, {}), policy).route == "long"


FIT_YAML = """\
version: 1
models:
  fast: {model: openai/small, api_base: http://127.0.0.1:1/v1}
  full: {model: openai/big, api_base: http://127.0.0.1:2/v1}
  long: {model: openai/long, api_base: http://127.0.0.1:3/v1}
  side: {model: openai/side, api_base: http://127.0.0.1:4/v1}
aliases: {"*": auto, router-fast: fast}
routes:
  - name: tools
    when: {tools: {present: true}}
    use: fast
  - name: default
    use: full
escalation: {to: [full, long]}
"""
WINDOWS = {"fast": 4096, "full": 32768, "long": 131072, "side": 1_000_000}


@pytest.fixture(scope="module")
def fit_policy() -> Policy:
    return parse_policy(FIT_YAML, "fit.yaml", {})


FITS: list[tuple[str, Features, dict[str, int], str]] = [
    # (case id, features, windows known, tier)
    ("fits its tier", Features("m", tools("x"), 4000, "user"), WINDOWS, "fast"),
    ("fills it: no room to answer", Features("m", tools("x"), 4096, "user"), WINDOWS, "full"),
    ("tool definitions count too", Features("m", tools("x"), 3000, "user", tool_tokens=1500), WINDOWS, "full"),
    ("on to the first that fits", Features("m", tools("x"), 40_000, "user"), WINDOWS, "long"),
    ("never a tier off the chain", Features("m", tools("x"), 500_000, "user"), WINDOWS, "long"),
    ("none fits: the largest", Features("m", (), 200_000, "user"), WINDOWS, "long"),
    ("a window not known fits", Features("m", tools("x"), 5000, "user"), {"fast": 4096, "long": 8192}, "full"),
    ("nothing known: routed", Features("m", tools("x"), 10**6, "user"), {}, "fast"),
    ("an alias's tier moves too", Features("router-fast", (), 5000, "user"), WINDOWS, "full"),
    ("the chain's last stays", Features("m", (), 200_000, "user"), {"full": 32768, "long": 8192}, "full"),
]


@pytest.mark.parametrize(("features", "windows", "tier"), [c[1:] for c in FITS], ids=[c[0] for c in FITS])
def test_a_prompt_goes_to_a_tier_it_fits(
    fit_policy: Policy, features: Features, windows: dict[str, int], tier: str
) -> None:
    decision = decide(features, fit_policy, Live(windows=windows))
    assert decision.tier == tier
    routed = decide(features, fit_policy)
    assert decision.route == routed.route  # the route stays the one that matched; only the tier moves
    if tier != routed.tier:
        assert f"does not fit {routed.tier!r}" in decision.reason


def test_fits() -> None:
    assert fits(4095, 4096) and not fits(4096, 4096) and fits(10**9, None)


def test_beyond_is_the_escalation_chain_after_a_tier(fit_policy: Policy) -> None:
    chain = fit_policy.escalation
    assert (chain.beyond("fast"), chain.beyond("full"), chain.beyond("long")) == (("full", "long"), ("long",), ())
