"""router/core/live/prices.py: where each tier's prices come from — declared, LiteLLM's table (read
from the installed package, never fetched), local — and what an answer's tokens cost."""

from __future__ import annotations

import dataclasses
import textwrap

import pytest

from router.core.live.prices import FREE, Prices, Rates, is_local, litellm_table
from router.policy.loader import parse_policy
from router.upstream.base import Usage

TABLE = (
    {
        "claude-opus-4-6": {"input_cost_per_token": 5e-6, "output_cost_per_token": 25e-6,
                            "cache_read_input_token_cost": 5e-7, "cache_creation_input_token_cost": 6.25e-6},
        "gpt-5": {"input_cost_per_token": 1.25e-6, "output_cost_per_token": 1e-5,
                  "input_cost_per_token_priority": 2.5e-6, "output_cost_per_token_priority": 2e-5},
    },
    "9.9.9",
)  # fmt: skip


def per_token(rates: Rates | None) -> tuple[float, ...] | None:
    return dataclasses.astuple(rates) if rates is not None else None


def approx(rates: Rates) -> object:
    return pytest.approx(dataclasses.astuple(rates))


def policy(models: str, extra: str = "") -> Prices:
    text = f"version: 1\nmodels:\n{textwrap.indent(textwrap.dedent(models), '  ')}\nroutes:\n  - {{name: d, use: a}}\n"
    return Prices(parse_policy(text + extra, "t.yaml", {}), TABLE)


def test_a_declared_price_is_per_million_tokens_and_defaults_cached_and_writes_to_input() -> None:
    prices = policy("""
        a: {model: anthropic/claude-opus-4-6, api_key: k, price: {input: 5, output: 25, cached_input: 0.5}}
    """)
    rates = prices.of("a")
    assert per_token(rates) == approx(Rates(5e-6, 5e-7, 5e-6, 25e-6)) and prices.sources["a"] == "declared"
    # 1000 fresh (of them 200 written), 3000 cached, 100 out
    assert prices.cost("a", Usage(1000, 3000, 100, 200)) == pytest.approx(
        800 * 5e-6 + 200 * 5e-6 + 3000 * 5e-7 + 100 * 25e-6
    )


def test_a_hosted_tier_is_priced_from_the_table_and_a_multiplier_scales_it() -> None:
    prices = policy("""
        a: {model: anthropic/claude-opus-4-6, api_key: k}
        b: {model: anthropic/claude-opus-4-6, api_key: k, speed: fast, price: {multiplier: 6}}
    """)
    assert per_token(prices.of("a")) == approx(Rates(5e-6, 5e-7, 6.25e-6, 25e-6))
    assert prices.sources["a"] == "table: claude-opus-4-6 (litellm 9.9.9)"
    assert per_token(prices.of("b")) == approx(Rates(30e-6, 3e-6, 37.5e-6, 150e-6))
    assert prices.sources["b"].endswith("x6")


def test_a_speed_the_table_does_not_price_is_no_price_at_all() -> None:
    prices = policy("""
        a: {model: anthropic/claude-opus-4-6, api_key: k, speed: fast}
        b: {model: openai/gpt-5, api_base: "https://api.openai.com/v1", service_tier: priority}
        c: {model: openai/gpt-5, api_base: "https://api.openai.com/v1", service_tier: ultrafast}
    """)
    assert prices.of("a") is None and "speed: fast" in prices.sources["a"]
    assert per_token(prices.of("b")) == approx(Rates(2.5e-6, 2.5e-6, 2.5e-6, 2e-5))  # the table's priority prices
    assert prices.of("c") is None and prices.cost("c", Usage(1, 0, 1)) is None


def test_a_local_tier_costs_nothing_unless_the_policy_says_so() -> None:
    prices = policy("""
        a: {model: openai/qwen, api_base: "http://127.0.0.1:8081/v1"}
        b: {model: openai/qwen, api_base: "http://llama-fast:8080/v1"}
        c: {model: openai/qwen, api_base: "http://10.0.0.7:8080/v1", price: {input: 0.1, output: 0.4}}
        d: {model: openai/mystery, api_base: "https://llm.example.com/v1"}
    """)
    assert prices.of("a") is FREE and prices.of("b") is FREE and prices.cost("a", None) == 0.0
    assert prices.cost("c", Usage(1_000_000, 0, 1_000_000)) == pytest.approx(0.5)
    assert prices.of("d") is None and prices.sources["d"].startswith("none: hosted")


def test_only_loopback_private_and_single_label_hosts_are_local() -> None:
    def tier(base: str) -> bool:
        p = parse_policy(
            f"version: 1\nmodels:\n  a: {{model: openai/m, api_base: '{base}'}}\nroutes:\n  - {{name: d, use: a}}\n",
            "t",
            {},
        )
        return is_local(p.models["a"])

    assert tier("http://localhost:1/v1") and tier("http://[::1]:1/v1") and tier("http://192.168.1.2:1/v1")
    assert tier("http://gpu-box.local:1/v1") and tier("http://vllm:8000/v1")
    assert not tier("https://api.openai.com/v1") and not tier("http://8.8.8.8:1/v1")


def test_the_installed_litellm_table_is_read_from_its_file() -> None:
    table = litellm_table()
    assert table is not None, "the litellm extra is installed in the test environment"
    entries, version = table
    assert len(entries) > 1000 and version.count(".") == 2
    assert entries["claude-opus-4-5"]["input_cost_per_token"] > 0


def test_openais_fast_service_tier_is_its_priority_price_and_a_refused_fast_mode_is_priced_at_standard() -> None:
    prices = policy("""
        a: {model: openai/gpt-5, api_base: "https://api.openai.com/v1"}
        gpt-fast: {model: openai/gpt-5, api_base: "https://api.openai.com/v1", service_tier: fast}
        gpt-ultra: {model: openai/gpt-5, api_base: "https://api.openai.com/v1", service_tier: ultrafast,
                    price: {multiplier: 6}}
        opus-fast: {model: anthropic/claude-opus-4-6, api_key: k, speed: fast, price: {input: 30, output: 150}}
        opus-x6: {model: anthropic/claude-opus-4-6, api_key: k, speed: fast,
                  price: {input: 5, output: 25, multiplier: 6}}
    """)
    assert per_token(prices.of("gpt-fast")) == approx(Rates(2.5e-6, 2.5e-6, 2.5e-6, 2e-5))  # "fast" is "priority"
    assert prices.sources["gpt-fast"] == "table: gpt-5 (litellm 9.9.9, service_tier priority)"
    assert per_token(prices.of("gpt-ultra")) == approx(Rates(7.5e-6, 7.5e-6, 7.5e-6, 6e-5))  # the table's x6
    usage = Usage(1000, 0, 100)
    for tier in ("gpt-fast", "gpt-ultra"):  # answered at the default tier: the table's standard price
        assert prices.cost(tier, usage, standard=True) == pytest.approx(1000 * 1.25e-6 + 100 * 1e-5)
    assert prices.cost("opus-fast", usage, standard=True) is None  # declared fast prices: standard unknown
    assert prices.cost("opus-x6", usage, standard=True) == pytest.approx(1000 * 5e-6 + 100 * 25e-6)  # without x6
    assert prices.cost("opus-x6", usage) == pytest.approx(6 * (1000 * 5e-6 + 100 * 25e-6))
    assert prices.cost("a", usage, standard=True) == prices.cost("a", usage)  # no fast mode: as ever
