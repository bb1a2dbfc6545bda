"""The console in a real browser: Debian's Chromium, headless, driven by Playwright (never a browser
it downloads). The page loads without errors; a call made through the proxy shows in the live tail
within 2 s; an escalated call shows its chain; a session made sticky by an error the agent reported
shows the sticky span; the savings the page shows are the API's. `AGENT_ROUTER_SCREENSHOTS=1` also
writes docs/console*.png (the README's and docs/console.md's pictures)."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from router.fake import FakeConfig
from tests.api.helpers import TOOLS, USER, get, post, sdk
from tests.api.test_feedback import EXTRA, Agent
from tests.api.test_worth import priced

playwright = pytest.importorskip("playwright.async_api")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DOCS = Path(__file__).resolve().parents[2] / "docs"
__all__ = ["sdk"]  # the fixture
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed")


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    async with playwright.async_playwright() as p:
        chromium = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            await chromium.close()


async def opened(browser: Any, url: str) -> tuple[Any, list[str]]:
    page = await browser.new_page(viewport={"width": 1440, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    await page.goto(url + "/console/")
    await page.wait_for_selector("#live:not(.off)", timeout=5000)  # the live tail is connected
    return page, errors


async def test_the_live_tail_shows_a_call_and_an_escalated_ones_chain(browser, start_fake_, proxy_) -> None:
    fast = await start_fake_(FakeConfig(seed=1, bad_tool_rate=1.0))  # every tool call broken: escalated
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(priced(fast.url, full.url))
    page, errors = await opened(browser, proxy.base)
    await page.click("nav button[data-tab=calls]")

    plain = await post(
        proxy.url + "/chat/completions", {"model": "auto", "messages": USER}, headers={"x-session-id": "page-1"}
    )
    row = page.locator("#tail tbody tr").first
    await row.wait_for(timeout=2000)  # pushed: within 2 s of the answer
    assert plain.headers["x-router-route"] in await row.inner_text()

    body = {
        "model": "auto",
        "messages": USER,
        "tools": TOOLS,
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    }
    escalated = await post(proxy.url + "/chat/completions", body, headers={"x-session-id": "page-1"})
    assert escalated.headers["x-router-escalated"] == "true"
    await page.wait_for_function("document.querySelectorAll('#tail tbody tr').length >= 2", timeout=2000)
    await page.locator("#tail tbody tr").first.click()
    detail = await page.locator("#detail").inner_text()
    assert "fast escalated" in detail and "full answered" in detail and "delivered by" in detail
    assert escalated.headers["x-router-mistakes"].split(",")[0] in detail
    if os.environ.get("AGENT_ROUTER_SCREENSHOTS"):
        await page.screenshot(path=str(DOCS / "console-calls.png"))
    assert errors == []


async def test_a_sticky_session_and_the_savings_the_api_reports(browser, start_fake_, proxy_, sdk) -> None:
    fast = await start_fake_(FakeConfig(seed=1))
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(priced(fast.url, full.url).replace("escalation: {to: full}\n", EXTRA))
    agent = Agent(sdk(proxy.url), "sticky-1")
    _, _, first = await agent.ask()
    agent.answer(first, "Error: file not found")  # the agent reports the routed call failed
    tier, route, second = await agent.ask()
    assert (tier, route) == ("full", "sticky")
    agent.answer(second, "Sunny, 21 C", arguments='{"city": "Lyon"}')
    await agent.ask()
    await proxy.runtime._flush_calls()

    page, errors = await opened(browser, proxy.base)
    api = (await get(proxy.base + "/console/api/overview")).json()
    saved = page.locator("#ov-saved")
    await page.wait_for_function("document.querySelector('#ov-saved').dataset.usd !== undefined")
    assert float(await saved.get_attribute("data-usd")) == api["saved_usd"]
    if os.environ.get("AGENT_ROUTER_SCREENSHOTS"):
        await page.screenshot(path=str(DOCS / "console.png"))

    await page.click("nav button[data-tab=sessions]")
    await page.locator("#session-list tbody tr[data-session='sticky-1']").click()
    await page.locator("#timeline tr.sticky").first.wait_for(timeout=2000)
    assert await page.locator("#timeline tr.sticky").count() == 2  # the sticky span: 2 calls
    assert "1 call(s) it reported failed" in await page.locator("#timeline").inner_text()
    session = (await get(proxy.base + "/console/api/sessions/sticky-1")).json()["session"]
    assert float(await page.locator("#session-saved").get_attribute("data-usd")) == session["saved_usd"]
    if os.environ.get("AGENT_ROUTER_SCREENSHOTS"):
        await page.screenshot(path=str(DOCS / "console-session.png"))
    assert errors == []
