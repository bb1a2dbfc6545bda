"""The console's JSON API (router/console/api.py) on a real proxy: who may see it, the sessions and
their calls as the call log keeps them (the same through `GET /v1/router/sessions`), the overview,
and the live tail — a call appears on it, pushed, the moment it ends."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from router.fake import FakeConfig
from tests.api.helpers import TOOLS, USER, get, post
from tests.api.test_worth import priced
from tests.conftest import policy_text


async def settle(proxy) -> None:  # type: ignore[no-untyped-def]
    """The finished calls written to the store's call log (it is written every 0.5 s)."""
    await proxy.runtime._flush_calls()


async def test_sessions_and_their_calls_come_from_the_call_log(start_fake_, proxy_) -> None:
    fast = await start_fake_(FakeConfig(seed=1, bad_tool_rate=1.0))
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(priced(fast.url, full.url))
    body = {"model": "auto", "messages": USER, "tools": TOOLS, "tool_choice": "required"}
    for _ in range(2):
        r = await post(proxy.url + "/chat/completions", body, headers={"x-session-id": "console-1"})
        assert r.status == 200
    await settle(proxy)
    listed = (await get(proxy.base + "/console/api/sessions")).json()["sessions"]
    assert [s["id"] for s in listed] == ["console-1"]
    one = listed[0]
    assert one["calls"] == 2 and one["escalated"] == 2 and one["tiers"] == {"full": 2}
    assert one["cost_usd"] > one["baseline_cost_usd"] > 0  # each call paid for fast's failed attempt too
    assert one["saved_usd"] == pytest.approx(one["baseline_cost_usd"] - one["cost_usd"], abs=1e-6)
    same = (await get(proxy.base + "/v1/router/sessions")).json()["sessions"]
    assert same == listed
    session = (await get(proxy.base + "/console/api/sessions/console-1")).json()
    assert session["session"] == one
    call = session["calls"][0]
    assert [a["tier"] for a in call["attempts"]] == ["fast", "full"]
    assert call["attempts"][0]["how"] == "escalated" and call["attempts"][0]["mistakes"]
    assert call["attempts"][1]["how"] == "answered" and call["attempts"][1]["usage"]["output"] > 0
    assert (await get(proxy.base + "/v1/router/sessions/console-1")).json()["calls"][0]["id"] == call["id"]
    assert (await get(proxy.base + "/console/api/sessions/nobody")).status == 404
    overview = (await get(proxy.base + "/console/api/overview")).json()
    assert overview["escalated"] == 2 and overview["baseline"] == "full" and overview["saved_usd"] == one["saved_usd"]
    assert {t["name"]: t["price"] for t in overview["tiers"]} == {"fast": "declared", "full": "declared"}


async def test_a_call_is_pushed_to_the_live_tail_as_it_ends(start_fake_, proxy_) -> None:
    fast = await start_fake_(FakeConfig(seed=1))
    proxy = await proxy_(policy_text(fast.url))
    async with aiohttp.ClientSession() as http, http.get(proxy.base + "/console/api/calls/live") as live:
        assert live.status == 200 and live.headers["content-type"].startswith("text/event-stream")
        assert (await live.content.readline()) == b": watching\n"
        await live.content.readline()
        r = await post(proxy.url + "/chat/completions", {"model": "auto", "messages": USER, "tools": TOOLS},
                       headers={"x-session-id": "tail-1"})  # fmt: skip
        assert r.status == 200
        line = await asyncio.wait_for(live.content.readline(), 2)
        call = json.loads(line.removeprefix(b"data: "))
        assert call["session"] == "tail-1" and call["tier"] == r.headers["x-router-tier"]
        assert call["route"] == r.headers["x-router-route"] and call["attempts"][0]["how"] == "answered"


async def test_the_console_asks_for_the_admin_key_where_there_are_client_keys(start_fake_, proxy_) -> None:
    fast = await start_fake_(FakeConfig(seed=1))
    policy = policy_text(fast.url).replace("store: memory://", 'store: memory://\nclient_keys: ["client-key"]')
    off = await proxy_(policy)
    r = await get(off.base + "/console/api/overview", headers={"authorization": "Bearer client-key"})
    assert r.status == 403 and b"AGENT_ROUTER_ADMIN_KEY" in r.body
    assert (await get(off.base + "/console/")).status == 403
    keyed = await proxy_(policy, admin_key="admin-secret")
    assert (await get(keyed.base + "/console/api/overview")).status == 401
    assert (
        await get(keyed.base + "/console/api/overview", headers={"authorization": "Bearer client-key"})
    ).status == 401
    ok = await get(keyed.base + "/console/api/overview", headers={"x-admin-key": "admin-secret"})
    assert ok.status == 200 and b"admin-secret" not in ok.body
    page = await get(keyed.base + "/console/")
    assert page.status == 200 and b"admin key" in page.body  # the page asks for it; no key in a URL


async def test_beyond_loopback_with_no_key_the_console_is_off(start_fake_, proxy_, caplog) -> None:
    fast = await start_fake_(FakeConfig(seed=1))
    with caplog.at_level("WARNING", logger="router.console"):
        proxy = await proxy_(policy_text(fast.url), host="0.0.0.0")
    assert "beyond loopback" in caplog.text
    assert (await get(proxy.base + "/console/api/sessions")).status == 403


async def test_the_api_describes_itself(start_fake_, proxy_) -> None:
    fast = await start_fake_(FakeConfig(seed=1))
    proxy = await proxy_(policy_text(fast.url))
    schema = (await get(proxy.base + "/console/api/openapi.json")).json()
    assert {"/overview", "/sessions", "/sessions/{session_id}", "/calls", "/calls/live", "/series"} <= set(
        schema["paths"]
    )
    docs = await get(proxy.base + "/console/api/docs")
    assert docs.status == 200 and b"swagger" in docs.body.lower()


async def test_a_call_that_ended_in_an_error_is_logged_with_it(start_fake_, proxy_) -> None:
    fast = await start_fake_(FakeConfig(seed=1, bad_tool_rate=1.0))
    full = await start_fake_(FakeConfig(seed=2, bad_tool_rate=1.0))  # every answer broken: no attempt passes
    proxy = await proxy_(priced(fast.url, full.url))
    body = {"model": "auto", "messages": USER, "tools": TOOLS, "tool_choice": "required"}
    r = await post(proxy.url + "/chat/completions", body, headers={"x-session-id": "failing-1"})
    assert r.status == 502
    await settle(proxy)
    session = (await get(proxy.base + "/console/api/sessions/failing-1")).json()
    call = session["calls"][0]
    assert call["error"] == r.json()["error"]["code"] and call["exhausted"] is True
    assert [a["how"] for a in call["attempts"]][-1] == "failed" and session["session"]["exhausted"] == 1
    assert call["cost_usd"] > 0  # the attempts' answers were paid for, though none was delivered
