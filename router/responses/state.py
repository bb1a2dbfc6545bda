"""What `previous_response_id` resolves to: each response's chat history, in bounded LRU caches.

Two caches hold `Stored` entries:

* one per WebSocket connection (`ws_max_responses` entries), so a connection's own chain never
  depends on what other clients do to the shared cache;
* one per process (`responses_cache_entries` entries and `responses_cache_bytes` bytes), for HTTP
  and for a WebSocket connection that continues a chain begun elsewhere (a reconnect).

Histories are tuples of the same message dicts: a follow-up's entry shares its predecessor's messages
and only adds its own, so an entry's `size` counts only the bytes it added and the byte bound is
close to the real memory held. Entries are never mutated once stored.

This state lives in the process, not in `router.store`: the store's session state is small,
per-session and must answer fast on every call, while histories are large and need their whole
chain to be useful. A multi-process deployment would need sticky connections (WebSocket mode has
them by nature) or a shared backend for this cache.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class Stored:
    messages: tuple[dict[str, Any], ...]  # the chat history through this response, without instructions
    session: str  # the session of the chain's first response
    size: int = 0  # bytes of the messages this response added


def stored(history: Sequence[dict[str, Any]], added: Sequence[dict[str, Any]], session: str) -> Stored:
    return Stored((*history, *added), session, len(orjson.dumps(list(added))) if added else 0)


class ResponseCache:
    """Bounded LRU of `Stored` by response id: the least recently used go first."""

    def __init__(self, max_entries: int, max_bytes: int | None = None) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self.evicted = 0
        self._entries: OrderedDict[str, Stored] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, response_id: object) -> bool:
        return response_id in self._entries

    def get(self, response_id: str) -> Stored | None:
        entry = self._entries.get(response_id)
        if entry is not None:
            self._entries.move_to_end(response_id)
        return entry

    def put(self, response_id: str, entry: Stored) -> None:
        if self.max_entries <= 0:
            return
        old = self._entries.pop(response_id, None)
        if old is not None:
            self.bytes -= old.size
        self._entries[response_id] = entry
        self.bytes += entry.size
        while len(self._entries) > self.max_entries or (
            self.max_bytes is not None and self.bytes > self.max_bytes and len(self._entries) > 1
        ):
            _, gone = self._entries.popitem(last=False)
            self.bytes -= gone.size
            self.evicted += 1
