"""A prompt no tier's context takes, on the Responses API: an HTTP 400 `context_length_exceeded`,
and on a stream — SSE and WebSocket mode — a `response.failed` with that code, as OpenAI's API
sends it (Codex compacts its conversation on that event, not on an HTTP error)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from router.fake import FakeConfig
from tests.api.helpers import fake_requests
from tests.conftest import policy_text
from tests.responses.conftest import recv_response

TOO_LONG = "a." * 1000  # ~2000 tokens to the fake's tokenizer, ~500 to the router's estimate


async def tiers(start_fake_: Any, proxy_: Any) -> Any:
    fast = await start_fake_(FakeConfig(n_ctx=128))
    full = await start_fake_(FakeConfig(n_ctx=1024))
    proxy = await proxy_(policy_text(fast.url, full.url, extra="escalation: {to: full}\n"))
    await proxy.runtime.windows.settled(5)
    return full, proxy


def assert_failed(events: list[Any]) -> None:
    assert [e.type for e in events] == ["response.created", "response.in_progress", "response.failed"]
    assert [e.sequence_number for e in events] == [0, 1, 2]
    failed = events[-1].response
    assert failed.status == "failed" and failed.error.code == "context_length_exceeded"
    assert "maximum context length is 1024 tokens" in failed.error.message


async def test_http(start_fake_, proxy_, sdk) -> None:
    full, proxy = await tiers(start_fake_, proxy_)
    with pytest.raises(openai.BadRequestError) as info:
        await sdk(proxy.url).responses.create(model="auto", input=TOO_LONG)
    assert info.value.code == "context_length_exceeded"
    stream = await sdk(proxy.url).responses.create(model="auto", input=TOO_LONG, stream=True)
    assert_failed([event async for event in stream])
    assert len(await fake_requests(full.url)) == 2


async def test_websocket_mode(start_fake_, proxy_, sdk) -> None:
    _, proxy = await tiers(start_fake_, proxy_)
    async with sdk(proxy.url).responses.connect() as conn:
        await conn.response.create(model="auto", input=TOO_LONG)
        assert_failed(await recv_response(conn))
        await conn.response.create(model="auto", input="Hi")  # the connection goes on
        assert (await recv_response(conn))[-1].type == "response.completed"
