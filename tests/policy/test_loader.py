"""The policy loader: shipped files load; bad files give every error with the right file:line."""

from __future__ import annotations

import re
import textwrap
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from router.policy.loader import PolicyError, check_file, load_policy, parse_policy
from router.policy.model import AfterAgentError, Escalation, Policy, Sessions

ROOT = Path(__file__).resolve().parents[2]
POLICIES = sorted((ROOT / "policies").rglob("*.yaml"))
CANARY = "sk-canary-7f3a9c1e5b"

GOOD = """\
version: 1
models:
  fast:
    model: openai/small
    api_base: http://127.0.0.1:8081/v1
  full:
    model: anthropic/claude-opus-4-6
routes:
  - name: tools
    when: {tools: {present: true}}
    use: fast
  - name: default
    use: full
"""


def errors_of(text: str, env: dict[str, str] | None = None, filename: str = "p.yaml") -> list[str]:
    with pytest.raises(PolicyError) as info:
        parse_policy(textwrap.dedent(text), filename, env or {})
    assert str(info.value) == "\n".join(info.value.errors)
    assert isinstance(info.value, ValueError)
    return info.value.errors


def line_of(text: str, needle: str, nth: int = 1) -> int:
    hits = [i for i, line in enumerate(textwrap.dedent(text).splitlines(), 1) if needle in line]
    return hits[nth - 1]


def test_shipped_policies_are_found() -> None:
    names = {p.relative_to(ROOT / "policies").as_posix() for p in POLICIES}
    assert {
        "default.yaml",
        "local.yaml",
        "examples/fake.yaml",
        "examples/anthropic-full.yaml",
        "examples/lanes.yaml",
        "examples/fast-mode.yaml",
    } <= names


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.name)
def test_every_shipped_policy_loads(path: Path) -> None:
    env = {"ANTHROPIC_API_KEY": CANARY}
    assert check_file(path, env) == []
    policy = load_policy(path, env)
    assert policy.routes[-1].when.model_dump(exclude_defaults=True) == {}, "last route is a catch-all"
    assert set(policy.escalation.chain) <= set(policy.models)


def test_default_policy_loads_without_any_env() -> None:
    policy = load_policy(ROOT / "policies" / "default.yaml", env={})
    assert set(policy.models) == {"fast", "full"}
    assert policy.models["fast"].api_base == "http://127.0.0.1:8081/v1"
    fast_key = policy.models["fast"].api_key
    assert fast_key is not None and fast_key.get_secret_value() == "none"
    assert [r.name for r in policy.routes] == ["simple-tool-call", "long-context", "default"]
    assert policy.escalation.chain == ("full",)
    assert policy.allow_tier_header is False


def _field_names(model: type[BaseModel], seen: set[str]) -> set[str]:
    names: set[str] = set()
    for name, field in model.model_fields.items():
        names.add(name)
        for tp in _types_in(field.annotation):
            if isinstance(tp, type) and issubclass(tp, BaseModel) and tp.__name__ not in seen:
                seen.add(tp.__name__)
                names |= _field_names(tp, seen)
    return names


def _types_in(tp: Any) -> list[Any]:
    args = typing.get_args(tp)
    return [tp] if not args else [t for a in args for t in _types_in(a)]


def test_default_policy_documents_every_key() -> None:
    text = (ROOT / "policies" / "default.yaml").read_text()
    documented = set(re.findall(r"\b([a-z_]+):", text))
    missing = _field_names(Policy, set()) - documented
    assert not missing, f"policies/default.yaml does not explain {sorted(missing)}"


def test_default_policy_commented_defaults_are_the_defaults() -> None:
    text = (ROOT / "policies" / "default.yaml").read_text()
    uncommented = text.replace("    #   patterns:\n", "    patterns:\n").replace("    #     - '", "      - '")
    assert uncommented != text
    documented = parse_policy(uncommented, "default.yaml", {}).escalation.after_agent_error
    assert documented == AfterAgentError()
    assert parse_policy(text, "default.yaml", {}).escalation == Escalation(to="full")
    # the commented route options are valid too
    options = text.replace("    # repair: true", "    repair: true").replace("    # hedge:", "    hedge:")
    options = options.replace("    # adaptive:", "    adaptive:")
    route = parse_policy(options, "default.yaml", {}).routes[0]
    assert route.repair and route.hedge is not None and route.adaptive is not None


