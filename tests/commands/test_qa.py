"""`agent-router qa` (router/commands/qa.py): samples a real proxy kept (SQLite file, Redis), judged by calling
the policy's tiers directly — the fake upstream as fast, tests/reference.py as full and judge."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from router.commands.qa import Options, main
from router.fake import FakeServer
from router.store import open_store
from router.store.base import Sample
from tests.conftest import Proxy
from tests.core.test_shadow import Start, call, policy, settled
from tests.reference import Reference, reference_tier
from tests.store.conftest import delete_prefix, redis_base_url  # noqa: F401 (a fixture, used by name)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def ref() -> AsyncIterator[Reference]:
    async with reference_tier() as r:
        yield r


async def recorded(proxy_: Start, fake: FakeServer, ref: Reference, db: Path, tools: list[str]) -> Proxy:
    """A proxy in shadow mode `record` on a SQLite file, after one call per tool in `tools`."""
    text = policy(fake.url, ref.url, shadow="{rate: 1.0, mode: record}", store=f"sqlite:///{db}")
    # room for every sample even when SQLite writes lag on a busy machine (the busy bound is tested elsewhere)
    proxy: Proxy = await proxy_(text, shadow_max_inflight=len(tools))
    for tool in tools:
        await call(proxy, tool)
    await settled(proxy)
    return proxy


async def qa_json(capsys: pytest.CaptureFixture[str], proxy: Proxy, options: Options) -> tuple[int, Any]:
    code = await main(proxy.policy_path, None, ["tools"], options, as_json=True)
    out = capsys.readouterr().out
    return code, orjson.loads(out) if out.strip() else None


async def test_qa_judges_recorded_samples_and_recommends(
    ref: Reference, fake: FakeServer, proxy_: Start, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proxy = await recorded(proxy_, fake, ref, tmp_path / "state.db", ["good"] * 9 + ["bad"])
    assert ref.answers == []  # recorded only: nothing was asked while serving
    code, (report,) = await qa_json(capsys, proxy, Options(min_samples=5, pass_rate=0.9))
    assert code == 0
    assert {k: report[k] for k in ("route", "tier", "reference", "samples", "judged", "passed", "failed")} == {
        "route": "tools",
        "tier": "fast",
        "reference": "full",
        "samples": 10,
        "judged": 10,
        "passed": 9,
        "failed": 1,
    }
    assert report["pass_rate"] == 0.9 and report["mean_score"] == 83.0 and report["recommendation"] == "fast"
    assert [f["reason"] for f in report["failures"]] == ["wrong tool"]
    assert len(ref.answers) == 10 and len(ref.questions) == 10
    # verdicts were written back: a stricter run asks nobody again, and recommends the reference tier
    code, (strict,) = await qa_json(capsys, proxy, Options(min_samples=5, pass_rate=0.95))
    assert code == 0 and strict["recommendation"] == "full" and strict["passed"] == 9
    assert len(ref.answers) == 10 and len(ref.questions) == 10
    # too few verdicts: no recommendation
    code, (few,) = await qa_json(capsys, proxy, Options(min_samples=11))
    assert few["recommendation"] is None
    # --rejudge asks the judge again, reusing the kept reference answers; counters count each sample once
    await qa_json(capsys, proxy, Options(rejudge=True))
    assert len(ref.answers) == 10 and len(ref.questions) == 20
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    await store.start()
    try:
        shadow = (await store.stats())["shadow"]["tools"]
        assert (shadow["agreed"], shadow["disagreed"], shadow["agreement"]) == (9, 1, 0.9)
        kept = await store.samples_get("tools", 100)
        assert all(s.verdict is not None and s.reference_tier == "full" for s in kept)
    finally:
        await store.close()


async def test_qa_counts_shadow_verdicts_as_they_are(
    ref: Reference, fake: FakeServer, proxy_: Start, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proxy: Proxy = await proxy_(policy(fake.url, ref.url, store=f"sqlite:///{tmp_path / 'state.db'}"))
    for tool in ("good", "bad", "bad"):
        await call(proxy, tool)
    await settled(proxy)
    asked = (len(ref.answers), len(ref.questions))
    _, (report,) = await qa_json(capsys, proxy, Options(min_samples=3))
    assert (len(ref.answers), len(ref.questions)) == asked == (3, 3)  # judged while serving: not again
    assert (report["passed"], report["failed"], report["recommendation"]) == (1, 2, "full")


async def test_unusable_stores_and_no_samples_exit_1(
    ref: Reference, fake: FakeServer, proxy_: Start, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    in_memory: Proxy = await proxy_(policy(fake.url, ref.url))
    assert await main(in_memory.policy_path, None, [], Options(), as_json=False) == 1
    assert "memory:// store lives inside the serving process" in capsys.readouterr().out
    empty: Proxy = await proxy_(policy(fake.url, ref.url, store=f"sqlite:///{tmp_path / 'empty.db'}"))
    assert await main(empty.policy_path, None, [], Options(), as_json=False) == 1
    assert "no samples in the store" in capsys.readouterr().out
    assert await main(tmp_path / "missing.yaml", None, [], Options(), as_json=False) == 1
    assert "cannot read the policy file" in capsys.readouterr().out


async def test_cli_prints_the_table_and_failures(
    ref: Reference, fake: FakeServer, proxy_: Start, tmp_path: Path
) -> None:
    proxy = await recorded(proxy_, fake, ref, tmp_path / "state.db", ["good", "good", "bad"])
    cmd = [sys.executable, "-m", "router", "qa", "--policy", str(proxy.policy_path), "--route", "tools"]
    cmd += ["--min-samples", "3", "--pass-rate", "0.5"]
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
    )
    out, err = await proc.communicate()
    text = out.decode()
    assert proc.returncode == 0, err.decode()
    assert "distillation QA" in text and "fast→full" in text and "66.7%" in text
    row = next(line for line in text.splitlines() if "tools" in line and "%" in line)
    assert row.rstrip(" │").endswith("fast")  # the recommendation column
    assert "✗ tools" in text and "wrong tool — differs: A calls another tool than B" in text


@pytest.mark.redis
async def test_qa_reads_samples_kept_in_redis(
    ref: Reference,
    fake: FakeServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    redis_url: str = request.getfixturevalue("redis_base_url")  # the store tests' own redis-server
    prefix = f"agent-router-test:{uuid.uuid4().hex}:"
    monkeypatch.setenv("AGENT_ROUTER_STORE_PREFIX", prefix)  # as `serve` would have been started
    path = tmp_path / "p.yaml"
    path.write_text(policy(fake.url, ref.url, shadow="{rate: 1.0, mode: record}"))
    store = open_store(redis_url, prefix=prefix)
    await store.start()
    try:
        tools = [{"type": "function", "function": {"name": "good", "parameters": {}}}]
        question = {"model": "auto", "messages": [{"role": "user", "content": "q"}], "tools": tools}
        for name in ("good", "bad"):
            answer = {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": name, "arguments": "{}"}}]}
            await store.samples_put(Sample("tools", "fast", question, answer))
        assert await main(path, redis_url, [], Options(min_samples=2), as_json=True) == 0
        (report,) = orjson.loads(capsys.readouterr().out)
        assert (report["samples"], report["passed"], report["failed"], report["recommendation"]) == (2, 1, 1, "full")
        assert all(s.verdict is not None for s in await store.samples_get("tools", 10))
        assert (await store.stats())["shadow"]["tools"]["agreement"] == 0.5
    finally:
        await store.close()
        await delete_prefix(redis_url, prefix)
