"""Warm prefixes: the tiers a session may move to read its prompt ahead of time, in the background.

An agent's turn that escalates, or a sticky turn after an agent-reported error, lands on a tier
that has not seen the session: on a CPU server a 12k-token agent prompt costs that tier minutes
of prefill. So each tier whose policy says `sessions.warm` keeps every active session's prompt too:
when another tier takes a call of the session, `Warming.offer` queues the call's body for the warm
tiers (prefill only, `Prefills.prefill`: the tier's server reads it into the session's slot and
answers one token), and when an answer is delivered, the body with the answer appended and the
opening of what follows it — the prefix of the session's next turn. A server reads a prompt only to
answer after it, and refuses to continue an assistant message that made tool calls (llama-server:
"Cannot continue an assistant message that contains tool calls"), so the answer is followed by what
the client sends next: an empty result for each of its calls, else an empty user message. The next
turn shares everything up to that content; a turn that then lands there evaluates only its new tokens.

A warm-up never delays a live call. Per tier, one warm-up runs at a time, and only while no live
call is in flight on that tier; a live call that starts there cancels the warm-up in progress
(closing its connection: llama-server stops between batches and keeps what it read), which goes
back to the queue and resumes, from where the server's cache stands, once the tier is idle again.
The queue holds the newest body per session, at most `max_pending` sessions per tier (the oldest
goes first). Side calls (router/sessions/identity.py) are never warmed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from router.errors import UpstreamError
from router.policy.model import Policy
from router.sessions import Session
from router.upstream.base import Tiers, prefills

log = logging.getLogger("router.warming")


@dataclass(slots=True)
class _Job:
    session: Session
    body: dict[str, Any]
    timeout: float


class _TierQueue:
    """One tier's warm-ups: the newest body per session, run one at a time while the tier is idle."""

    def __init__(self) -> None:
        self.pending: OrderedDict[tuple[str, str], _Job] = OrderedDict()
        self.live = 0  # live calls in flight on this tier
        self.idle = asyncio.Event()
        self.idle.set()
        self.running: tuple[tuple[str, str], asyncio.Task[None]] | None = None
        self.worker: asyncio.Task[None] | None = None


class Warming:
    """Background prefill of active sessions on the tiers that keep them warm (module docstring)."""

    def __init__(
        self,
        upstreams: Tiers,
        counted: Callable[[str, str], None] = lambda tier, outcome: None,
        max_pending: int = 8,
    ) -> None:
        self._upstreams = upstreams
        self._counted = counted  # (tier, outcome): "done", "cancelled", "failed", "dropped"
        self._max_pending = max_pending
        self._tiers: dict[str, _TierQueue] = {}

    # -- live calls ----------------------------------------------------------------------------
    def live_started(self, tier: str) -> None:
        """A live call goes to `tier`: a warm-up running there stops now (and is queued again)."""
        q = self._queue_of(tier)
        q.live += 1
        q.idle.clear()
        if q.running is not None:
            q.running[1].cancel()

    def live_ended(self, tier: str) -> None:
        q = self._tiers.get(tier)
        if q is None or q.live == 0:
            return
        q.live -= 1
        if q.live == 0:
            q.idle.set()

    # -- offers -------------------------------------------------------------------------------
    def offer(
        self,
        policy: Policy,
        session: Session,
        body: Mapping[str, Any],
        answering: str,
        answer: Mapping[str, Any] | None = None,
    ) -> None:
        """`answering` takes (or took) this call: queue its prompt — with `answer` appended once it
        was delivered — on every other tier that keeps sessions warm."""
        if session.side:
            return
        targets = [t for t, cfg in policy.models.items() if cfg.sessions.warm and t != answering]
        if not targets:
            return
        warm = dict(body)
        if answer is not None:
            warm["messages"] = [*(body.get("messages") or ()), *_next_turn(answer)]
        for tier in targets:
            self._queue(tier, _Job(session, warm, policy.models[tier].timeouts.total))

    def _queue_of(self, tier: str) -> _TierQueue:
        q = self._tiers.get(tier)
        if q is None:
            q = self._tiers[tier] = _TierQueue()
        return q

    def _queue(self, tier: str, job: _Job) -> None:
        q = self._queue_of(tier)
        key = job.session.key
        q.pending.pop(key, None)
        q.pending[key] = job
        while len(q.pending) > self._max_pending:
            q.pending.popitem(last=False)
            self._counted(tier, "dropped")
        if q.worker is None or q.worker.done():
            q.worker = asyncio.get_running_loop().create_task(self._work(tier, q))

    async def _work(self, tier: str, q: _TierQueue) -> None:
        while q.pending:
            await q.idle.wait()
            if not q.pending:
                break
            key, job = q.pending.popitem(last=True)  # the session heard from last
            task = asyncio.get_running_loop().create_task(self._prefill(tier, job))
            q.running = (key, task)
            try:
                await asyncio.wait({task})
            finally:
                q.running = None
            if task.cancelled():  # a live call came: again later, unless a newer body came meanwhile
                self._counted(tier, "cancelled")
                if key not in q.pending:
                    q.pending[key] = job  # the newest: it resumes first

    async def _prefill(self, tier: str, job: _Job) -> None:
        try:
            upstream = self._upstreams[tier]
        except KeyError:  # the tier went away with a policy reload
            return
        if not prefills(upstream):
            return
        deadline = asyncio.get_running_loop().time() + job.timeout
        try:
            await upstream.prefill(job.body, job.session, deadline)
        except UpstreamError as exc:
            self._counted(tier, "failed")
            log.info("tier %s: a warm-up failed (%s)", tier, exc.message)
            return
        self._counted(tier, "done")

    async def close(self) -> None:
        tasks = [t for q in self._tiers.values() for t in (q.worker, q.running[1] if q.running else None) if t]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tiers.clear()

    def pending(self, tier: str) -> int:
        q = self._tiers.get(tier)
        return len(q.pending) + (q.running is not None) if q else 0


def _next_turn(answer: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The delivered answer as the client will send it back (role, content, tool calls), then the
    opening of the client's next message: an empty result per call, else an empty user message."""
    message: dict[str, Any] = {"role": "assistant", "content": answer.get("content") or ""}
    calls = answer.get("tool_calls")
    if not calls:
        return [message, {"role": "user", "content": ""}]
    message["tool_calls"] = calls
    results = [{"role": "tool", "tool_call_id": c.get("id") or "", "content": ""} for c in calls if isinstance(c, dict)]
    return [message, *results]
