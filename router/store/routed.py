"""Routed tool calls in the Redis store (router/store/redis.py): known to the process that delivered
them at once, and to every replica before the answer that carries them ends.

`RedisStore.routed_put` remembers the calls in process (`Recent`, bounded, least recent dropped)
before its first await, then writes them to Redis — coalesced with the puts of calls ending at the
same time, one round trip — and returns once they are written, or after `StoreOptions.write_wait`
seconds, the write going on in the background (`Put`: a task of its own, never cancelled with its
caller). The flow awaits it before the answer's end leaves (router/flow/record.py), so an error the
agent reports at once finds the call on any replica; only a Redis slower than `write_wait` leaves
the other replicas to miss it (the delivering one still knows).

`routed_take` consults the process's own record first. Redis decides once the call's write has
landed (its write awaited first, at most `op_timeout`): a call another replica took is not taken
again. A call whose write never landed (Redis down) is taken from the process's record alone.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from router.store.base import RoutedCall

__all__ = ["RECENT_ROUTED", "Known", "Put", "Recent", "decide", "put_args", "routed"]

RECENT_ROUTED = 10_000  # routed calls one process remembers itself (least recently delivered dropped)


@dataclass(slots=True)
class Put:
    """One `routed_put`'s write: its script arguments, and whether Redis acknowledged it."""

    args: list[str | int]
    ok: bool = False
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def pending(self) -> bool:
        return self.task is not None and not self.task.done()


@dataclass(frozen=True, slots=True)
class Known:
    call: RoutedCall
    put: Put


class Recent:
    """The routed calls this process delivered, by (session, call id): bounded, least recent dropped."""

    def __init__(self, limit: int = RECENT_ROUTED) -> None:
        self.limit = limit
        self._known: OrderedDict[tuple[str, str], Known] = OrderedDict()

    def __len__(self) -> int:
        return len(self._known)

    def add(self, session: str, calls: Sequence[RoutedCall], put: Put) -> None:
        for c in calls:
            key = (session, c.call_id)
            self._known.pop(key, None)
            self._known[key] = Known(c, put)
        while len(self._known) > self.limit:
            self._known.popitem(last=False)

    def get(self, session: str, call_id: str) -> Known | None:
        return self._known.get((session, call_id))

    def take(self, session: str, call_id: str) -> Known | None:
        return self._known.pop((session, call_id), None)


def put_args(prefix: str, session: str, calls: Sequence[RoutedCall], keep: int, ttl_ms: int) -> list[str | int]:
    """ROUTED_PUT's keys and arguments (router/store/redis_scripts.py): the session's last `keep` calls."""
    args: list[str | int] = [f"{prefix}r:{session}", f"{prefix}rl:{session}", keep, ttl_ms]
    args += [x for c in calls[-keep:] for x in (c.call_id, json.dumps([c.tier, c.route, c.tool, c.arguments]))]
    return args


def routed(call_id: str, raw: str | bytes | None) -> RoutedCall | None:
    return None if raw is None else RoutedCall(call_id, *json.loads(raw))


def decide(known: Known | None, reached: bool, found: RoutedCall | None) -> RoutedCall | None:
    """What `routed_take` (or `_get`) answers: Redis' call when it has it; else the process's own when
    Redis could not be asked, or never got the call (its write failed: no other replica can have it)."""
    if found is not None:
        return found
    if known is not None and (not reached or not known.put.ok):
        return known.call
    return None
