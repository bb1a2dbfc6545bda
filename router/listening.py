"""Listening sockets: bound once, handed from worker to worker, closed without resetting a connection.

A connection the kernel has taken (handshake done) waits in its listening socket's accept queue
until a process accepts it; when the last descriptor of that socket closes, every connection still
queued is reset. So the socket must never close with connections queued on it:

    listening_socket(host, port)   a TCP socket bound to the port (SO_REUSEPORT by default). Under
                                   `serve --workers N` the supervisor binds N of them once and keeps
                                   them for its whole life; worker i accepts from socket i, and so
                                   does the worker that replaces it (router/supervisor.py): a worker
                                   that stops only stops accepting, its queue is the new one's
    defer_accept(sock, seconds)    Linux TCP_DEFER_ACCEPT: a connection is queued only once its
                                   first bytes arrive (router/connections.py)
    close_gently(sockets, quiet, limit)
                                   before the last process serving a socket closes it (SIGTERM): the
                                   kernel drops new connection requests from then on (`refuse_new`),
                                   and the caller's event loop accepts what is still queued until
                                   the queue has stayed empty for `quiet` seconds (at most `limit`).
                                   Then the socket can close with nothing queued on it: a client
                                   whose SYN was dropped sends it again (after 1 s, Linux's first
                                   retransmission) and is refused then (ECONNREFUSED) — it never
                                   sent its request
"""

from __future__ import annotations

import asyncio
import ctypes
import math
import select
import socket
import struct
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["close_gently", "defer_accept", "listening_socket", "refuse_new"]

SO_ATTACH_FILTER = getattr(socket, "SO_ATTACH_FILTER", 26)  # Linux's value; Python names it only from 3.12
# A classic BPF socket filter on a TCP listening socket sees each segment from its TCP header on.
# It drops a segment whose flags are SYN without ACK (a new connection request) and keeps every
# other one: the last ACK of a handshake under way, and the first bytes of a deferred connection.
_SYN_ONLY = [
    (0x30, 0, 0, 13),  # ldb [13]          the TCP flags byte
    (0x54, 0, 0, 0x12),  # and #0x12        SYN | ACK
    (0x15, 0, 1, 0x02),  # jeq #SYN, drop, keep
    (0x06, 0, 0, 0),  # drop: ret #0
    (0x06, 0, 0, 0xFFFFFFFF),  # keep: ret #-1
]


def listening_socket(host: str, port: int, reuse_port: bool = True) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def defer_accept(sock: Any, seconds: float) -> bool:
    """Set TCP_DEFER_ACCEPT on a listening TCP socket; False where the platform has none."""
    option = getattr(socket, "TCP_DEFER_ACCEPT", None)
    if option is None or seconds <= 0 or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    sock.setsockopt(socket.IPPROTO_TCP, option, math.ceil(seconds))
    return True


def refuse_new(sock: Any) -> bool:
    """From now on the kernel drops new connection requests to `sock` (every process's descriptor of
    it); handshakes under way still complete. False where it cannot (not Linux, not TCP)."""
    if not hasattr(socket, "TCP_DEFER_ACCEPT") or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    code = b"".join(struct.pack("HBBI", *op) for op in _SYN_ONLY)
    buffer = ctypes.create_string_buffer(code)
    program = struct.pack("HP", len(_SYN_ONLY), ctypes.addressof(buffer))  # struct sock_fprog
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, program)
    except OSError:
        return False
    return True


def _queued(sockets: Sequence[Any]) -> bool:
    """A connection waits in one of the sockets' accept queues."""
    readable, _, _ = select.select(list(sockets), [], [], 0)
    return bool(readable)


async def close_gently(sockets: Sequence[Any], quiet: float, limit: float) -> None:
    """`refuse_new` on each socket, then wait while this event loop (still accepting from them)
    takes what is queued: until no connection has been queued for `quiet` seconds, or `limit`."""
    for sock in sockets:
        refuse_new(sock)
    now = time.monotonic()
    deadline, calm_since = now + limit, now
    while now < deadline and now - calm_since < quiet:
        await asyncio.sleep(0.01)
        now = time.monotonic()
        if _queued(sockets):
            calm_since = now
