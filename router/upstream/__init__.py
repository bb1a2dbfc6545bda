"""Upstream tiers: build one client per tier, keep them across policy reloads when unchanged, and
keep their connections warm while idle (`keep_warm` on pooled tiers).

`serving(objects)` is the in-process seam: tiers named in `objects` are served by those objects
(anything satisfying the `Upstream` protocol: a scripted tier in a test, a model in the same
process), the others as the policy says (`create_app(settings, upstreams=objects)`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from router.constants import RETIRE_GRACE
from router.policy.model import Policy, Tier
from router.upstream.base import Chunk, Limits, Reply, Upstream

__all__ = ["CLIENTS", "Build", "Chunk", "Limits", "Reply", "Upstream", "Upstreams", "build_upstream", "serving"]

log = logging.getLogger("router.upstream")


def _openai(name: str, tier: Tier, limits: Limits | None) -> Upstream:
    from router.upstream.openai_compat import OpenAICompatUpstream

    return OpenAICompatUpstream(name, tier, limits)


def _anthropic(name: str, tier: Tier, limits: Limits | None) -> Upstream:
    from router.upstream.anthropic import AnthropicUpstream

    return AnthropicUpstream(name, tier, limits)


def _litellm(name: str, tier: Tier, limits: Limits | None) -> Upstream:
    from router.upstream.litellm_adapter import LitellmUpstream

    return LitellmUpstream(name, tier)


Build = Callable[[str, Tier, Limits | None], Upstream]

# a tier's provider (`model: <provider>/<id>`; no provider: openai) → its client of the router's own,
# imported on first use; any other provider is litellm's (`_litellm`)
CLIENTS: Mapping[str, Build] = {"openai": _openai, "anthropic": _anthropic}


def build_upstream(name: str, tier: Tier, limits: Limits | None = None) -> Upstream:
    return CLIENTS.get(tier.provider, _litellm)(name, tier, limits)


def serving(objects: Mapping[str, Upstream]) -> Build:
    """Build tiers named in `objects` as those objects, the others from the policy (`build_upstream`)."""

    def build(name: str, tier: Tier, limits: Limits | None) -> Upstream:
        given = objects.get(name)
        return given if given is not None else build_upstream(name, tier, limits)

    return build


class Upstreams:
    """tier name → started upstream client. `apply()` swaps in a new policy's tiers."""

    def __init__(self, warm: bool = True, limits: Limits | None = None, build: Build = build_upstream) -> None:
        self._build = build
        self._warm = warm
        self._limits = limits  # what a pooled tier may send (router/upstream/http.py)
        self._clients: dict[str, Upstream] = {}
        self._configs: dict[str, Tier] = {}
        self._retired: list[Upstream] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._keepers: dict[str, asyncio.Task[None]] = {}  # tier → its keep-warm loop

    def __getitem__(self, tier: str) -> Upstream:
        return self._clients[tier]

    async def apply(self, policy: Policy) -> None:
        """Start clients for new or changed tiers, close those that went away or changed."""
        stale = [n for n, cfg in self._configs.items() if policy.models.get(n) != cfg]
        fresh = {n: t for n, t in policy.models.items() if self._configs.get(n) != t}
        started = {name: self._build(name, tier, self._limits) for name, tier in fresh.items()}
        try:
            outcomes = await asyncio.gather(
                *(c.start(warm=self._warm) for c in started.values()), return_exceptions=True
            )
            if failed := next((o for o in outcomes if isinstance(o, BaseException)), None):
                raise failed
        except BaseException:  # what the others (and the failed one, up to its failure) opened is closed
            await asyncio.gather(*(c.close() for c in started.values()), return_exceptions=True)
            raise
        old = [self._clients[n] for n in stale]
        for name in stale:
            self._clients.pop(name)
            self._configs.pop(name)
            if (keeper := self._keepers.pop(name, None)) is not None:
                keeper.cancel()
        self._clients.update(started)
        self._configs.update(fresh)
        for name, client in started.items():
            if self._warm and (keep_warm := getattr(client, "keep_warm", None)) is not None:
                self._keepers[name] = asyncio.create_task(keep_warm())
        # in-flight calls still hold the old clients; close them after a grace period
        if old:
            self._retired.extend(old)
            self._tasks.add(asyncio.create_task(self._retire(old)))
        if fresh:
            log.info("upstream tiers ready: %s", ", ".join(sorted(fresh)))

    async def _retire(self, clients: list[Upstream], grace: float = RETIRE_GRACE) -> None:
        await asyncio.sleep(grace)
        for c in clients:
            self._retired.remove(c)
            await c.close()

    async def close(self) -> None:
        for task in [*self._tasks, *self._keepers.values()]:
            task.cancel()
        self._keepers.clear()
        clients = [*self._clients.values(), *self._retired]
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
        self._retired.clear()
        self._clients.clear()
        self._configs.clear()
