"""A user-space WAN emulator: a TCP relay that adds latency (this machine has no netem).

    python -m bench.ttft.wan --listen-port L --target-port P --rtt-ms 50

Each accepted connection is relayed to the target. Bytes in each direction are delivered RTT/2
after they were read, in order; the first bytes from the client are held one RTT more, standing in
for the TCP handshake (SYN, SYN-ACK) that a real path would cost before the first data arrives.
Bandwidth is not limited and nothing is dropped: latency only.

Timers are asyncio's (about 1 ms of resolution), so each direction may deliver up to ~1 ms late;
the benchmark measures the relay's own error and reports it next to the results.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket

CHUNK = 64 * 1024
QUEUE = 256  # chunks in flight per direction: the reader waits beyond it (TCP backpressure)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float, first_extra: float) -> None:
    """Copy reader → writer, delivering each chunk `delay` seconds after it was read."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(QUEUE)

    async def read() -> None:
        extra, last = first_extra, 0.0
        while True:
            data = await reader.read(CHUNK)
            at = max(loop.time() + delay + extra, last)  # never overtake what is already queued
            extra, last = 0.0, at
            await queue.put((at, data))
            if not data:
                return

    async def write() -> None:
        while True:
            at, data = await queue.get()
            if (wait := at - loop.time()) > 0:
                await asyncio.sleep(wait)
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(read())
        tasks.create_task(write())


async def _relay(
    client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, host: str, port: int, rtt: float
) -> None:
    try:
        server_r, server_w = await asyncio.open_connection(host, port)
    except OSError:
        client_w.close()
        return
    for w in (client_w, server_w):
        sock = w.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(_pump(client_r, server_w, rtt / 2, rtt))  # the handshake's extra RTT
            tasks.create_task(_pump(server_r, client_w, rtt / 2, 0.0))
    except* (ConnectionError, OSError):
        pass
    finally:
        for w in (client_w, server_w):
            w.close()
            with contextlib.suppress(ConnectionError, OSError):
                await w.wait_closed()


async def serve(listen_port: int, target_host: str, target_port: int, rtt: float) -> None:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _relay(r, w, target_host, target_port, rtt)

    server = await asyncio.start_server(handle, "127.0.0.1", listen_port)
    print(f"wan relay 127.0.0.1:{listen_port} -> {target_host}:{target_port}, rtt {rtt * 1000:.0f} ms", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen-port", type=int, required=True)
    parser.add_argument("--target-host", default="127.0.0.1")
    parser.add_argument("--target-port", type=int, required=True)
    parser.add_argument("--rtt-ms", type=float, default=50.0)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.listen_port, args.target_host, args.target_port, args.rtt_ms / 1000))


if __name__ == "__main__":
    main()
