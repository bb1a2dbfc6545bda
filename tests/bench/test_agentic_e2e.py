"""bench/agentic end to end: each agent loop (the Agents SDK over Responses and over chat
completions, the plain Anthropic loop) through the real router — a configuration's own policy,
bench/agentic/policies/ or policies/local.yaml — in front of real upstreams on free ports:

- the fake upstream (router/fake/), the fast tier breaking every tool call: every loop ends, no
  broken call reaches the agent, every call's routing is recorded and agrees with the router's
  stats, and a run resumes;
- the oracle (bench/agentic/oracle.py), which plays each task's scripted run: a correct run is a
  success through every loop, the router's translations included, and a near miss is a failure;
- a fast tier whose every call is broken, without the router's escalation (fast-only): the
  mistakes reach the agent and are counted by kind;

then the report from those results."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.agentic.loops import LOOPS
from bench.agentic.oracle import oracle_app
from bench.agentic.report import FAKE_NOTE, write
from bench.agentic.run import CONFIGS, results_path, run_config, run_task
from bench.agentic.tasks import BY_ID
from router.fake import FakeConfig, FakeServer
from tests.conftest import Proxy, free_socket, serve_app

pytest.importorskip("agents", reason="openai-agents is not installed (the `dev` extra pins it)")
pytest.importorskip("anthropic", reason="anthropic is not installed (the `dev` extra pins it)")

TASKS = [BY_ID[i] for i in ("ch-sales-north", "rc-lee-infra", "lc-hist-budget")]  # chain, recovery, no tool
SECONDS = 60.0  # per task: the upstreams answer at once


def _port(url: str) -> str:
    return url.split(":")[2].split("/")[0]


@pytest.fixture(autouse=True)
def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")


@pytest.fixture
def router_(
    proxy_: Callable[..., Awaitable[Proxy]], monkeypatch: pytest.MonkeyPatch
) -> Callable[[str, str, str], Awaitable[Proxy]]:
    """`await router_(config, fast_url, full_url)`: the router with the configuration's own policy file,
    its tiers' ports pointed at the given upstreams."""

    async def start(config: str, fast_url: str, full_url: str) -> Proxy:
        monkeypatch.setenv("FAST_API_BASE", fast_url)
        monkeypatch.setenv("FULL_API_BASE", full_url)
        return await proxy_(CONFIGS[config].policy.read_text(), store="memory://")

    return start


def _records(out: Path, config: str, loop: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in results_path(out, config, loop).read_bytes().splitlines()]


@pytest.mark.parametrize("loop", LOOPS)
async def test_each_loop_through_the_router_in_front_of_the_fake(
    start_fake_: Callable[..., Awaitable[FakeServer]],
    router_: Callable[[str, str, str], Awaitable[Proxy]],
    tmp_path: Path,
    loop: str,
) -> None:
    fast = await start_fake_(FakeConfig(seed=3, bad_tool_rate=1.0, finish_after=2))
    full = await start_fake_(FakeConfig(seed=4, finish_after=2))
    proxy = await router_("routed", fast.url, full.url)
    counts = await run_config(CONFIGS["routed"], [loop], TASKS, proxy.base, tmp_path, upstream="fake", seconds=SECONDS)
    assert counts == {"run": 3, "skipped": 0, "unreachable": 0}
    records = _records(tmp_path, "routed", loop)
    assert [r["task"] for r in records] == [t.id for t in TASKS]
    for r in records:
        assert r["error"] is None and r["upstream"] == "fake", r  # each loop ended on the fake's text answer
        assert r["steps"] == len(r["calls"]) >= 2 and r["tool_calls"] >= 1, r
        assert all(c["status"] == 200 and c["tier"] in ("fast", "full") and c["route"] for c in r["calls"]), r
        assert r["reached"] == {}, r  # the router escalated whatever the fast fake broke
        assert r["tokens"]["input"] > 0 and r["tokens"]["output"] > 0, r
    stats = (await _stats(proxy))["routes"]  # calls there are attempts: an escalated call counts each
    escalated = sum(r["escalated"] for r in records)
    assert escalated >= 1 and sum(int(s.get("escalations", 0)) for s in stats.values()) == escalated
    assert stats.get("sticky", {}).get("calls", 0) == sum(r["sticky"] for r in records)
    caught: Counter[str] = Counter()
    for r in records:
        caught.update(r["caught"])
    said: Counter[str] = Counter()
    for s in stats.values():
        said.update({k: v for k, v in s["mistakes"].items() if k != "agent_reported_error"})
    assert caught == said
    # resumed: nothing is run again
    again = await run_config(CONFIGS["routed"], [loop], TASKS, proxy.base, tmp_path, upstream="fake", seconds=SECONDS)
    assert again == {"run": 0, "skipped": 3, "unreachable": 0}
    assert len(_records(tmp_path, "routed", loop)) == 3


