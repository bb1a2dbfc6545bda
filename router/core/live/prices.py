"""What each tier costs, per token, and where that price comes from — read once per policy.

    Prices(policy)      tier → `Rates` (USD per token) and `source`, for every tier:
      declared          the tier's `price:` (router/policy/price.py)
      table             LiteLLM's maintained model cost map, as shipped in the installed `litellm`
                        package (the `litellm` extra): read from its JSON file, never fetched, and
                        litellm itself never imported; OpenAI's `service_tier` prices (`priority`,
                        `flex`) where the table has them; `price: {multiplier: n}` scales them
      local             an `openai/` tier served on this machine or network (loopback, private
                        addresses, one-label or `.local` hosts): 0, unless its `price:` says otherwise
      none              a hosted tier the table does not price: no cost is shown for it
                        (`agent-router check` warns)

A tier of a fast mode (`speed: fast`, a `service_tier`) answered at standard speed — its fast mode
refused, router/upstream/speed.py — is priced at its standard rates (`standard_rates`): its price
without its multiplier, or the table's standard one; unknown where its declared prices are the fast ones.

`Rates.cost(usage)` prices one answer's `Usage`: the prompt read afresh at `input`, the part written
to a cache at `cache_write`, the part read from one at `cached_input`, the output at `output`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import ipaddress
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from router.policy.model import Policy, Tier
from router.upstream.base import Usage

log = logging.getLogger("router.prices")
_TABLE_FILE = "model_prices_and_context_window_backup.json"  # in the litellm package
MILLION = 1_000_000
_TABLE_TIERS = {"fast": "priority"}  # OpenAI's newer names of service tiers → the table's


@dataclass(frozen=True, slots=True)
class Rates:
    """USD per token."""

    input: float
    cached_input: float
    cache_write: float
    output: float

    @property
    def free(self) -> bool:
        return not (self.input or self.cached_input or self.cache_write or self.output)

    def cost(self, usage: Usage) -> float:
        fresh = max(0, usage.evaluated - usage.written)
        return (
            fresh * self.input
            + usage.written * self.cache_write
            + usage.reused * self.cached_input
            + usage.output * self.output
        )


FREE = Rates(0.0, 0.0, 0.0, 0.0)


@functools.cache
def litellm_table() -> tuple[Mapping[str, Any], str] | None:
    """LiteLLM's model cost map and litellm's version, read from the installed package's JSON file
    (None: litellm is not installed, or its file is unreadable)."""
    spec = importlib.util.find_spec("litellm")  # finds the package; does not import it
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / _TABLE_FILE
    try:
        table = json.loads(path.read_text())
        version = importlib.metadata.version("litellm")
    except (OSError, ValueError, importlib.metadata.PackageNotFoundError) as exc:
        log.warning("litellm's model cost map could not be read (%s): hosted tiers are priced only by the policy",
                    type(exc).__name__)  # fmt: skip
        return None
    return (table, version) if isinstance(table, dict) else None


def is_local(tier: Tier) -> bool:
    """An `openai/` tier whose every server is on this machine or network."""
    if tier.provider != "openai" or not tier.api_bases:
        return False
    return all(_local_host(urlsplit(base).hostname or "") for base in tier.api_bases)


def _local_host(host: str) -> bool:
    if host == "localhost" or host.endswith(".local") or ("." not in host and ":" not in host):
        return True  # one label: a compose service, a LAN name
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def _table_entry(tier: Tier, table: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    model = tier.model.split("/", 1)[1] if "/" in tier.model else tier.model
    for key in (model, tier.model, f"{tier.provider}/{model}"):
        entry = table.get(key)
        if isinstance(entry, dict) and isinstance(entry.get("input_cost_per_token"), int | float):
            return key, entry
    return None


def _table_rates(entry: Mapping[str, Any], service_tier: str | None) -> Rates:
    def rate(name: str, fallback: float) -> float:
        for key in ((f"{name}_{service_tier}",) if service_tier else ()) + (name,):
            value = entry.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
                return float(value)
        return fallback

    fresh = rate("input_cost_per_token", 0.0)
    return Rates(
        fresh,
        rate("cache_read_input_token_cost", fresh),
        rate("cache_creation_input_token_cost", fresh),
        rate("output_cost_per_token", 0.0),
    )


def _scaled(rates: Rates, factor: float, per: float = 1.0) -> Rates:
    """`rates` times `factor`, divided by `per` (1e6: from per million tokens to per token)."""
    values = (rates.input, rates.cached_input, rates.cache_write, rates.output)
    return Rates(*(value * factor / per for value in values))


def resolve(tier: Tier, table: tuple[Mapping[str, Any], str] | None) -> tuple[Rates | None, str]:
    """A tier's rates and where they come from (None: no price known)."""
    price = tier.price
    multiplier = price.multiplier if price is not None else 1.0
    times = f" x{multiplier:g}" if multiplier != 1.0 else ""
    if price is not None and price.declared:
        fresh = float(price.input or 0.0)
        rates = Rates(
            fresh,
            float(price.cached_input if price.cached_input is not None else fresh),
            float(price.cache_write if price.cache_write is not None else fresh),
            float(price.output or 0.0),
        )
        return _scaled(rates, multiplier, MILLION), f"declared{times}"  # per million → per token
    if table is not None and (found := _table_entry(tier, table[0])) is not None:
        key, entry = found
        service_tier = _TABLE_TIERS.get(tier.service_tier or "", tier.service_tier)  # "fast" is "priority"
        tiered = bool(service_tier) and f"input_cost_per_token_{service_tier}" in entry
        unpriced = "speed: fast" if tier.speed else f"service_tier {tier.service_tier}" if tier.service_tier else ""
        if unpriced and not tiered and price is None:  # the table prices the standard speed only: not this one
            return None, f"none: the table has no {unpriced} price for {key}; declare `price:` (or a multiplier)"
        rates = _table_rates(entry, service_tier if tiered else None)
        via = f", service_tier {service_tier}" if tiered else ""
        return _scaled(rates, multiplier), f"table: {key} (litellm {table[1]}{via}){times}"
    if is_local(tier):
        return FREE, "local: 0"
    return None, "none: hosted, not in the price table; declare `price:`"


