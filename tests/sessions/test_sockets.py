"""Seats and the process's budget of upstream WebSockets (router/sessions/sockets.py), with stand-in sockets."""

from __future__ import annotations

import asyncio

from router.sessions.sockets import Budget, Seat, Seats


class Socket:
    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True


def opened(seats: Seats[Socket], session: str) -> tuple[Socket, Seat[Socket]]:
    seat = seats.take(session)
    assert seat is not None and seats.budget.admit(seat)
    socket = Socket()
    seats.opened(seat, socket)
    return socket, seat


async def test_the_budget_closes_the_idlest_socket_and_never_one_in_a_turn() -> None:
    budget = Budget(max_sockets=2, idle=60, max_age=3600, fallback=30)
    fast, full = Seats[Socket](budget), Seats[Socket](budget)  # two tiers, one budget
    a, seat_a = opened(fast, "a")
    b, seat_b = opened(full, "b")
    fast.release(seat_a)
    c, seat_c = opened(fast, "c")  # past the bound: a's idle socket goes
    await budget.settled()
    assert a.closed and not b.closed and len(budget) == 2
    d = fast.take("d")
    assert d is not None and not budget.admit(d)  # b and c are in turns: no room (HTTP)
    assert fast.take("c") is None  # a second turn of a session in a turn: HTTP
    for seats, seat in ((full, seat_b), (fast, seat_c), (fast, d)):
        seats.release(seat)
    await fast.close_all()
    await full.close_all()
    assert b.closed and c.closed and len(budget) == 0


async def test_idle_sockets_close_failed_sessions_wait_and_old_ones_are_stale() -> None:
    budget = Budget(max_sockets=4, idle=0.05, max_age=0.1, fallback=0.1)
    seats = Seats[Socket](budget)
    socket, seat = opened(seats, "s")
    assert not seats.stale(seat)
    seats.release(seat)
    await asyncio.sleep(0.1)
    await budget.settled()
    assert socket.closed and len(budget) == 0  # idle past its time
    socket, seat = opened(seats, "s")
    await asyncio.sleep(0.11)
    assert seats.stale(seat)
    seats.failed(seat)
    seats.release(seat)
    assert seats.take("s") is None  # on HTTP a while
    await asyncio.sleep(0.11)
    again = seats.take("s")
    assert again is not None and again.socket is None and again.last is None
    seats.release(again)
    await budget.settled()
    assert socket.closed


async def test_no_socket_at_all_with_a_budget_of_none() -> None:
    assert Seats[Socket](Budget(max_sockets=0)).take("s") is None


async def test_seats_are_bounded() -> None:
    budget = Budget(max_sockets=1)
    seats = Seats[Socket](budget)
    for i in range(200):
        seat = seats.take(f"s{i}")
        assert seat is not None
        seats.release(seat)
    assert len(seats) <= 64
