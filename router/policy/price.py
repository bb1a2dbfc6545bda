"""A tier's prices, as a policy declares them (`price:` on a tier, USD per million tokens).

    price: {input: 5.0, cached_input: 0.5, cache_write: 6.25, output: 25.0}   declared
    price: {multiplier: 6}         the maintained table's prices of the tier's model, times 6 (a
                                   speed lane: Anthropic's fast mode is the same model at about 6 times the price)
    price: {input: 0, output: 0}   free (a local tier costs 0 anyway, unless its policy says otherwise)

`cached_input` and `cache_write` default to `input`. Where a tier declares no `input`/`output`, its
prices come from the table (router/core/live/prices.py). Prices are the user's: the router never
makes one up.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from router.policy.strict import PositiveFloat, Strict

PerMillion = Annotated[float, Field(ge=0, le=1_000_000)]  # USD per million tokens


class Price(Strict):
    input: PerMillion | None = Field(None, description="USD per million prompt tokens read afresh")
    cached_input: PerMillion | None = Field(None, description="USD per million prompt tokens read from a cache")
    cache_write: PerMillion | None = Field(None, description="USD per million prompt tokens written to a cache")
    output: PerMillion | None = Field(None, description="USD per million tokens written out")
    multiplier: PositiveFloat = Field(1.0, description="times these prices, or the table's (a speed lane's premium)")

    @model_validator(mode="after")
    def _whole(self) -> Price:
        declared = [v is not None for v in (self.input, self.cached_input, self.cache_write, self.output)]
        if any(declared) and (self.input is None or self.output is None):
            raise ValueError("price: declare both input and output (cached_input and cache_write default to input)")
        return self

    @property
    def declared(self) -> bool:
        return self.input is not None
