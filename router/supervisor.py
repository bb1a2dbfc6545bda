"""N worker processes on one port, each accepting from its own listening socket (SO_REUSEPORT).

Why not one socket shared by all workers (uvicorn's own `--workers`): an event loop accepts every
pending connection at once when its socket becomes readable, so a burst of new keep-alive
connections goes mostly to whichever worker woke first — measured here: 58 of 64 connections on
one of two workers, and no gain from the second. With SO_REUSEPORT each worker listens on its own
socket and the kernel spreads new connections over them by a hash of their addresses.

The supervisor binds the N sockets once and holds them until it exits; worker i inherits socket i,
and so does the worker that replaces it. A socket never closes while the port serves, so no
connection queued on it is lost (the kernel resets those when a listening socket closes): a
worker that stops only stops accepting, and its successor takes the same queue. At the end
(SIGTERM) each worker closes its socket gently (router/listening.py: the kernel takes no new
connection, those queued are served, then it closes).

The supervisor (the `serve` process itself) starts the workers and then only handles signals:

  SIGTERM, SIGINT   every worker stops accepting and finishes its calls in flight (uvicorn's
                    graceful shutdown), then the supervisor exits 0
  SIGHUP            rolling restart: each worker in turn is replaced by a new one once the new
                    one serves (it accepts from the old one's socket, which keeps its queue)
  a worker exits    it is replaced, one second later (its socket holds the connections that
                    arrive meanwhile); a worker that fails before it ever served
                    (bad TLS files, the app failing to start) stops the whole server instead

Each worker is a fresh interpreter (multiprocessing spawn) running uvicorn with `factory`, the app
built from the environment (router/serve.py). Their Prometheus values go to files in one directory
(prometheus_client's multiprocess mode), so /metrics sums every worker.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event
from typing import Any

from router.listening import listening_socket
from router.metrics import MULTIPROCESS_DIR

__all__ = ["Supervisor"]

log = logging.getLogger("router")

READY_TIMEOUT = 60.0  # s for a worker to import, build its app and run the app's start-up
STOP_GRACE = 15.0  # s a worker gets past its own graceful shutdown before it is killed
RESTART_DELAY = 1.0  # s before a worker that exited is replaced


def _worker(factory: str, options: dict[str, Any], sock: socket.socket, ready: Event, final: Event) -> None:
    """One worker process: uvicorn serving the app factory on `sock`, its slot's socket in the port's
    group (inherited from the supervisor); `final` is set when the whole server stops."""
    import uvicorn

    from router.connections import Server as RouterServer

    class Server(RouterServer):
        # private API: uvicorn-server, see docs/architecture.md
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started and not self.should_exit:
                ready.set()  # the app has started and the socket listens

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            self.handed_over = not final.is_set()  # replaced: the next worker accepts from this socket
            await super().shutdown(sockets)

    config = uvicorn.Config(factory, factory=True, **options)
    Server(config).run(sockets=[sock])


@dataclass
class _Process:
    process: BaseProcess
    ready: Event
    served: bool = False

    @property
    def pid(self) -> int | None:
        return self.process.pid


class Supervisor:
    def __init__(self, factory: str, workers: int, options: dict[str, Any]) -> None:
        self.factory = factory
        self.count = workers
        self.options = options
        self._ctx = multiprocessing.get_context("spawn")
        self._workers: list[_Process] = []
        self._signals: list[int] = []
        self._sockets: list[socket.socket] = []  # one per worker slot, held until the end
        self._final = self._ctx.Event()

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT; the exit code (0, or 1 when the workers could not start)."""
        host, port = str(self.options.get("host", "127.0.0.1")), int(self.options.get("port", 8000))
        with listening_socket(host, port, reuse_port=False):  # in use (say by another `serve`)? then stop here
            pass
        with _metrics_dir(), contextlib.ExitStack() as held:
            self._sockets = [held.enter_context(listening_socket(host, port)) for _ in range(self.count)]
            return self._serve(host, port)

    def _serve(self, host: str, port: int) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, lambda signum, _frame: self._signals.append(signum))
        self._workers = [self._start(slot) for slot in range(self.count)]
        if not all(self._wait_ready(w) for w in self._workers):
            log.error("the workers could not start; stopping")
            self._stop_all()
            return 1
        log.info("%d workers serving on %s:%d (supervisor pid %d)", self.count, host, port, os.getpid())
        while True:
            time.sleep(0.2)
            while self._signals:
                signum = self._signals.pop(0)
                if signum == signal.SIGHUP:
                    self._reload()
                else:
                    log.info("received %s: stopping every worker", signal.Signals(signum).name)
                    self._stop_all()
                    return 0
            if not self._replace_exited():
                self._stop_all()
                return 1

    # -- workers ------------------------------------------------------------------------------

    def _start(self, slot: int) -> _Process:
        ready = self._ctx.Event()
        args = (self.factory, self.options, self._sockets[slot], ready, self._final)
        process = self._ctx.Process(target=_worker, args=args, name="agent-router worker")
        process.start()
        return _Process(process, ready)

    def _wait_ready(self, worker: _Process) -> bool:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline and worker.process.is_alive():
            if worker.ready.wait(0.1):
                worker.served = True
                return True
            if any(s != signal.SIGHUP for s in self._signals):
                return False  # asked to stop meanwhile
        return False

    def _replace_exited(self) -> bool:
        """Replace workers that exited; False when one failed before it ever served."""
        for i, worker in enumerate(self._workers):
            if worker.process.is_alive():
                continue
            worker.process.join()
            if not worker.served:
                log.error("worker %s exited with %s before it served", worker.pid, worker.process.exitcode)
                return False
            log.warning("worker %s exited with %s; starting another", worker.pid, worker.process.exitcode)
            _gone(worker)
            time.sleep(RESTART_DELAY)
            self._workers[i] = self._start(i)
            if not self._wait_ready(self._workers[i]):
                return False
        return True

    def _reload(self) -> None:
        log.info("SIGHUP: replacing the %d workers one by one", len(self._workers))
        for i, old in enumerate(self._workers):
            new = self._start(i)
            if not self._wait_ready(new):
                log.error("a new worker did not start; keeping worker %s and the others, reload stopped", old.pid)
                self._stop([new])
                return
            self._workers[i] = new
            self._stop([old])
        log.info("reload done: workers %s", ", ".join(str(w.pid) for w in self._workers))

    def _stop(self, workers: list[_Process]) -> None:
        for worker in workers:
            if worker.process.is_alive():
                with contextlib.suppress(OSError):
                    worker.process.terminate()  # SIGTERM: uvicorn's graceful shutdown
        if self._final.is_set():
            for sock in self._sockets:
                sock.close()  # each closes for good with its worker's copy, once nothing is queued on it
        grace = float(self.options.get("timeout_graceful_shutdown") or 0) + STOP_GRACE
        deadline = time.monotonic() + grace
        for worker in workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
            if worker.process.is_alive():
                log.warning("worker %s did not stop within %.0f s; killing it", worker.pid, grace)
                worker.process.kill()
                worker.process.join(5)
            _gone(worker)

    def _stop_all(self) -> None:
        self._final.set()  # before the signal: the workers close their sockets gently
        self._stop(self._workers)


@contextlib.contextmanager
def _metrics_dir() -> Iterator[None]:
    """Where the workers' Prometheus values go (prometheus_client's multiprocess mode), so that a
    scrape of /metrics, whichever worker answers it, sums them all: a fresh directory, removed at
    the end — unless the operator named one in PROMETHEUS_MULTIPROC_DIR."""
    if os.environ.get(MULTIPROCESS_DIR):
        yield
        return
    path = tempfile.mkdtemp(prefix="agent-router-metrics-")
    os.environ[MULTIPROCESS_DIR] = path  # inherited by every worker started from here on
    try:
        yield
    finally:
        os.environ.pop(MULTIPROCESS_DIR, None)
        shutil.rmtree(path, ignore_errors=True)


def _gone(worker: _Process) -> None:
    """A worker exited: its live gauges leave the sums (its counters stay counted)."""
    from prometheus_client.multiprocess import mark_process_dead

    if worker.pid is not None and os.environ.get(MULTIPROCESS_DIR):
        mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]
