"""Where the process's log lines go: stderr, written a batch at a time.

    configure(level, flush_interval, buffer_bytes)   the root logger's one handler (`serve` calls it)
    stop()                                           the lines waiting are written, the next ones at once

A line at info level or below (the access log's line per request, most of them) waits in a buffer
for at most `log_flush_interval` seconds, or until `log_buffer_bytes` are waiting, and the lines
waiting go out in one write: one system call per batch instead of one per request. A warning or an
error goes out at once, with the lines before it (their order kept). Lines still waiting are written
when the process exits gracefully: `stop()` when the app's lifespan ends (uvicorn then ends a process
stopped by a signal with that signal, and no exit hook runs) and at exit (not `logging.shutdown`,
whose list of handlers uvicorn's logging configuration empties while the root logger keeps this
one); a killed process loses at most the last `log_flush_interval` seconds of info lines.
`log_flush_interval = 0` writes every line at once.

The line is the same either way: `%(asctime)s %(levelname)s %(name)s: %(message)s`, the time made
once per second (`Formatter.formatTime` calls strftime for each record). The standard library's
MemoryHandler holds records, but writes and flushes each one alone when it empties, and has no deadline.
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading
import time
from typing import TextIO

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class Formatter(logging.Formatter):
    """logging's default `asctime` (`2026-01-02 03:04:05,678`), its strftime made once per second."""

    def __init__(self, fmt: str = FORMAT) -> None:
        super().__init__(fmt)
        self._second = -1
        self._stamp = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        if second != self._second:
            self._stamp = time.strftime(self.default_time_format, self.converter(record.created))
            self._second = second
        return f"{self._stamp},{int(record.msecs):03d}"


class BufferedStream(logging.StreamHandler[TextIO]):
    """A StreamHandler whose lines below `flush_level` wait up to `interval` seconds (a thread of its
    own writes them) or `size` characters, and go out together (see the module's docstring)."""

    def __init__(self, stream: TextIO, interval: float, size: int, flush_level: int = logging.WARNING) -> None:
        super().__init__(stream)
        self.interval = interval
        self.size = size
        self.flush_level = flush_level
        self._lines: list[str] = []
        self._chars = 0
        self._waiting = threading.Event()  # lines are in the buffer
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
        if record.levelno >= self.flush_level or self._chars >= self.size or self.interval <= 0 or self._stopped:
            self.flush()
        elif not self._waiting.is_set():
            self._waiting.set()
            if self._writer is None or not self._writer.is_alive():  # (a forked child has no thread)
                self._writer = threading.Thread(target=self._write_soon, name="log writer", daemon=True)
                self._writer.start()

    def flush(self) -> None:
        """Write the lines waiting, in one write."""
        with self.lock:  # type: ignore[union-attr]  # Handler.__init__ made it
            self._waiting.clear()
            if not self._lines:
                return
            text = "".join(self._lines)
            self._lines.clear()
            self._chars = 0
            try:
                self.stream.write(text)
                self.stream.flush()
            except Exception:
                self.handleError(logging.makeLogRecord({"msg": "%d log characters not written", "args": (len(text),)}))

    def stop(self) -> None:
        """Write the lines waiting, and every line at once from now on (at exit)."""
        with self.lock:  # type: ignore[union-attr]
            self._stopped = True
            self.flush()

    def _write_soon(self) -> None:
        while not self._stopped:
            self._waiting.wait()
            time.sleep(self.interval)
            self.flush()


def configure(level: str, flush_interval: float, buffer_bytes: int) -> None:
    """The root logger at `level`, writing to stderr through a `BufferedStream` (replacing any handler
    it has one already, nothing changes: as `logging.basicConfig`)."""
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
