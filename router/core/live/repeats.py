"""Requests whose every attempt failed the checks, remembered so that a repeat is not run the same way.

An agent retries the router's retryable `checks_failed` error with the very same request. Run the
same way again, a greedy tier fails it the same way, each retry costing up to `max_attempts` upstream
calls for nothing. So the router remembers such a request by a digest of what its tiers are asked
(the call's chat body after its lane, keys sorted, without the fields that do not change a greedy
answer: `stream`, `stream_options`, `max_tokens`, `max_completion_tokens` — Claude Code retries a
failed stream unstreamed, with a smaller `max_tokens`), and runs a repeat of it as the policy's
`escalation.repeat` says (router/policy/model.py; `Attempts` applies it, router/flow/attempts.py):

    repeats 1 .. resample   resampled: every attempt on `repeat.tier` (default: the escalation chain's
                            last tier), at `repeat.temperature`, without the client's `seed`
    the next one            refused at once, no upstream call: a non-retryable `checks_failed`; the
                            error of the last resampled run is already non-retryable, so a client
                            that honours `x-should-retry` does not come back

A repeat tier whose `params` pin temperature 0 answers a resampled run as greedily as the first: no
repeat is resampled, the first run's error is already non-retryable and says why (`Resampling`).

A run that passes forgets the request. Bounded: at most `repeat_max_entries` requests (the least
recently failed dropped first), each forgotten `repeat_ttl` seconds after its last failed run
(router/settings.py). A call computes the digest only while a remembered request has its shape
(model, prompt size, tools, messages): with nothing remembered, a call costs one truth test.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from router.core.call import Call
from router.errors import ChecksFailed, ChecksFailedRepeatedly
from router.policy.model import Policy

Shape = tuple[str, int, tuple[str, ...], str | None, int]
# fields of a request that do not change what a greedy tier answers: a repeat may differ in them
NOT_ASKED = frozenset({"stream", "stream_options", "max_tokens", "max_completion_tokens"})


@dataclass(slots=True)
class Seen:
    """What the memory says of one call: its digest once computed, and how many runs of the same
    request failed every attempt in a row before it (0: none remembered, not a repeat)."""

    call: Call  # as the client sent it (a resampled run's own body differs)
    key: bytes | None = None
    runs: int = 0


@dataclass(slots=True)
class _Entry:
    runs: int
    at: float  # when its last run failed (clock seconds)
    shape: Shape = field(compare=False)


def shape_of(call: Call) -> Shape:
    """What a repeat must share with the request it repeats, read from its parsed features (no encoding)."""
    f = call.features
    messages = call.body.get("messages")
    return f.model, f.prompt_tokens, f.tool_names, f.last_role, len(messages) if isinstance(messages, list) else 0


def digest(call: Call) -> bytes:
    """The request as its tiers are asked it — its chat body without the `NOT_ASKED` fields, keys
    sorted — in its session, from its client's key: one session's retries are never another's."""
    body = {k: v for k, v in call.body.items() if k not in NOT_ASKED}
    h = hashlib.blake2b(orjson.dumps(body, option=orjson.OPT_SORT_KEYS), digest_size=16)
    headers = call.headers
    for part in (call.session.id, headers.get("authorization", ""), headers.get("x-api-key", "")):
        h.update(b"\0" + part.encode())
    return h.digest()