def test_local_policy_takes_its_tiers_from_env() -> None:
    """What `up` sets for each tier (router/commands/tiers.py's Tier.environment)."""
    path = ROOT / "policies" / "local.yaml"
    policy = load_policy(path, {})
    assert policy.models["fast"].api_base == "http://127.0.0.1:8081/v1"
    assert policy.models["full"].api_base == policy.models["full-resample"].api_base == "http://127.0.0.1:8082/v1"
    assert policy.models["fast"].upstream_model == "qwen2.5-coder-0.5b"
    assert policy.models["fast"].sessions.slots == policy.models["full"].sessions.slots == 4
    assert policy.models["fast"].sessions.warm and policy.models["full"].sessions.warm
    vllm = {"FULL_MODEL": "Qwen/Qwen2.5-Coder-32B-Instruct", "FULL_API_BASE": "http://gpu:8000/v1",
            "FULL_SLOTS": "0", "FULL_WARM": "false"}  # fmt: skip
    theirs = load_policy(path, vllm)
    for name in ("full", "full-resample"):
        assert theirs.models[name].upstream_model == "Qwen/Qwen2.5-Coder-32B-Instruct"
        assert theirs.models[name].api_base == "http://gpu:8000/v1"
    assert theirs.models["full"].sessions.slots == 0 and not theirs.models["full"].sessions.warm


def test_local_policys_repeats_run_on_a_sampled_full_that_nothing_routes_to() -> None:
    """Both tiers greedy, a repeat resampled on them would fail the same way: full-resample is full's
    model and server, sampled, pinning no slot of the server full pins, and only repeats run on it."""
    policy = load_policy(ROOT / "policies" / "local.yaml", {})
    full, variant = policy.models["full"], policy.models["full-resample"]
    assert policy.models["fast"].pinned_temperature == full.pinned_temperature == 0
    assert variant.pinned_temperature == 0.7 and variant.sessions == Sessions()
    same = {"sessions", "params"}
    assert variant.model_dump(exclude=same) == full.model_dump(exclude=same)
    assert policy.escalation.repeat is not None and policy.escalation.repeat.tier == "full-resample"
    assert "full-resample" not in policy.escalation.chain and "full-resample" not in repr(policy.routes)


def test_anthropic_example_needs_its_key() -> None:
    path = ROOT / "policies" / "examples" / "anthropic-full.yaml"
    errors = check_file(path, {})
    assert len(errors) == 1
    assert re.fullmatch(
        rf"{re.escape(str(path))}:\d+: models\.full\.api_key: environment variable "
        r"ANTHROPIC_API_KEY is not set.*",
        errors[0],
    )
    line = int(errors[0].split(":")[1])
    assert "${ANTHROPIC_API_KEY}" in path.read_text().splitlines()[line - 1]


def test_good_policy_parses() -> None:
    policy = parse_policy(GOOD, "p.yaml", {})
    assert isinstance(policy, Policy)
    assert policy.aliases == {"*": "auto"}


def test_unknown_key_with_line_and_suggestion() -> None:
    text = GOOD.replace("    model: openai/small\n", "    model: openai/small\n    modle: typo\n")
    errors = errors_of(text)
    assert errors == [f"p.yaml:{line_of(text, 'modle')}: models.fast.modle: unknown key 'modle'; did you mean 'model'?"]


def test_unknown_top_level_key_lists_allowed_keys() -> None:
    text = GOOD + "colour: blue\n"
    (error,) = errors_of(text)
    assert error.startswith(f"p.yaml:{line_of(text, 'colour')}: colour: unknown key 'colour' (allowed: version,")


def test_wrong_type() -> None:
    text = GOOD.replace(
        "    api_base: http://127.0.0.1:8081/v1\n",
        "    api_base: http://127.0.0.1:8081/v1\n    max_connections: lots\n",
    )
    (error,) = errors_of(text)
    assert error.startswith(
        f"p.yaml:{line_of(text, 'lots')}: models.fast.max_connections: Input should be a valid integer"
    )


def test_union_field_gives_one_line() -> None:
    text = GOOD + "escalation:\n  to: {tier: full}\n"
    (error,) = errors_of(text)
    assert error == (
        f"p.yaml:{line_of(text, 'to:')}: escalation.to: Input should be a valid string or Input should be a valid list"
    )


def test_bad_list_item_and_literal() -> None:
    text = GOOD.replace("when: {tools: {present: true}}", "when: {last_role: [user, robot]}")
    text += "escalation:\n  on: [invalid_json,\n       bogus]\n"
    errors = errors_of(text)
    assert len(errors) == 2
    assert errors[0].startswith(f"p.yaml:{line_of(text, 'robot')}: routes.0.when.last_role.1: Input should be")
    assert errors[1].startswith(f"p.yaml:{line_of(text, 'bogus')}: escalation.on.1: Input should be")


