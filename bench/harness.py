"""Subprocesses for benchmarks: free ports, start/health/stop, RSS from /proc, no orphans.

Every child runs in its own session (process group) with PR_SET_PDEATHSIG, so it is ended when
the benchmark exits normally (``Cluster.stop_all`` from a ``finally``), on Ctrl-C or SIGTERM
(turned into ``KeyboardInterrupt`` / ``SystemExit`` that reach the same ``finally``), and even
when the benchmark is killed outright (the kernel sends SIGTERM to the direct child).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import aiohttp

_PR_SET_PDEATHSIG = 1


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class StartError(RuntimeError):
    """A process exited or did not become healthy in time."""


@dataclass
class Proc:
    name: str
    cmd: Sequence[str]
    log_path: Path
    popen: subprocess.Popen[bytes]
    port: int

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def rss_mib(self, tree: bool = True) -> float:
        """Resident memory of the process and (with `tree`: a scan of /proc, tens of ms) all its
        descendants (MiB), from /proc."""
        return sum(_vm_rss_kib(pid) for pid in [self.pid, *(descendants(self.pid) if tree else ())]) / 1024

    def stop(self, grace: float = 5.0) -> None:
        if not self.alive():
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)  # the child leads its own process group
            try:
                self.popen.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue


@dataclass
class Cluster:
    """Owns every child process; `stop_all()` is idempotent and safe from any `finally`."""

    log_dir: Path
    procs: list[Proc] = field(default_factory=list)

    def start(self, name: str, cmd: Sequence[str], port: int, env: Mapping[str, str | None] | None = None) -> Proc:
        """Start `cmd` with the current environment plus `env` (a None value removes that variable)."""
        environ = dict(os.environ)
        for key, value in (env or {}).items():
            if value is None:
                environ.pop(key, None)
            else:
                environ[key] = value
        log_path = self.log_dir / f"{name}.log"
        log = log_path.open("wb")
        try:
            popen = subprocess.Popen(
                list(cmd),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=environ,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # single-threaded at this point
            )
        finally:
            log.close()
        proc = Proc(name, list(cmd), log_path, popen, port)
        self.procs.append(proc)
        return proc

    def stop(self, proc: Proc) -> None:
        proc.stop()
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self) -> None:
        while self.procs:
            self.procs.pop().stop()


async def wait_healthy(proc: Proc, url: str, limit: float) -> float:
    """Poll `url` until it answers 200; return the seconds it took. Raises StartError."""
    started = time.monotonic()
    deadline = started + limit
    probe = aiohttp.ClientTimeout(total=2.0)
    async with aiohttp.ClientSession(timeout=probe) as session:
        while True:
            if not proc.alive():
                raise StartError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log_tail()}")
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(url) as resp:
                    await resp.read()
                    if resp.status == 200:
                        return time.monotonic() - started
            if time.monotonic() > deadline:
                raise StartError(f"{proc.name} not healthy at {url} after {limit:.0f}s:\n{proc.log_tail()}")
            await asyncio.sleep(0.1)


def children_of() -> dict[int, list[int]]:
    """Every process's children (parent pid → child pids), from one scan of /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ..." — comm may contain spaces and parentheses
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def descendants(pid: int, children: dict[int, list[int]] | None = None) -> list[int]:
    """`pid`'s living descendants (`children`: a scan already made, `children_of()`)."""
    children = children_of() if children is None else children
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _vm_rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int, tree: bool = True, children: dict[int, list[int]] | None = None) -> float:
    """User + system CPU seconds of a process (and, with `tree`, of its living descendants;
    `children`: a scan of /proc already made, `children_of()`)."""
    total = 0
    for p in [pid, *(descendants(pid, children) if tree else [])]:
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / CLK_TCK


def busy_seconds() -> float:
    """CPU seconds all cores spent busy since boot (everything but idle and iowait), from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = values
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


class Watched(Protocol):
    """A process CpuMeter can watch: a `Proc`, or anything else with a name and a pid."""

    @property
    def name(self) -> str: ...

    @property
    def pid(self) -> int: ...


class CpuMeter:
    """CPU used during a `with` block: by each watched process tree, by this process (`own`), and by
    everything else on the machine (other processes than this one and the watched ones), in cores
    on average. The trees are the processes' when the meter is made (make it before a latency is
    measured: the scan of /proc holds this process for tens of ms; the readings in the block do not)."""

    def __init__(self, procs: Sequence[Watched]) -> None:
        self.procs = list(procs)
        self.used: dict[str, float] = {}  # process name → CPU seconds
        self.own = 0.0  # CPU seconds of this process
        self.wall = 0.0  # seconds the block took
        self.started = 0.0  # time.monotonic() when it began
        self.others = 0.0  # average cores used by unrelated processes
        self._t0 = 0.0
        self._busy0 = 0.0
        self._own0 = 0.0
        self._proc0: list[float] = []
        children = children_of()  # the trees, read now: a scan of /proc takes tens of ms, their stat files µs
        self._trees = [[p.pid, *descendants(p.pid, children)] for p in self.procs]

    @staticmethod
    def _cpu(tree: list[int]) -> float:
        return sum(cpu_seconds(pid, tree=False) for pid in tree)

    def __enter__(self) -> CpuMeter:
        self._t0 = self.started = time.monotonic()
        self._busy0 = busy_seconds()
        self._own0 = cpu_seconds(os.getpid(), tree=False)
        self._proc0 = [self._cpu(tree) for tree in self._trees]
        return self

    def __exit__(self, *exc: object) -> None:
        wall = max(time.monotonic() - self._t0, 1e-9)
        busy = busy_seconds() - self._busy0
        own = self.own = cpu_seconds(os.getpid(), tree=False) - self._own0
        self.wall = wall
        readings = zip(self.procs, self._trees, self._proc0, strict=True)
        self.used = {p.name: self._cpu(tree) - c0 for p, tree, c0 in readings}
        self.others = max(0.0, (busy - own - sum(self.used.values())) / wall)
