"""Where a tier keeps a session's prompt prefix: which replica, and which slot of that replica's server.

An agent's prompt is long and the same at the front of every turn (Claude Code's about 12k tokens,
Codex's 13k). A server that still holds a prompt evaluates only what was added to it: llama.cpp's
`llama-server` keeps each slot's last prompt (`cache_prompt`) and takes a request into the slot it
names (`id_slot`); vLLM and SGLang cache prefixes by themselves, per replica. So a tier's client asks
`Affinity.place(session)` before each call, and gets:

    replica   the same for every call of a session (rendezvous hashing of its id over the tier's
              `api_base` list): stable across router processes and restarts
    slot      (tiers with `sessions.slots`) the slot that holds this session's prefix — the one it had,
              else an idle one holding another session of the same prefix (the same agent's
              instructions and tools: a new `claude -p` after the last), else a free one, else the
              one used longest ago that no call is using; side calls
              (router/sessions/identity.py) take only the first `side_slots` slots and main prompts
              only the others, so a title or a quota probe never evicts an agent's prompt

A slot is held (`Lease`) while a call runs in it: another session is placed elsewhere rather than
queued behind it. The slot table is per process and bounded by the slot count; a restart re-pins
sessions as they come (what the servers still hold is found again by the first call that lands there).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

from router.sessions.identity import Session

_NO_SESSION = ("", "")


@dataclass(slots=True)
class _Slot:
    owner: tuple[str, str] | None = None  # the session key whose prompt it holds
    used: float = 0.0  # monotonic time a call last started in it
    calls: int = 0  # calls running in it now


@dataclass(slots=True)
class Lease:
    """A call's place: replica index and slot (None: the server chooses). `release()` when the call ends."""

    replica: int
    slot: int | None
    _held: _Slot | None = field(default=None, repr=False)

    def release(self) -> None:
        if self._held is not None:
            self._held.calls -= 1
            self._held = None


class Affinity:
    """Session → replica and slot, for one tier (`replicas` servers of `slots` slots each)."""

    def __init__(self, replicas: int = 1, slots: int = 0, side_slots: int = 0) -> None:
        self.replicas = max(1, replicas)
        self.slots = slots
        self.side = side_slots if 0 < side_slots < slots else 0  # with no slot left for main prompts: shared
        self._table = [[_Slot() for _ in range(slots)] for _ in range(self.replicas)]
        self.evicted = 0  # main prompts whose slot went to another session

    def place(self, session: Session | None) -> Lease:
        """The call's replica and slot (`session` None: a call of no session — a verifier's, a
        shadow comparison's — placed as a side call). The caller releases the lease."""
        side = session is None or session.side
        replica = self._replica(session.id) if session is not None else 0
        if not self.slots:
            return Lease(replica, None)
        slots = self._table[replica]
        key = session.key if session is not None else _NO_SESSION
        lo, hi = (0, self.side) if side and self.side else (self.side, self.slots)
        pinned = next((i for i in range(lo, hi) if slots[i].owner == key), None)
        chosen = pinned if pinned is not None else self._free(slots, lo, hi, key[1])
        slot = slots[chosen]
        if slot.owner != key:
            if slot.owner is not None and not side:
                self.evicted += 1
            slot.owner = key
        slot.used = time.monotonic()
        slot.calls += 1
        return Lease(replica, chosen, slot)

    def _replica(self, session_id: str) -> int:
        if self.replicas == 1:
            return 0
        return max(range(self.replicas), key=lambda r: hashlib.blake2b(f"{r}:{session_id}".encode()).digest())

    @staticmethod
    def _free(slots: list[_Slot], lo: int, hi: int, prefix: str) -> int:
        """For a session new here: an idle slot whose prompt opens the same way (another session of
        the same agent: its instructions and tools are read already), else a slot never used, else
        the idle one used longest ago, else the one used longest ago."""
        span = range(lo, hi)
        alike = [i for i in span if slots[i].calls == 0 and (owner := slots[i].owner) and owner[1] == prefix]
        if alike:
            return max(alike, key=lambda i: slots[i].used)
        empty = next((i for i in span if slots[i].owner is None), None)
        if empty is not None:
            return empty
        return min(span, key=lambda i: (slots[i].calls > 0, slots[i].used))

    def held(self) -> list[list[tuple[str, str] | None]]:
        """Per replica, the session key each slot holds (for stats and tests)."""
        return [[s.owner for s in slots] for slots in self._table]