def standard_rates(tier: Tier, table: tuple[Mapping[str, Any], str] | None, rates: Rates | None) -> Rates | None:
    """A tier's rates at standard speed — what an answer costs when its fast mode (`speed`,
    `service_tier`) was refused: its price without the multiplier (the speed's premium), or the
    table's standard price; None for a tier whose declared prices are its fast ones (its standard
    price is not known)."""
    if tier.speed is None and tier.service_tier is None:
        return rates
    price = tier.price
    if price is not None and price.declared and price.multiplier == 1.0:
        return None
    plain = price.model_copy(update={"multiplier": 1.0}) if price is not None and price.declared else None
    return resolve(tier.model_copy(update={"speed": None, "service_tier": None, "price": plain}), table)[0]


class Prices:
    """Every tier's rates and their source, for one policy (rebuilt when it is reloaded)."""

    def __init__(self, policy: Policy, table: tuple[Mapping[str, Any], str] | None = None) -> None:
        table = table if table is not None else litellm_table()
        resolved = {name: resolve(tier, table) for name, tier in policy.models.items()}
        self.rates: dict[str, Rates | None] = {name: rates for name, (rates, _) in resolved.items()}
        # what a tier's answer costs at standard speed, when its fast mode was refused (`standard_rates`)
        self.standard = {name: standard_rates(tier, table, self.rates[name]) for name, tier in policy.models.items()}
        self.sources: dict[str, str] = {name: source for name, (_, source) in resolved.items()}
        self.baseline = policy.baseline_tier

    def of(self, tier: str) -> Rates | None:
        return self.rates.get(tier)

    def cost(self, tier: str, usage: Usage | None, standard: bool = False) -> float | None:
        """What `tier` charged for an answer of `usage` (None: no price, or no token counts);
        `standard`: answered at standard speed, its fast mode refused."""
        rates = (self.standard if standard else self.rates).get(tier)
        if rates is None:
            return None
        if rates.free:
            return 0.0
        return rates.cost(usage) if usage is not None else None
