"""`ServiceTiers`: the pooled HTTP client of OpenAI tiers (openai_compat.py), whose requests asking
for a service tier beyond the default — the tier's `service_tier`, or the client's on a lane that
forwards it — are sent once more without it when the provider refuses it for that ("Unsupported
service_tier: flex", a 429), before anything reached the client: as Anthropic's fast mode falls back
(speed.py). The answer's speed then says why (`Speed.fallback`), which the stats and metrics count.
A request asking for no service tier goes through PooledHTTP as it is.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

from router.errors import UpstreamStatus
from router.upstream.base import Chunk, Reply, Speed
from router.upstream.http import PooledHTTP
from router.upstream.speed import fallback, standard_payload


class ServiceTiers(PooledHTTP):
    async def post_json(
        self,
        url: str,
        data: bytes,
        deadline: float,
        convert: Callable[[bytes, dict[str, Any]], Reply],
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """PooledHTTP's; refused for the service tier it asks for, sent once more without it."""
        try:
            return await super().post_json(url, data, deadline, convert, headers)
        except UpstreamStatus as exc:
            reason = fallback(exc)
            plain = standard_payload(data) if reason is not None else None
            if plain is None:
                raise
        reply = await super().post_json(url, plain, deadline, convert, headers)
        reply.speed = Speed(reply.speed.served if reply.speed is not None else "default", reason)
        return reply

    def post_events(
        self,
        url: str,
        data: bytes,
        deadline: float,
        convert: Callable[[bytes], Chunk],
        headers: Mapping[str, str] | None = None,
    ) -> AsyncGenerator[Chunk, None]:
        """PooledHTTP's; refused for the service tier it asks for before its first event, sent once
        more without it (a stream that asks for none is PooledHTTP's as it is: no step per chunk)."""
        events = super().post_events(url, data, deadline, convert, headers)
        if b'"service_tier"' not in data:
            return events
        return self._tier_refused(url, data, deadline, convert, headers, events)

    async def _tier_refused(
        self,
        url: str,
        data: bytes,
        deadline: float,
        convert: Callable[[bytes], Chunk],
        headers: Mapping[str, str] | None,
        events: AsyncGenerator[Chunk, None],
    ) -> AsyncGenerator[Chunk, None]:
        try:
            try:
                first = await anext(events, None)
            except UpstreamStatus as exc:
                reason = fallback(exc)
                plain = standard_payload(data) if reason is not None else None
                if plain is None:
                    raise
            else:
                if first is not None:
                    yield first
                async for chunk in events:
                    yield chunk
                return
        finally:
            await events.aclose()

        def told(raw: bytes) -> Chunk:  # every chunk says why it is at the default tier
            chunk = convert(raw)
            chunk.speed = Speed(chunk.speed.served if chunk.speed is not None else "default", reason)
            return chunk

        standard = super().post_events(url, plain, deadline, told, headers)
        try:
            async for chunk in standard:
                yield chunk
        finally:
            await standard.aclose()
