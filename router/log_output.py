"""Where the process's log lines go: stderr, written a batch at a time.

    configure(level, flush_interval, buffer_bytes)   the root logger's one handler (`serve` calls it)
    stop()                                           the lines waiting are written, the next ones at once

A line at info level or below (the access log's line per request, most of them) waits in a buffer
for at most `log_flush_interval` seconds, or until `log_buffer_bytes` are waiting, and the lines
waiting go out in one write: one system call per batch instead of one per request. A warning or an
error goes out at once, with the lines before it (their order kept): the writer thread is woken for
it, so the event loop never waits for the disk (a write to a file waits whenever the disk or the
file system does), and a flood of warnings a client can cause (calls whose checks every tier
fails) costs it no write each. A thread that fills the buffer to its bound waits until the writer
has taken the lines (so, while the disk stalls, it waits): the bound holds. Lines still waiting
are written when the process exits gracefully: `stop()` when the app's lifespan ends (uvicorn then ends a process
stopped by a signal with that signal, and no exit hook runs) and at exit (not `logging.shutdown`,
whose list of handlers uvicorn's logging configuration empties while the root logger keeps this
one); a killed process loses at most the last `log_flush_interval` seconds of info lines.
`log_flush_interval = 0` writes every line at once.

The line is the same either way: `%(asctime)s %(levelname)s %(name)s: %(message)s`, the time made
once per second (`Formatter.formatTime` calls strftime for each record) and a line with no traceback
put together directly rather than through the format's `%` over the record's attributes. Records
leave out what no line shows (thread, process and multiprocessing names: logging's own switches).
The standard library's MemoryHandler holds records, but writes and flushes each one alone when it
empties, and has no deadline.
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading
import time
from collections import deque
from typing import TextIO

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
STOP_WAIT = 2.0  # seconds `stop()` waits for a write in progress (a stalled disk) before writing the rest


class Formatter(logging.Formatter):
    """logging's line in `FORMAT` with its default `asctime` (`2026-01-02 03:04:05,678`), the
    strftime made once per second, the line without a traceback made in one step."""

    def __init__(self) -> None:
        super().__init__(FORMAT)
        self._second = -1
        self._stamp = ""

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info or record.exc_text or record.stack_info:
            return super().format(record)
        record.message = record.getMessage()
        record.asctime = self.formatTime(record)
        return f"{record.asctime} {record.levelname} {record.name}: {record.message}"

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        if second != self._second:
            self._stamp = time.strftime(self.default_time_format, self.converter(record.created))
            self._second = second
        return f"{self._stamp},{int(record.msecs):03d}"


class BufferedStream(logging.StreamHandler[TextIO]):
    """A StreamHandler whose lines wait up to `interval` seconds (below `flush_level`) or `size`
    characters, and go out together, written by a thread of its own (see the module's docstring)."""

    def __init__(self, stream: TextIO, interval: float, size: int, flush_level: int = logging.WARNING) -> None:
        super().__init__(stream)
        self.interval = interval
        self.size = size
        self.flush_level = flush_level
        self._lines: list[str] = []
        self._chars = 0
        self._waiting = threading.Event()  # lines are in the buffer
        self._now = threading.Event()  # one of them is a warning, or the buffer is full: write without waiting
        # private API: logging-handler-lock, see docs/architecture.md
        self._taken = threading.Condition(self.lock)  # the lines were taken to be written
        self._out: deque[str] = deque()  # batches taken, in order, to be written
        self._writing = threading.Lock()  # held by the one thread writing `_out` (never with the lock held)
        self._writer: threading.Thread | None = None
        self._stopped = False

    def emit(self, record: logging.LogRecord) -> None:  # called with the handler's lock held
        try:
            line = self.format(record) + self.terminator
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)
            return
        self._lines.append(line)
        self._chars += len(line)
        if self.interval <= 0 or self._stopped:
            self._out.append(self._take())
            self._drain()
            return
        if record.levelno >= self.flush_level or self._chars >= self.size:
            self._now.set()
        if not self._waiting.is_set():
            self._waiting.set()
            if self._writer is None or not self._writer.is_alive():  # (a forked child has no thread)
                self._writer = threading.Thread(target=self._write_soon, name="log writer", daemon=True)
                self._writer.start()
        while self._chars >= self.size and not self._stopped and self._writer and self._writer.is_alive():
            self._taken.wait(1.0)  # the bound: wait (the lock free meanwhile) until the writer takes them

    def flush(self) -> None:
        """Write the lines waiting, in one write, after any batch taken before them."""
        with self.lock:  # type: ignore[union-attr]  # Handler.__init__ made it
            self._out.append(self._take())
        self._drain()  # the lock free (unless the caller holds it): emitting never waits for the disk

    def stop(self) -> None:
        """Write the lines waiting, and every line at once from now on (at exit)."""
        self._stopped = True
        self._now.set()
        self._waiting.set()
        if self._writer is not None and self._writer is not threading.current_thread():
            self._writer.join(STOP_WAIT)
        self.flush()

    def _take(self) -> str:  # with the lock held
        self._waiting.clear()
        text = "".join(self._lines)
        self._lines.clear()
        self._chars = 0
        self._taken.notify_all()
        return text

    def _drain(self) -> None:
        """Write the batches taken, oldest first, one thread at a time."""
        with self._writing:
            while self._out:
                text = self._out.popleft()
                if not text:
                    continue
                try:
                    self.stream.write(text)
                    self.stream.flush()
                except Exception:
                    record = logging.makeLogRecord({"msg": "%d log characters not written", "args": (len(text),)})
                    self.handleError(record)

    def _write_soon(self) -> None:
        while not self._stopped:
            self._waiting.wait()
            self._now.wait(self.interval)
            self._now.clear()
            self.flush()


def configure(level: str, flush_interval: float, buffer_bytes: int) -> None:
    """The root logger at `level`, writing to stderr through a `BufferedStream` (replacing any handler
    it has one already, nothing changes: as `logging.basicConfig`)."""
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False  # no line shows them
    handler = BufferedStream(sys.stderr, flush_interval, buffer_bytes)
    handler.setFormatter(Formatter())
    logging.basicConfig(level=level.upper(), handlers=[handler])
    if handler in logging.getLogger().handlers:
        atexit.register(handler.stop)


def stop() -> None:
    """Write the lines waiting, and every line at once from now on: the process is ending."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, BufferedStream):
            handler.stop()
