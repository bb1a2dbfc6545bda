"""The log's lines to stderr (router/log_output.py): written in batches, within the flush interval,
warnings at once, nothing lost when `serve` exits gracefully, the same line as logging's default."""

from __future__ import annotations

import asyncio
import io
import logging
import signal
import time
import weakref
from pathlib import Path

import pytest

from router.log_output import FORMAT, BufferedStream, Formatter
from tests.conftest import policy_text
from tests.test_serve import _calls, serve


def _record(msg: str, level: int = logging.INFO, created: float | None = None) -> logging.LogRecord:
    record = logging.LogRecord("router.access", level, __file__, 1, msg, None, None)
    if created is not None:
        record.created, record.msecs = created, (created - int(created)) * 1000
    return record


def test_the_line_is_loggings_own() -> None:
    ours, theirs = Formatter(), logging.Formatter(FORMAT)
    for created in (1_700_000_000.0, 1_700_000_000.0004, 1_700_000_000.999, 1_700_000_001.5, time.time()):
        record = _record("POST /v1/chat/completions 200 tier=fast", created=created)
        assert ours.format(record) == theirs.format(record)


def test_info_lines_wait_and_a_warning_takes_them_along_in_order() -> None:
    out = io.StringIO()
    handler = BufferedStream(out, interval=60, size=1 << 20)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.handle(_record("one"))
    handler.handle(_record("two"))
    assert out.getvalue() == ""
    handler.handle(_record("three", logging.WARNING))
    assert out.getvalue() == "INFO one\nINFO two\nWARNING three\n"
    handler.handle(_record("four"))
    logging.shutdown([weakref.ref(handler)])  # as uvicorn's logging configuration does; the root keeps it
    assert out.getvalue().endswith("WARNING three\nINFO four\n")
    handler.handle(_record("five"))
    assert out.getvalue().endswith("WARNING three\nINFO four\n")
    handler.stop()  # at exit
    assert out.getvalue().endswith("WARNING three\nINFO four\nINFO five\n")
    handler.handle(_record("six"))  # once stopped, at once
    assert out.getvalue().endswith("INFO five\nINFO six\n")


def test_lines_go_out_at_the_size_bound_and_within_the_interval() -> None:
    out = io.StringIO()
    handler = BufferedStream(out, interval=0.2, size=40)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.handle(_record("a" * 30))
    assert out.getvalue() == ""
    handler.handle(_record("b" * 30))  # 62 characters waiting: over the bound
    assert out.getvalue() == "a" * 30 + "\n" + "b" * 30 + "\n"
    handler.handle(_record("c"))
    deadline = time.monotonic() + 2
    while out.getvalue().count("\n") < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert out.getvalue().endswith("\nc\n")
    assert time.monotonic() < deadline - 1.5  # about 0.2 s
    handler.stop()


def test_no_interval_writes_each_line_at_once() -> None:
    out = io.StringIO()
    handler = BufferedStream(out, interval=0, size=1 << 20)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.handle(_record("now"))
    assert out.getvalue() == "now\n"


def _access_lines(log: Path) -> int:
    return sum(" router.access: POST /v1/chat/completions 200 " in line for line in log.read_text().splitlines())


@pytest.mark.parametrize("workers", [1, 2])
async def test_serve_writes_access_lines_soon_and_all_of_them_at_exit(
    fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    monkeypatch.setenv("AGENT_ROUTER_LOG_FLUSH_INTERVAL", "0.3")
    args = ("--workers", str(workers), "--store", f"sqlite:///{tmp_path}/s.db")
    async with serve(tmp_path, policy_text(fake.url), *args) as served:
        assert await _calls(served.base, 6, concurrency=2) == [200] * 6
        for _ in range(30):  # within the interval (a second at most)
            if _access_lines(served.log) == 6:
                break
            await asyncio.sleep(0.05)
        assert _access_lines(served.log) == 6
    monkeypatch.setenv("AGENT_ROUTER_LOG_FLUSH_INTERVAL", "3600")  # nothing written before the exit
    async with serve(tmp_path, policy_text(fake.url), *args) as served:
        assert await _calls(served.base, 6, concurrency=2) == [200] * 6
        await asyncio.sleep(0.3)
        assert _access_lines(served.log) == 0
        served.proc.send_signal(signal.SIGTERM)  # one process: uvicorn ends it with the signal, once stopped
        assert await asyncio.wait_for(served.proc.wait(), 30) in (0, -signal.SIGTERM)
        assert _access_lines(served.log) == 6
