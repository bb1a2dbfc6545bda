"""A response's head goes out with its first body part, in one write (router/connections.py,
`OneWrite`): unit checks of the transport wrapper, and real servers answering every kind of response."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import orjson

from router.connections import OneWrite
from router.fake import FakeConfig
from tests.api.helpers import USER
from tests.conftest import policy_text


class Recording(asyncio.Transport):
    """A transport that keeps what is written (each write as one item)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


async def test_the_head_waits_for_the_first_body_part() -> None:
    sent = Recording()
    out = OneWrite(sent, asyncio.get_running_loop())
    out.write(b"HTTP/1.1 200 OK\r\n\r\n")
    assert sent.writes == []
    out.write(b"body")
    out.write(b"more")
    assert sent.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody", b"more"]
    await asyncio.sleep(0)  # the fallback flush finds nothing held
    assert len(sent.writes) == 2


async def test_a_head_without_a_body_part_goes_out_alone_at_the_end_of_the_loop_turn() -> None:
    sent = Recording()
    out = OneWrite(sent, asyncio.get_running_loop())
    out.write(b"HTTP/1.1 200 OK\r\n\r\n")
    await asyncio.sleep(0)
    assert sent.writes == [b"HTTP/1.1 200 OK\r\n\r\n"]
    out.write(b"late body")
    assert sent.writes[-1] == b"late body"


async def test_an_interim_100_continue_is_not_held_and_close_flushes() -> None:
    sent = Recording()
    out = OneWrite(sent, asyncio.get_running_loop())
    out.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert sent.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    out.write(b"HTTP/1.1 200 OK\r\n\r\n")
    out.close()
    assert sent.writes[-1] == b"HTTP/1.1 200 OK\r\n\r\n" and sent.closed


@contextlib.asynccontextmanager
async def connection(base: str) -> Any:
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def test_responses_of_every_kind_arrive_whole(start_fake_, proxy_) -> None:
    """HEAD (no body write), 100-continue, JSON, SSE and a kept-alive connection's next request."""
    fast = await start_fake_(FakeConfig(seed=1))
    proxy = await proxy_(policy_text(fast.url))
    async with connection(proxy.base) as (reader, writer):
        writer.write(b"HEAD /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        async with asyncio.timeout(5):
            head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        body = orjson.dumps({"model": "auto", "messages": USER})
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"expect: 100-continue\r\ncontent-length: %d\r\n\r\n" % len(body)
        )
        async with asyncio.timeout(5):
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 100")
        writer.write(body)
        async with asyncio.timeout(5):
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line[15:]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:"))
            answer = orjson.loads(await reader.readexactly(length))
        assert head.startswith(b"HTTP/1.1 200") and answer["choices"]
        stream = orjson.dumps({"model": "auto", "messages": USER, "stream": True})
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % len(stream) + stream
        )
        async with asyncio.timeout(5):
            sse = await reader.readuntil(b"0\r\n\r\n")  # the chunked body's end
        assert sse.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in sse
