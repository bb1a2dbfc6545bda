"""Context windows: what the router knows of each tier's, so that a prompt goes to a tier it fits
(router/policy/decide.py, `fitted`), the model list reports them, and a client whose prompt fits
none gets its own API's error with the numbers (router/errors.py, `ContextExceeded`).

    Windows(tiers)            tier → its context window in tokens, where known: the least of the
                              policy's `context_window`, what the tier's server reports
                              (`Upstream.context_window`) and what its own context errors said
      .apply(policy)          the policy's tiers, each asked in the background (a new or changed
                              tier forgets what was known of the one it replaces)
      .known()                the windows known, for `policy.decide`; a tier last asked `refresh`
                              (CONTEXT_REFRESH) seconds ago or more is asked again, in the background
                              (a server that came up, or came back with another context, after the router)
      .learned(tier, window)  a context error of the tier said its window
      .settled(within)        asks in flight, waited for `within` seconds at most: GET /v1/models reports them

A tier whose window is not known is taken to fit any prompt: its server says otherwise with an
error, which the call answers by going on to a tier with a larger window (router/flow/attempts.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping

from router.constants import CONTEXT_REFRESH
from router.policy.model import Policy, Tier
from router.upstream.base import Tiers

log = logging.getLogger("router.context")


class Windows:
    def __init__(self, tiers: Tiers, refresh: float = CONTEXT_REFRESH) -> None:
        self._tiers = tiers
        self._refresh = refresh  # seconds after which a tier is asked again
        self._configs: dict[str, Tier] = {}
        self._reported: dict[str, int] = {}  # tier → what its server reported
        self._learned: dict[str, int] = {}  # tier → what its context errors said
        self._asked: dict[str, float] = {}  # tier → event-loop time of its last ask
        self._asking: dict[str, asyncio.Task[None]] = {}
        self._due = float("inf")  # event-loop time at which the first tier is asked again
        self.windows: dict[str, int] = {}  # tier → the window that counts (the least known)

    def apply(self, policy: Policy) -> None:
        """Take the policy's tiers (after `Upstreams.apply` started their clients) and ask each."""
        for name in [n for n, tier in self._configs.items() if policy.models.get(n) != tier]:
            self._forget(name)
        self._configs = dict(policy.models)
        self._settle_windows()
        for name in self._configs:
            self._ask(name)

    def known(self) -> Mapping[str, int]:
        if asyncio.get_running_loop().time() >= self._due:
            self._ask_due()
        return self.windows

    def learned(self, tier: str, window: int | None) -> None:
        if window and tier in self._configs and self._learned.get(tier) != window:
            self._learned[tier] = window
            self._settle_windows()

    async def settled(self, within: float) -> None:
        if self._asking:
            await asyncio.wait(list(self._asking.values()), timeout=within)

    async def close(self) -> None:
        tasks = list(self._asking.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _forget(self, name: str) -> None:
        self._configs.pop(name, None)
        self._reported.pop(name, None)
        self._learned.pop(name, None)
        self._asked.pop(name, None)
        if (task := self._asking.pop(name, None)) is not None:
            task.cancel()

    def _ask_due(self) -> None:
        now = asyncio.get_running_loop().time()
        for name in self._configs:
            if name not in self._asked or now - self._asked[name] >= self._refresh:
                self._ask(name)
        self._due = min((t + self._refresh for t in self._asked.values()), default=float("inf"))

    def _ask(self, name: str) -> None:
        if name in self._asking:
            return
        loop = asyncio.get_running_loop()
        self._asked[name] = loop.time()
        self._due = min(self._due, self._asked[name] + self._refresh)
        task = self._asking[name] = loop.create_task(self._one(name, self._configs[name]))
        task.add_done_callback(lambda done: self._asking.pop(name, None) if self._asking.get(name) is done else None)

    async def _one(self, name: str, config: Tier) -> None:
        deadline = asyncio.get_running_loop().time() + config.timeouts.connect + 2
        try:
            reported = await self._tiers[name].context_window(deadline)
        except Exception as exc:  # an in-process tier's own method failing: as if it reported nothing
            log.warning("tier %s: asking its context window failed (%s)", name, type(exc).__name__)
            reported = None
        if self._configs.get(name) != config:  # replaced meanwhile
            return
        if reported:
            self._reported[name] = reported
            self._learned.pop(name, None)  # the server's report is newer than what an error said
        self._settle_windows()

    def _settle_windows(self) -> None:
        windows: dict[str, int] = {}
        for name, config in self._configs.items():
            said = [w for w in (config.context_window, self._reported.get(name), self._learned.get(name)) if w]
            if said:
                windows[name] = min(said)
            server = self._reported.get(name)
            if config.context_window and server and server < config.context_window and self.windows.get(name) != server:
                log.warning(
                    "tier %s: its server's context window is %d tokens, less than the policy's context_window "
                    "%d; %d counts", name, server, config.context_window, server,
                )  # fmt: skip
        for name, window in windows.items():
            if self.windows.get(name) != window:
                log.info("tier %s: context window %d tokens", name, window)
        self.windows = windows
