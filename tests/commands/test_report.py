"""`agent-router stats` and `agent-router report` against a running proxy with known traffic.

The CLI runs as a subprocess (`python -m router ...`): it is synchronous, and the proxy it reads
runs in this test's event loop, which must keep serving meanwhile.
"""

from __future__ import annotations

import asyncio
import os
import re
import struct
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from router.commands.report import _escalation_rates, _rates, fetch, tier_key, tool_key
from router.fake import FakeConfig, FakeServer
from tests.conftest import Proxy, policy_text

StartFake = Callable[..., Awaitable[FakeServer]]
StartProxy = Callable[..., Awaitable[Proxy]]
ROOT = Path(__file__).resolve().parents[2]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLOTS = ("tiers.png", "tools.png", "escalation.png", "latency.png")
EXTRA = "escalation: {to: full}\n"
USER = [{"role": "user", "content": "What is the weather in Paris?"}]


def _tool(name: str, arg: str) -> dict[str, Any]:
    params = {"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]}
    return {"type": "function", "function": {"name": name, "parameters": params}}


WEATHER = [_tool("get_weather", "city")]
READ_FILE = [_tool("read_file", "path")]  # the fast fake breaks every read_file call


async def cli(*args: str, seconds: float = 60.0) -> tuple[int, str, str]:
    """Run `python -m router ARGS` in a subprocess; (exit code, stdout, stderr)."""
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb", "MPLBACKEND": "Agg"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "router",
        *args,
        cwd=ROOT,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), seconds)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _traffic(proxy: Proxy, weather: int, read_file: int, text: int) -> None:
    async with openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0) as c:
        for tools, n, expected in (
            (WEATHER, weather, ("fast", "false")),
            (READ_FILE, read_file, ("full", "true")),
            (None, text, ("full", "false")),
        ):
            for _ in range(n):
                kwargs: dict[str, Any] = {"tools": tools} if tools else {}
                raw = await c.chat.completions.with_raw_response.create(model="auto", messages=USER, **kwargs)
                raw.parse()
                assert (raw.headers["x-router-tier"], raw.headers["x-router-escalated"]) == expected


async def _proxy(start_fake_: StartFake, proxy_: StartProxy) -> Proxy:
    fast = await start_fake_(FakeConfig(seed=1, bad_tool_rates={"read_file": 1.0}, bad_kinds=("invalid_json",)))
    full = await start_fake_(FakeConfig(seed=2))
    return await proxy_(policy_text(fast.url, full.url, extra=EXTRA))