def test_missing_required_keys() -> None:
    text = "version: 1\nmodels:\n  fast:\n    api_base: http://x/v1\n"
    errors = errors_of(text)
    assert "p.yaml:3: models.fast.model: missing required key 'model'" in errors
    assert "p.yaml:1: routes: missing required key 'routes'" in errors


def test_model_level_validator_message() -> None:
    text = GOOD.replace("    api_base: http://127.0.0.1:8081/v1\n", "")
    (error,) = errors_of(text)
    assert error == (
        f"p.yaml:{line_of(text, 'fast:')}: models.fast: an openai/<id> tier needs api_base "
        "(the OpenAI-compatible server's /v1 URL)"
    )


def test_unknown_tier_references_point_at_each_item() -> None:
    text = GOOD + textwrap.dedent("""\
        aliases:
          "*": auto
          gpt-4.1: medium
        escalation:
          to: [full, huge]
        """)
    text = text.replace("    use: full\n", "    use: fulll\n")
    errors = errors_of(text)
    assert errors == [
        f"p.yaml:{line_of(text, 'fulll')}: routes.1.use: unknown tier 'fulll' (route 'default')",
        f"p.yaml:{line_of(text, 'gpt-4.1')}: aliases.gpt-4.1: unknown tier 'medium' (tiers: fast, full)",
        f"p.yaml:{line_of(text, 'huge')}: escalation.to.1: unknown tier 'huge'",
    ]


def test_route_option_tier_references() -> None:
    text = GOOD.replace(
        "    use: fast\n", "    use: fast\n    hedge: {after: 0.2, tier: fulll}\n    adaptive:\n      to: nope\n"
    )
    assert errors_of(text) == [
        f"p.yaml:{line_of(text, 'fulll')}: routes.0.hedge.tier: unknown tier 'fulll' (route 'tools')",
        f"p.yaml:{line_of(text, 'nope')}: routes.0.adaptive.to: unknown tier 'nope' (route 'tools')",
    ]
    good = parse_policy(text.replace("fulll", "full").replace("nope", "full"), "p.yaml", {})
    hedge, adaptive = good.routes[0].hedge, good.routes[0].adaptive
    assert hedge is not None and adaptive is not None
    assert (hedge.after, hedge.tier, adaptive.to) == (0.2, "full", "full")


def test_duplicate_route_names() -> None:
    text = GOOD.replace("name: default", "name: tools")
    (error,) = errors_of(text)
    assert (
        error == f"p.yaml:{line_of(text, 'name: tools', 2)}: routes.1.name: duplicate route name 'tools' "
        "(first used by routes.0)"
    )


def test_duplicate_yaml_keys() -> None:
    text = GOOD + "store: memory://\nstore: redis://127.0.0.1:6379/0\n"
    text = text.replace("  full:\n", "  full:\n    model: openai/other\n")
    errors = errors_of(text)
    assert errors == [
        f"p.yaml:{line_of(text, 'model: anthropic')}: models.full.model: duplicate key 'model' "
        f"(first at line {line_of(text, 'openai/other')})",
        f"p.yaml:{line_of(text, 'store: redis')}: store: duplicate key 'store' "
        f"(first at line {line_of(text, 'store: memory')})",
    ]


def test_duplicate_tier_names() -> None:
    text = GOOD.replace("  full:\n", "  fast:\n    model: x/y\n  full:\n")
    (error,) = errors_of(text)
    assert error == f"p.yaml:{line_of(text, 'fast:', 2)}: models.fast: duplicate key 'fast' (first at line 3)"


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("version: 1\nmodels:\n  fast: [\n", 4, "expected the node content"),
        ("version: 1\nmodels:\n\tfast: {}\n", 3, "found character '\\t' that cannot start any token"),
        ("version: 1\n  models: x\n", 2, "mapping values are not allowed here"),
        ("a: 1\n---\nb: 2\n", 2, "expected a single document"),
    ],
)
def test_yaml_syntax_errors(text: str, line: int, problem: str) -> None:
    (error,) = errors_of(text)
    assert error.startswith(f"p.yaml:{line}: YAML syntax error: ")
    assert problem in error


