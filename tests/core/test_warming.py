"""router/core/live/warming.py: sessions' prompts read ahead on the tiers they may move to, never in a
live call's way. The tiers are in-process objects that answer `prefill` when a test lets them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from router.core.live.warming import Warming
from router.policy.model import Policy
from router.sessions import Session

TOOLS = [{"type": "function", "function": {"name": "Read", "parameters": {"type": "object"}}}]


def policy(warm_fast: bool = False) -> Policy:
    return Policy.model_validate(
        {
            "version": 1,
            "models": {
                "fast": {"model": "openai/f", "api_base": "http://127.0.0.1:1/v1", "sessions": {"warm": warm_fast}},
                "full": {"model": "openai/g", "api_base": "http://127.0.0.1:2/v1", "sessions": {"warm": True}},
            },
            "routes": [{"name": "default", "use": "fast"}],
            "escalation": {"to": "full"},
        }
    )


class Prefilling:
    """A tier whose prefills run until the test lets each one finish (`done`), or are cancelled."""

    def __init__(self) -> None:
        self.started: list[tuple[str, list[Any]]] = []  # (session id, messages)
        self.finished: list[str] = []
        self.cancelled = 0
        self.done = asyncio.Event()

    async def prefill(self, body: dict[str, Any], session: Session, deadline: float) -> None:
        self.started.append((session.id, body["messages"]))
        try:
            await self.done.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.finished.append(session.id)


def session(sid: str, side: bool = False) -> Session:
    return Session(sid, {"messages": [{"role": "system", "content": "agent"}], "tools": TOOLS}, side=side)


def call_body(*texts: str) -> dict[str, Any]:
    return {"model": "auto", "messages": [{"role": "user", "content": t} for t in texts], "tools": TOOLS}


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.fixture
async def tiers() -> Any:
    tiers = {"fast": Prefilling(), "full": Prefilling()}
    warming = Warming(tiers, max_pending=2)
    yield warming, tiers
    await warming.close()


async def test_the_other_tier_reads_the_prompt_then_the_answer(tiers: Any) -> None:
    warming, t = tiers
    warming.offer(policy(), session("s"), call_body("hi"), "fast")
    await settle()
    assert t["full"].started == [("s", [{"role": "user", "content": "hi"}])]
    assert t["fast"].started == []  # the tier answering needs no warm-up; fast does not warm anyway
    t["full"].done.set()
    await settle()
    answer = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function"}], "x": 1}
    warming.offer(policy(), session("s"), call_body("hi"), "fast", answer)
    await settle()
    # the answer, then what the client sends next: its call's (empty) result
    assert t["full"].started[-1][1][-2:] == [
        {"role": "assistant", "content": "", "tool_calls": answer["tool_calls"]},
        {"role": "tool", "tool_call_id": "c1", "content": ""},
    ]
    assert t["full"].finished == ["s", "s"]


async def test_a_text_answer_is_followed_by_an_empty_user_message(tiers: Any) -> None:
    warming, t = tiers
    warming.offer(policy(), session("s"), call_body("hi"), "fast", {"role": "assistant", "content": "Hello."})
    await settle()
    assert t["full"].started[-1][1] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": ""},
    ]


async def test_a_live_call_stops_the_warm_up_which_resumes_once_the_tier_is_idle(tiers: Any) -> None:
    warming, t = tiers
    warming.offer(policy(), session("s"), call_body("hi"), "fast")
    await settle()
    warming.live_started("full")
    await settle()
    assert t["full"].cancelled == 1 and warming.pending("full") == 1
    warming.live_started("full")
    warming.live_ended("full")
    await settle()
    assert len(t["full"].started) == 1  # still one live call in flight: nothing starts
    t["full"].done.set()
    warming.live_ended("full")
    await settle()
    assert len(t["full"].started) == 2 and t["full"].finished == ["s"]
    assert warming.pending("full") == 0


async def test_the_newest_body_per_session_and_a_bounded_queue(tiers: Any) -> None:
    warming, t = tiers
    warming.live_started("full")  # nothing runs meanwhile: offers queue up
    for sid, text in (("a", "1"), ("b", "1"), ("a", "2"), ("c", "1")):
        warming.offer(policy(), session(sid), call_body(text), "fast")
    assert warming.pending("full") == 2  # b dropped: the oldest beyond max_pending
    t["full"].done.set()
    warming.live_ended("full")
    await settle()
    assert [(sid, m[-1]["content"]) for sid, m in t["full"].started] == [("c", "1"), ("a", "2")]


async def test_side_calls_are_never_warmed_and_warm_tiers_only(tiers: Any) -> None:
    warming, t = tiers
    warming.offer(policy(), session("s", side=True), call_body("title?"), "fast")
    warming.offer(policy(warm_fast=True), session("s"), call_body("hi"), "full")
    await settle()
    assert t["full"].started == [] and [sid for sid, _ in t["fast"].started] == ["s"]
