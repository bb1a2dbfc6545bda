"""The running proxy's state: one `Runtime` per app (router/app.py builds it; no module globals).

Transports (router/api/) reach it as `request.app.state.runtime`; the pipeline gets it as an argument;
a call's `Attempts` (router/flow/attempts.py) gets only its `Parts`, what the attempts use; the parts
below it (store, upstreams, validator, shadow mode) get only the collaborators they use.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from router.constants import TASKS_STOP_WAIT
from router.core.checks.validate import Validator
from router.core.checks.verify import VerdictCache
from router.core.live.adaptive import AdaptiveState
from router.core.live.breaker import Breakers
from router.core.live.context import Windows
from router.core.live.feed import Feed
from router.core.live.lanes import Choice, Lanes
from router.core.live.ledger import Finished, Ledger
from router.core.live.open_calls import OpenCalls
from router.core.live.repeats import Repeats
from router.core.live.response_state import ResponseCache, ResponseState
from router.core.live.shadow import Shadower
from router.core.live.tracing import Tracing
from router.core.live.warming import Warming
from router.metrics import Metrics
from router.policy.model import Policy
from router.policy.watch import PolicyHolder, watch
from router.sessions.sockets import Budget
from router.settings import Settings
from router.store import Store
from router.store.base import LANE_PREFIX, Event
from router.store.calls import CallRecord
from router.upstream import Build, Limits, Upstreams, build_upstream

log = logging.getLogger("router")
CALL_LOG_INTERVAL = 0.5  # seconds between writes of finished calls to the store's call log
MAX_PENDING_CALLS = 10_000  # finished calls waiting for the store at most


Background = Callable[[Coroutine[Any, Any, Any]], None]  # runs a coroutine off the request path


@dataclass(frozen=True, slots=True)
class Parts:
    """What a call's attempts use of the running proxy (router/flow/attempts.py): the tiers, their
    breakers and context windows, the checks, and where an attempt is written down and offered."""

    upstreams: Upstreams
    breakers: Breakers  # per tier: skipped a while after upstream errors in a row
    windows: Windows  # tiers' context windows, as their servers and errors report them
    warming: Warming  # warm-ups give way to a live attempt; a delivered answer is read ahead
    validator: Validator
    verdicts: VerdictCache  # the route's verifier's cached verdicts
    repeats: Repeats  # requests whose every attempt failed the checks
    shadow: Shadower
    store: Store
    metrics: Metrics
    background: Background  # runs a coroutine off the request path (`Runtime.background`)
    ledger: Ledger  # prices, sessions' accounts, tiers' observed speeds: what a call is worth


class Runtime:
    """What one running proxy owns, handed to each part that uses it: settings, policy, store,
    upstream tiers and their context windows, validator, judge-verdict cache, exhausted requests,
    metrics, lanes, shadow mode, response state, the calls open and in flight, and background tasks;
    `parts`, those a call's attempts use. `start()` and `close()` bound their life."""

    def __init__(self, settings: Settings, policy: PolicyHolder, store: Store, build: Build = build_upstream) -> None:
        self.settings = settings
        self.policy = policy
        self.store = store
        self.metrics = Metrics()
        self.tracing = Tracing(settings)  # OpenTelemetry spans; off unless OTEL_* says otherwise
        self.open = OpenCalls(self.metrics, settings.shutdown_grace)  # ended when a client leaves, at shutdown
        sockets = Budget(  # the process's upstream WebSockets (router/sessions/sockets.py)
            settings.upstream_ws_max_sockets, settings.upstream_ws_idle_timeout, settings.upstream_ws_max_age,
            settings.upstream_ws_fallback,
        )  # fmt: skip
        limits = Limits(
            settings.upstream_max_body_bytes, settings.upstream_max_answer_chars, self.metrics.tripped, sockets
        )
        self.breakers = Breakers(self.metrics)  # per tier: skipped a while after upstream errors in a row
        self.upstreams = Upstreams(warm=settings.warm_up, limits=limits, build=build)
        self.windows = Windows(self.upstreams)  # tiers' context windows (router/core/live/context.py)
        self.validator = Validator(
            max_schema_bytes=settings.max_schema_bytes,
            max_pattern_bytes=settings.max_pattern_bytes,
            max_costly_patterns=settings.max_costly_patterns,
        )
        self.verdicts = VerdictCache()  # judge verdicts by (call, context) hash, bounded LRU
        self.repeats = Repeats(settings.repeat_max_entries, settings.repeat_ttl)  # exhausted requests, by digest
        # a route's `shadow` option (router/core/live/shadow.py)
        self.shadow = Shadower(settings, self.metrics, store, self.upstreams, self.background)
        # sessions' prompts kept on the tiers they may move to (router/core/live/warming.py)
        self.warming = Warming(self.upstreams, self.metrics.observe_warm_up, settings.warm_max_pending)
        self.adaptive = AdaptiveState(store, policy)
        self.lanes = Lanes(self._count_lane)  # calls in flight per lane, lane views of the policy
        cache = ResponseCache(settings.responses_cache_entries, settings.responses_cache_bytes)
        durable = settings.responses_store_ttl > 0 and store.backend != "memory"  # memory:// adds nothing
        # previous_response_id: a response's history, and its end held until a replica elsewhere finds it
        self.responses = ResponseState(cache, store if durable else None, self.metrics, settings.store_write_wait)
        self.ledger = Ledger(settings.ledger_max_sessions)  # what calls cost against the baseline
        self.feed = Feed()  # finished calls, pushed to the console's viewers
        self._calls: deque[CallRecord] = deque()  # finished calls not yet in the store's call log
        self._ids, self._seq = uuid.uuid4().hex[:12] + "-", itertools.count()  # call ids: this process's, then n
        self.parts = Parts(
            upstreams=self.upstreams, breakers=self.breakers, windows=self.windows, warming=self.warming,
            validator=self.validator, verdicts=self.verdicts, repeats=self.repeats, shadow=self.shadow,
            store=store, metrics=self.metrics, background=self.background, ledger=self.ledger,
        )  # fmt: skip
        self.inflight = 0  # calls in flight: changed only by router/api's `Admission`
        self.ready = False
        self._tasks: set[asyncio.Task[Any]] = set()

    def drain(self) -> None:
        """The server stops taking calls: those open end within the grace, the console's viewers now."""
        self.open.drain()
        self.feed.close()

    def finished(self, outcome: Finished, error: str | None = None) -> None:
        """A routed call is over (its transport's last word; `error`: the code it ended with, if it
        did): what it cost, added up; logged in the store (in batches, `_log_calls`) and pushed to
        the console's viewers."""
        self.ledger.add(outcome)
        if outcome.cost_usd is not None and outcome.baseline_usd is not None:
            self.metrics.observe_worth(outcome.tier, outcome.route, outcome.cost_usd, outcome.baseline_usd)
        data = outcome.to_json() if error is None else {**outcome.to_json(), "error": error}
        record = CallRecord(f"{self._ids}{next(self._seq):x}", outcome.session, outcome.ended_at, data)
        if len(self._calls) >= MAX_PENDING_CALLS:  # the store is behind: the oldest waiting is let go
            self._calls.popleft()
            self.metrics.tripped("call_log_behind")
        self._calls.append(record)
        if self.feed.viewers:
            self.feed.publish({"id": record.id, "session": record.session, "ts": record.ts, **record.data})

    async def _log_calls(self) -> None:
        """Finished calls into the store's call log, every `CALL_LOG_INTERVAL` seconds."""
        while True:
            await asyncio.sleep(CALL_LOG_INTERVAL)
            await self._flush_calls()

    async def _flush_calls(self) -> None:
        if self._calls:
            batch = list(self._calls)
            self._calls.clear()
            await self.store.calls_put(batch, self._ids)

    async def _relay_calls(self) -> None:
        """Other replicas' calls (a Redis store's live channel) to this process's console viewers."""
        async for record in self.store.calls_watch(self._ids):
            if self.feed.viewers:
                self.feed.publish({"id": record.id, "session": record.session, "ts": record.ts, **record.data})

    def background(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run off the request path; failures are logged, never raised to a client."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning("background task failed: %s", type(exc).__name__)

    def _count_lane(self, lane: Choice) -> None:
        """A call that asked for a lane: metrics and the store (stats' `lanes`), refusals included."""
        asked = lane.asked or lane.name
        self.metrics.lanes.labels(asked, lane.outcome).inc()
        self.store.record([Event("", asked, kind=LANE_PREFIX + lane.outcome)])

    async def apply(self, policy: Policy) -> None:
        await self.upstreams.apply(policy)
        self.windows.apply(policy)
        self.metrics.reloads.labels("applied").inc()

    async def start(self) -> None:
        await self.store.start()
        if self.store.unusable and self.policy.current.store_required:
            await self.store.close()
            raise StoreUnusable(self.store.backend, self.store.unusable)
        if self.store.unusable:
            log.error("%s store unusable (%s); serving degraded", self.store.backend, self.store.unusable)
        self.tracing.open()
        await self.upstreams.apply(self.policy.current)
        self.windows.apply(self.policy.current)
        self.ledger.prices(self.policy.current)  # the price table read now, not by the first call
        if self.settings.reload_policy and self.policy.path is not None:
            self.background(watch(self.policy, self.policy.path, on_change=self.apply))
        self.background(self.adaptive.run())
        self.background(self._log_calls())
        self.background(self._relay_calls())
        self.background(self.responses.run())
        self.ready = True

    async def close(self) -> None:
        self.ready = False
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:  # bounded: a task that swallowed its cancellation must not hold the exit
            _, stuck = await asyncio.wait(tasks, timeout=TASKS_STOP_WAIT)
            for task in stuck:
                log.warning("a background task did not stop within %.0f s: %s", TASKS_STOP_WAIT, task.get_name())
        self.feed.close()
        await self._flush_calls()  # the calls not yet in the store's call log
        await self.responses.close()  # what is still queued for the store
        await self.warming.close()
        await self.windows.close()
        await self.upstreams.close()
        await self.store.close()
        await self.tracing.close()  # the spans still queued are exported (bounded by the exporter's timeout)


class StoreUnusable(Exception):
    """The store cannot be used at start-up and the policy requires it (`store_required`)."""

    def __init__(self, backend: str, reason: str) -> None:
        super().__init__(f"the {backend} store cannot be used: {reason} (or set store_required: false in the policy)")