def test_unsafe_tags_are_refused() -> None:
    text = GOOD + "store: !!python/object/apply:os.system [echo pwned]\nallow_tier_header: !custom yes\n"
    errors = errors_of(text)
    assert errors == [
        f"p.yaml:{line_of(text, 'pwned')}: store: unsupported YAML tag "
        "'tag:yaml.org,2002:python/object/apply:os.system'",
        f"p.yaml:{line_of(text, '!custom')}: allow_tier_header: YAML error: could not determine a constructor for "
        "the tag '!custom'",
    ]


def test_control_characters() -> None:
    assert errors_of("version: 1\nstore: a\x07b\n") == ["p.yaml:2: YAML error: special characters are not allowed"]


def test_yaml_1_1_booleans_are_strings() -> None:
    # `on:` must stay the key "on" (YAML 1.1 would read it as True); `yes` is still accepted as a bool
    text = GOOD.replace("present: true", "present: yes") + "escalation:\n  on: [timeout]\n  to: full\n"
    policy = parse_policy(text, "p.yaml", {})
    assert policy.escalation.on == ["timeout"]
    assert policy.routes[0].when.tools is not None and policy.routes[0].when.tools.present is True


def test_empty_and_non_mapping_files() -> None:
    assert errors_of("") == ["p.yaml:1: the policy file is empty"]
    assert errors_of("# nothing\n") == ["p.yaml:1: the policy file is empty"]
    (error,) = errors_of("- a\n- b\n")
    assert error.startswith("p.yaml:1: Input should be a valid dictionary")


def test_env_interpolation() -> None:
    text = GOOD.replace("http://127.0.0.1:8081/v1", "http://${HOST:-127.0.0.1}:${PORT}/v1${SUFFIX:-}")
    text = text.replace(
        "model: anthropic/claude-opus-4-6", 'model: anthropic/claude-opus-4-6\n    api_key: "$${NOT_A_VAR}-${KEY}"'
    )
    policy = parse_policy(text, "p.yaml", {"PORT": "9999", "KEY": "k"})
    assert policy.models["fast"].api_base == "http://127.0.0.1:9999/v1"
    key = policy.models["full"].api_key
    assert key is not None and key.get_secret_value() == "${NOT_A_VAR}-k"
    policy = parse_policy(text, "p.yaml", {"PORT": "1", "HOST": "h", "SUFFIX": "/x", "KEY": "k"})
    assert policy.models["fast"].api_base == "http://h:1/v1/x"


def test_env_interpolation_coerces_numbers_and_bools() -> None:
    text = GOOD.replace(
        "    api_base: http://127.0.0.1:8081/v1\n",
        "    api_base: http://127.0.0.1:8081/v1\n    max_connections: ${POOL:-8}\n",
    )
    text += "allow_tier_header: ${ALLOW:-false}\n"
    policy = parse_policy(text, "p.yaml", {"ALLOW": "true"})
    assert policy.models["fast"].max_connections == 8
    assert policy.allow_tier_header is True


def test_empty_env_var_counts_as_unset() -> None:
    text = GOOD.replace("anthropic/claude-opus-4-6", "${FULL_MODEL:-anthropic/claude-opus-4-6}")
    assert parse_policy(text, "p.yaml", {"FULL_MODEL": ""}).models["full"].model == "anthropic/claude-opus-4-6"


def test_missing_env_var_and_malformed_reference() -> None:
    text = GOOD.replace("http://127.0.0.1:8081/v1", "${FAST_BASE}").replace("use: full", "use: ${TIER}")
    text += "store: ${STORE\n"
    errors = errors_of(text)
    assert errors == [
        f"p.yaml:{line_of(text, 'FAST_BASE')}: models.fast.api_base: environment variable FAST_BASE is not set "
        "(use ${FAST_BASE:-default} for a default)",
        f"p.yaml:{line_of(text, 'TIER')}: routes.1.use: environment variable TIER is not set "
        "(use ${TIER:-default} for a default)",
        f"p.yaml:{line_of(text, 'STORE')}: store: malformed ${{...}}: write ${{NAME}} or ${{NAME:-default}}, "
        "and $${ for a literal ${",
    ]