async def _stats(proxy: Proxy) -> dict[str, Any]:
    import httpx

    async with httpx.AsyncClient() as client:
        return (await client.get(f"{proxy.url}/router/stats")).json()  # type: ignore[no-any-return]


@pytest.mark.parametrize("loop", LOOPS)
async def test_a_correct_run_is_a_success_and_a_near_miss_a_failure(
    router_: Callable[[str, str, str], Awaitable[Proxy]], tmp_path: Path, loop: str
) -> None:
    async with serve_app(oracle_app()) as right, serve_app(oracle_app(wrong=True)) as wrong:
        proxy = await router_("routed", right, right)
        await run_config(CONFIGS["routed"], [loop], TASKS, proxy.base, tmp_path, upstream="oracle", seconds=SECONDS)
        proxy = await router_("fast-only", wrong, wrong)
        await run_config(CONFIGS["fast-only"], [loop], TASKS, proxy.base, tmp_path, upstream="oracle", seconds=SECONDS)
    good = {r["task"]: r for r in _records(tmp_path, "routed", loop)}
    assert all(r["ok"] and r["failed_checks"] == [] and r["error"] is None for r in good.values()), good
    for task in TASKS:
        assert good[task.id]["steps"] == len(task.solution.steps) + 1
        assert good[task.id]["tool_calls"] == len(task.solution.steps)
    recovery = good["rc-lee-infra"]  # its first call fails ("Lee" is ambiguous), the agent reports it
    assert (recovery["tool_errors"], recovery["recovered"]) == (1, 1)
    assert recovery["sticky"] == recovery["on_full"] == 2  # the calls after it, on full: sticky
    assert good["lc-hist-budget"]["tool_calls"] == 0
    bad = _records(tmp_path, "fast-only", loop)
    assert len(bad) == 3 and not any(r["ok"] for r in bad) and all(r["failed_checks"] for r in bad), bad


@pytest.mark.parametrize("loop", LOOPS)
async def test_without_escalation_broken_calls_reach_the_agent(
    start_fake_: Callable[..., Awaitable[FakeServer]],
    router_: Callable[[str, str, str], Awaitable[Proxy]],
    tmp_path: Path,
    loop: str,
) -> None:
    """fast-only delivers what the tier wrote: every call names a tool nobody offered."""
    fast = await start_fake_(FakeConfig(seed=5, bad_tool_rate=1.0, bad_kinds=("unknown_tool",), finish_after=1))
    proxy = await router_("fast-only", fast.url, fast.url)
    record, infra = await run_task(BY_ID["ch-port"], "fast-only", loop, proxy.base, upstream="fake", seconds=SECONDS)
    assert not infra and not record["ok"]
    first = record["calls"][0]
    assert first["exhausted"] and first["mistakes"] == ["unknown_tool"] and first["tier"] == "fast"
    assert record["reached"]["unknown_tool"] >= 1 and record["caught"] == {}
    if loop.startswith("agents"):  # the SDK refuses a tool it does not have: the run ends there
        assert "not found in agent" in (record["error"] or ""), record
    else:  # the plain loop answers it with an error result and goes on
        assert record["tool_calls"] >= 1 and record["error"] is None, record


async def test_a_router_that_cannot_be_reached_is_not_a_result(tmp_path: Path) -> None:
    with free_socket() as sock:  # bound, never listening: connections are refused
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        for loop in LOOPS:
            record, infra = await run_task(BY_ID["ch-port"], "routed", loop, base, upstream="x", seconds=SECONDS)
            assert infra and not record["ok"] and record["error"], record


async def test_the_report_of_a_run(router_: Callable[[str, str, str], Awaitable[Proxy]], tmp_path: Path) -> None:
    async with serve_app(oracle_app()) as right:
        for config in ("full-only", "routed"):
            proxy = await router_(config, right, right)
            await run_config(CONFIGS[config], ["agents-chat"], TASKS, proxy.base, tmp_path, upstream="fake",
                             seconds=SECONDS)  # fmt: skip
    report = write(tmp_path)
    summary = orjson.loads((tmp_path / "summary.json").read_bytes())
    assert list(summary["configs"]) == ["full-only", "routed"]
    for name, entry in summary["configs"].items():
        assert {"tasks", "success_rate", "p50_seconds", "p95_seconds", "full_share"} <= set(entry)
        assert entry["tasks"] == 3 and entry["success_rate"] == 1.0 and entry["loops"]["agents-chat"]["tasks"] == 3
        assert entry["full_share"] == (1.0 if name == "full-only" else round(2 / 7, 4))  # routed: the sticky calls
    assert summary["goal"]["measured"] is False and "fake" in summary["goal"]["why_not"]
    text = report.read_text()
    assert FAKE_NOTE in text and "| routed · agents-chat | 3 | 100.0% | 1.00 |" in text
    assert (tmp_path / "success-vs-time.png").stat().st_size > 10_000