class Repeats:
    """Exhausted requests by digest → runs that failed in a row (bounded LRU with a TTL)."""

    def __init__(self, max_entries: int, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = max_entries
        self.ttl = ttl
        self.clock = clock
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()  # least recently failed first
        self._shapes: Counter[Shape] = Counter()  # shapes of the remembered requests

    def __len__(self) -> int:
        return len(self._entries)

    def seen(self, call: Call) -> Seen:
        """How many runs of `call`'s request failed every attempt in a row (0: not a repeat)."""
        if not self._entries:
            return Seen(call)
        self._expire()
        if shape_of(call) not in self._shapes:
            return Seen(call)
        key = digest(call)
        entry = self._entries.get(key)
        return Seen(call, key, entry.runs if entry is not None else 0)

    def exhausted(self, seen: Seen) -> int:
        """Another run of the request failed every attempt: how many have, in a row, now."""
        if seen.key is None:
            seen.key = digest(seen.call)
        entry = self._entries.pop(seen.key, None)
        if entry is None:
            entry = _Entry(0, 0.0, shape_of(seen.call))
            self._shapes[entry.shape] += 1
        entry.runs += 1
        entry.at = self.clock()
        self._entries[seen.key] = entry
        while len(self._entries) > self.max_entries:
            self._drop(next(iter(self._entries)))
        return entry.runs

    def answered(self, seen: Seen) -> None:
        """A run of the request passed: it is forgotten."""
        if seen.key is not None and seen.key in self._entries:
            self._drop(seen.key)

    def _expire(self) -> None:
        oldest = self.clock() - self.ttl
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            if entry.at > oldest:
                return
            self._drop(key)

    def _drop(self, key: bytes) -> None:
        entry = self._entries.pop(key)
        self._shapes[entry.shape] -= 1
        if self._shapes[entry.shape] <= 0:
            del self._shapes[entry.shape]


@dataclass(frozen=True, slots=True)
class Resampling:
    """How the repeats of an exhausted request are run, as the policy's `escalation.repeat` says."""

    tier: str  # every attempt of a resampled run: `repeat.tier`, else the chain's last, else the routed tier
    temperature: float  # what `tier` answers it at: `repeat.temperature`, unless its `params` pin their own
    runs: int  # repeats resampled, the later ones refused: `repeat.resample`, 0 when `greedy`

    @property
    def greedy(self) -> bool:
        """`tier` answers at temperature 0: a resampled run could not differ from the run it repeats."""
        return self.temperature == 0

    @property
    def stop(self) -> str:
        """Why a request that failed every run it was given is not run again, as its client is told."""
        if self.greedy:
            return (f"Its tiers answer greedily (temperature 0 on {self.tier}, where a retry would run): asked again "
                    "it fails the same way: change the request.")  # fmt: skip
        return "Asked the same way it fails the same way: change the request."

    @classmethod
    def of(cls, policy: Policy, routed: str) -> Resampling | None:
        """The resampling of a call `policy` routed to tier `routed` (None: `repeat: null`)."""
        repeat = policy.escalation.repeat
        if repeat is None:
            return None
        chain = policy.escalation.chain
        tier = repeat.tier or (chain[-1] if chain else routed)
        model = policy.models.get(tier)
        pinned = model.pinned_temperature if model is not None else None
        temperature = pinned if pinned is not None else repeat.temperature
        return cls(tier, temperature, 0 if temperature == 0 else repeat.resample)


def resampled(call: Call, temperature: float) -> Call:
    """`call` as a resampled run sends it: `temperature` set and the client's `seed` dropped, in the chat
    body and in the request a tier of the client's own API takes (a tier's `params` still win)."""

    def body_of(body: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in body.items() if k != "seed"}
        out["temperature"] = temperature
        return out

    native = call.native
    if native is not None:
        native = dataclasses.replace(native, body=body_of(native.body))
    return dataclasses.replace(call, body=body_of(call.body), native=native)


def refused(runs: int, resampling: Resampling | None, tier: str) -> ChecksFailedRepeatedly:
    """The error of a repeat that is not run: `runs` runs of the request failed every attempt."""
    stop = resampling.stop if resampling is not None else ""
    failed = "in its last run" if runs == 1 else f"in each of its last {runs} runs"
    return ChecksFailedRepeatedly(f"This request failed the router's checks {failed}; it was not run again. {stop}",
                                  tier=tier)  # fmt: skip


def checks_failed(
    mistakes: Sequence[str], streamed: bool, resampling: Resampling | None, runs: int, tier: str
) -> ChecksFailed:
    """The error of a call whose every attempt failed the checks (`mistakes`), saying what the client
    has (`streamed`: text): retryable while a repeat of the request would be run again (resampled,
    its `runs` so far), else not."""
    kinds = ", ".join(dict.fromkeys(mistakes))
    sent = "nothing was delivered"
    if streamed:  # text is not held: the client has it
        sent = "no tool call was delivered, only the text already streamed"
    failed = f"Every answer failed the router's checks ({kinds})"
    if resampling is None:
        return ChecksFailed(f"{failed}; {sent}. Retrying may succeed.", tier=tier)
    if runs <= resampling.runs:
        retry = "A retry of this request is run again resampled, and may succeed."
        return ChecksFailed(f"{failed}; {sent}. {retry}", tier=tier)
    if runs > 1:
        failed += f", in each of its last {runs} runs"
    return ChecksFailedRepeatedly(f"{failed}; {sent}. {resampling.stop}", tier=tier)
