"""The log's lines to stderr (router/log_output.py): written in batches, within the flush interval,
warnings at once, nothing lost when `serve` exits gracefully, the same line as logging's default."""

from __future__ import annotations

import asyncio
import io
import logging
import signal
import sys
import threading
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
    with_args = logging.LogRecord("router.feedback", logging.WARNING, __file__, 1, "%s took %.1fms", ("a", 2.25), None)
    assert ours.format(with_args) == theirs.format(with_args)
    assert ours.format(with_args).endswith("WARNING router.feedback: a took 2.2ms")
    try:
        raise ValueError("boom")
    except ValueError:
        failed = logging.LogRecord("router", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    assert ours.format(failed) == theirs.format(failed)
    assert "Traceback" in ours.format(failed) and "ValueError: boom" in ours.format(failed)


def test_info_lines_wait_and_a_warning_takes_them_along_in_order() -> None:
    out = io.StringIO()
    handler = BufferedStream(out, interval=60, size=1 << 20)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.handle(_record("one"))
    handler.handle(_record("two"))
    assert out.getvalue() == ""
    handler.handle(_record("three", logging.WARNING))
    _written_soon(out, "INFO one\nINFO two\nWARNING three\n")  # by the writer, not after the 60 s
    handler.handle(_record("four"))
    logging.shutdown([weakref.ref(handler)])  # as uvicorn's logging configuration does; the root keeps it
    assert out.getvalue().endswith("WARNING three\nINFO four\n")
    handler.handle(_record("five"))
    assert out.getvalue().endswith("WARNING three\nINFO four\n")
    handler.stop()  # at exit
    assert out.getvalue().endswith("WARNING three\nINFO four\nINFO five\n")
    handler.handle(_record("six"))  # once stopped, at once
    assert out.getvalue().endswith("INFO five\nINFO six\n")


def _written_soon(out: io.StringIO, text: str) -> None:
    deadline = time.monotonic() + 5
    while out.getvalue() != text and time.monotonic() < deadline:
        time.sleep(0.01)
    assert out.getvalue() == text


class StallingDisk(io.StringIO):
    """A stream whose writes wait until `go` is set, as a file's can while its file system commits."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()
        self.writing = threading.Event()  # a write has started (and waits for `go`)

    def write(self, text: str) -> int:
        self.writing.set()
        self.go.wait(10)
        return super().write(text)


def test_a_warning_never_makes_its_caller_wait_for_the_disk() -> None:
    out = StallingDisk()
    handler = BufferedStream(out, interval=60, size=1 << 20)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.handle(_record("one"))
    handler.handle(_record("warning 0", logging.WARNING))
    assert out.writing.wait(5)  # the writer thread took both lines and waits for the disk
    started = time.monotonic()
    for i in range(1, 50):  # a flood of warnings a client can cause, while the disk stalls
        handler.handle(_record(f"warning {i}", logging.WARNING))
    assert time.monotonic() - started < 1  # about a millisecond: nobody but the writer waits
    assert out.getvalue() == ""
    out.go.set()
    _written_soon(out, "INFO one\n" + "".join(f"WARNING warning {i}\n" for i in range(50)))
    handler.stop()


def test_a_full_buffer_waits_for_a_stalled_disk_and_loses_nothing() -> None:
    out = StallingDisk()
    handler = BufferedStream(out, interval=60, size=100)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.handle(_record("a" * 100))  # the bound: taken by the writer, whose write stalls
    assert out.writing.wait(5)
    handler.handle(_record("b" * 60))  # waits in the buffer (the writer is busy)
    flood = threading.Thread(target=lambda: [handler.handle(_record(f"c{i}" * 10)) for i in range(3)])
    flood.start()
    flood.join(0.5)
    assert flood.is_alive()  # held back: the buffer does not grow while the disk stalls
    out.go.set()
    flood.join(5)
    assert not flood.is_alive()
    handler.stop()
    assert out.getvalue() == "a" * 100 + "\n" + "b" * 60 + "\n" + "".join(f"{f'c{i}' * 10}\n" for i in range(3))


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