def test_all_errors_at_once_sorted_by_line() -> None:
    text = textwrap.dedent("""\
        version: 1
        models:
          fast:
            model: openai/small
            api_base: ${NO_SUCH_VAR}
            colour: red
            warm_connections: -1
          full:
            model: openai/big
            api_base: http://x/v1
            model: openai/bigger
        routes:
          - name: a
            when: {tools: {present: maybe}}
            use: nowhere
          - name: b
            use: full
        escalation:
          to: full
          max_attempts: 0
        """)
    errors = errors_of(text, filename="all.yaml")
    lines = [int(e.split(":")[1]) for e in errors]
    assert lines == sorted(lines)
    expected = {
        (line_of(text, "NO_SUCH_VAR"), "models.fast.api_base: environment variable NO_SUCH_VAR"),
        (line_of(text, "colour"), "models.fast.colour: unknown key 'colour'"),
        (line_of(text, "warm_connections"), "models.fast.warm_connections: Input should be greater than"),
        (line_of(text, "openai/bigger"), "models.full.model: duplicate key 'model'"),
        (line_of(text, "maybe"), "routes.0.when.tools.present: Input should be a valid boolean"),
        (line_of(text, "nowhere"), "routes.0.use: unknown tier 'nowhere'"),
        (line_of(text, "max_attempts"), "escalation.max_attempts: Input should be greater than"),
    }
    assert len(errors) == len(expected), errors
    for line, start in expected:
        assert any(e.startswith(f"all.yaml:{line}: {start}") for e in errors), (line, start, errors)


def test_secrets_never_appear_in_errors() -> None:
    # The canary comes from the environment into fields that fail validation in every way.
    text = textwrap.dedent("""\
        version: ${CANARY}
        models:
          fast:
            model: openai/small
            api_base: ${CANARY}
            api_key: ${CANARY}
            max_connections: ${CANARY}
            timeouts: {connect: "${CANARY}"}
          full:
            model: openai/big
            api_key: ["${CANARY}"]
            api_base: http://x/v1
        aliases: {"*": "${CANARY}"}
        routes:
          - name: ${CANARY}
            when: {stream: "${CANARY}", model: "${CANARY}", last_role: "${CANARY}"}
            use: ${CANARY}
        escalation: {to: "${CANARY}", on: ["${CANARY}"], deadline: "${CANARY}"}
        client_keys: ${CANARY}
        store: ["${CANARY}"]
        """)
    errors = errors_of(text, {"CANARY": CANARY})
    assert len(errors) >= 12
    joined = "\n".join(errors)
    assert CANARY not in joined
    assert CANARY[3:] not in joined
    assert "[redacted]" in joined  # e.g. "unknown tier '[redacted]'"


def test_literal_api_keys_never_appear_in_errors() -> None:
    text = GOOD.replace(
        "    model: anthropic/claude-opus-4-6\n",
        f"    model: anthropic/claude-opus-4-6\n    api_key: {{nested: {CANARY}}}\n",
    )
    text += f"client_keys: [{CANARY}, [{CANARY}]]\n"
    errors = errors_of(text)
    assert len(errors) == 2
    assert CANARY not in "\n".join(errors)


def test_load_policy_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    errors = check_file(missing)
    assert len(errors) == 1
    assert errors[0].startswith(f"{missing}: cannot read the policy file")
    with pytest.raises(PolicyError):
        load_policy(missing)


def test_load_policy_uses_os_environ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(GOOD.replace("http://127.0.0.1:8081/v1", "${TEST_ROUTER_BASE}"))
    monkeypatch.setenv("TEST_ROUTER_BASE", "http://10.0.0.1/v1")
    assert load_policy(path).models["fast"].api_base == "http://10.0.0.1/v1"
    monkeypatch.delenv("TEST_ROUTER_BASE")
    (error,) = check_file(path)
    assert error.startswith(f"{path}:5: models.fast.api_base: environment variable TEST_ROUTER_BASE")


def test_anchors_and_merge_keys() -> None:
    text = textwrap.dedent("""\
        version: 1
        models:
          fast: &local
            model: openai/small
            api_base: http://127.0.0.1:8081/v1
            warm_connections: 0
          full:
            <<: *local
            model: openai/big
            warm_connections: 4
        routes: [{name: default, use: full}]
        """)
    policy = parse_policy(text, "p.yaml", {})  # overriding a merged key is not a duplicate
    full = policy.models["full"]
    assert (full.model, full.api_base, full.warm_connections) == ("openai/big", "http://127.0.0.1:8081/v1", 4)
    errors = errors_of(text.replace("    model: openai/small", "    model: openai/small\n    colour: red"))
    # the merged copy is reported at the line where the key is written
    assert len(errors) == 2
    assert errors[0].startswith("p.yaml:5: models.fast.colour: unknown key 'colour'")
    assert errors[1].startswith("p.yaml:5: models.full.colour: unknown key 'colour'")