def _table(stdout: str) -> dict[tuple[str, str], list[str]]:
    """Rows of the Rich table: (scope, name) → [calls, mistakes, rate, by kind]."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃|]", line)]
        cells = cells[1:-1] if len(cells) >= 8 else []
        if len(cells) == 6 and cells[0] and cells[0] != "scope":
            rows[(cells[0], cells[1])] = cells[2:]
    return rows


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE, data[:8]
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert data.endswith(b"IEND\xaeB`\x82"), "truncated PNG"
    return width, height


async def test_stats_prints_a_table_of_tiers_routes_and_tools(start_fake_: StartFake, proxy_: StartProxy) -> None:
    proxy = await _proxy(start_fake_, proxy_)
    await _traffic(proxy, weather=4, read_file=2, text=1)

    code, out, err = await cli("stats", "--url", proxy.base)
    assert code == 0, err
    assert f"agent-router {proxy.base}" in out and "all time" in out
    rows = _table(out)
    assert rows[("tier", "fast")] == ["6", "2", "33.3%", "invalid_json 2"]
    assert rows[("tier", "full")] == ["3", "0", "0.0%", ""]
    assert rows[("route", "simple-tool-call")] == ["8", "2", "25.0%", "invalid_json 2"]
    assert rows[("route", "default")] == ["1", "0", "0.0%", ""]
    assert rows[("tool@fast", "get_weather")] == ["4", "0", "0.0%", ""]
    assert rows[("tool@fast", "read_file")] == ["2", "2", "100.0%", "invalid_json 2"]
    assert rows[("tool@full", "read_file")] == ["2", "0", "0.0%", ""]
    assert len(rows) == 7, rows
    assert "store: memory  healthy=True  pending=0  dropped=0" in out

    code, out, err = await cli("stats", "--url", proxy.base, "--window", "600")
    assert code == 0, err
    assert "last 600 s" in out
    assert _table(out)[("tier", "fast")] == ["6", "2", "33.3%", "invalid_json 2"]


async def test_stats_with_a_client_key(start_fake_: StartFake, proxy_: StartProxy) -> None:
    fake = await start_fake_(FakeConfig(seed=1))
    proxy = await proxy_(policy_text(fake.url, extra=EXTRA), client_keys=["sk-report-test"])
    code, out, err = await cli("stats", "--url", proxy.base)
    assert code != 0 and "fast" not in out
    assert "401" in err or "nauthorized" in err, err
    code, out, err = await cli("stats", "--url", proxy.base, "--key", "sk-report-test")
    assert code == 0, err
    assert "agent-router" in out and "sk-report-test" not in out + err


async def test_report_writes_html_and_pngs(start_fake_: StartFake, proxy_: StartProxy, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plots need the `report` extra")
    proxy = await _proxy(start_fake_, proxy_)
    await _traffic(proxy, weather=4, read_file=2, text=1)
    out_dir = tmp_path / "report"

    code, out, err = await cli("report", "--url", proxy.base, "--out", str(out_dir))
    assert code == 0, err
    page = out_dir / "index.html"
    assert f"report written to {page}" in out.replace("\n", "")
    assert sorted(p.name for p in out_dir.iterdir()) == sorted([*PLOTS, "index.html"])
    for name in PLOTS:
        data = (out_dir / name).read_bytes()
        assert len(data) > 5_000, (name, len(data))  # axes, labels and lines: not an empty canvas
        assert _png_size(data) == (990, 396), name  # 9 x 3.6 in at 110 dpi
    html = page.read_text()
    assert html.startswith("<!doctype html>")
    for name in PLOTS:
        assert f'<img src="{name}"' in html
    assert re.search(r"<tr><td>fast</td><td>6</td><td>33\.3%</td><td>invalid_json 2</td></tr>", html), html
    assert re.search(r"<tr><td>full</td><td>3</td><td>0\.0%</td><td></td></tr>", html), html
    assert proxy.base in html


@pytest.mark.parametrize(
    ("kind", "escalation", "tier", "escalated"),
    [
        ("invalid_json", "{to: full}", "full", 1.0),  # the mistake names the tool; escalated
        ("unknown_tool", "{to: full}", "full", 1.0),  # an invented name: recorded without a tool
        ("invalid_json", "{to: full, on: [timeout]}", "fast", 0.0),  # counted, not escalated
    ],
    ids=["tool-mistake-escalated", "toolless-mistake-escalated", "mistake-not-escalated"],
)
async def test_report_rates_match_the_stats(
    start_fake_: StartFake, proxy_: StartProxy, kind: str, escalation: str, tier: str, escalated: float
) -> None:
    """Every fast answer is fumbled: the plotted fast mistake rate is 1 per answer whether or not the
    mistake names a tool and whether or not the call escalated (an escalation is not a mistake)."""
    fast = await start_fake_(FakeConfig(seed=1, bad_tool_rates={"read_file": 1.0}, bad_kinds=(kind,)))
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(policy_text(fast.url, full.url, extra=f"escalation: {escalation}\n"))
    async with openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0) as c:
        for _ in range(4):
            raw = await c.chat.completions.with_raw_response.create(model="auto", messages=USER, tools=READ_FILE)
            assert (raw.headers["x-router-tier"], raw.headers["x-router-mistakes"]) == (tier, kind)
    stats = orjson.loads(await asyncio.to_thread(fetch, proxy.base, "/v1/router/stats"))
    assert stats["tiers"]["fast"]["mistake_rate"] == 1.0

    rows = orjson.loads(await asyncio.to_thread(fetch, proxy.base, "/v1/router/series?since=0&bucket=3600"))["rows"]
    tiers = _rates(rows, tier_key)
    assert set(tiers) == ({"fast", "full"} if tier == "full" else {"fast"}), tiers
    assert tiers["fast"][1] and all(rate == 1.0 for rate in tiers["fast"][1]), tiers
    assert all(rate == 0.0 for rate in tiers.get("full", ([], []))[1]), tiers
    if kind == "invalid_json":
        tools = _rates(rows, tool_key)
        assert all(rate == 1.0 for rate in tools["read_file@fast"][1]), tools
    assert all(rate == escalated for rate in _escalation_rates(rows)["escalated"][1])
