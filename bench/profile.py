"""py-spy recordings of a running proxy and a readable summary of them (used by `bench.overhead --profile`).

`record()` samples a process for a few seconds into a flame graph (SVG) or collapsed stacks
("raw": `frame;frame;frame count` per line); `summarize()` turns collapsed stacks into markdown:
the event-loop thread's time by package, the router's own functions (inclusive), and the top
functions by self time. py-spy runs without `--native`, so time in C code (socket writes, orjson,
the uvloop event loop) is charged to the Python frame that called it: uvicorn's `send` and
aiohttp's `_writelines` hold the socket writes, asyncio's `run` holds uvloop's own work.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

PACKAGES = (
    ("router/", "router (agent-router's own code)"),
    ("starlette/", "starlette"),
    ("uvicorn/", "uvicorn (incl. socket writes of responses)"),
    ("aiohttp/", "aiohttp client (incl. socket writes of upstream requests)"),
    ("tenacity/", "tenacity"),
    ("prometheus_client/", "prometheus_client"),
    ("anyio/", "anyio"),
    ("asyncio/", "asyncio + uvloop (event loop, C)"),
    ("jsonschema/", "jsonschema"),
    ("referencing/", "jsonschema"),
    ("multidict/", "aiohttp client (incl. socket writes of upstream requests)"),
    ("yarl/", "aiohttp client (incl. socket writes of upstream requests)"),
)


async def record(pyspy: Path, pid: int, seconds: int, fmt: str, out: Path) -> tuple[int, str]:
    """Run `py-spy record` on `pid` (non-blocking sampling, 250 Hz); returns (exit code, stderr)."""
    cmd = [
        str(pyspy), "record", "--pid", str(pid), "--duration", str(seconds), "--rate", "250",
        "--format", fmt, "--output", str(out), "--nonblocking",
    ]
    proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        _, err = await asyncio.wait_for(proc.communicate(), timeout=seconds + 60)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return -1, "py-spy did not finish in time"
    return proc.returncode or 0, err.decode(errors="replace")


def short(frame: str) -> str:
    """`func (/long/path/site-packages/pkg/mod.py:12)` → `func (pkg/mod.py)`."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "/work/main/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{name} ({path})" if path else name


def package(frame: str) -> str:
    for prefix, label in PACKAGES:
        if f"({prefix}" in frame:
            return label
    return "other"


def summarize(raw: Path, top: int = 15) -> list[str]:
    """Markdown tables from py-spy's collapsed stacks, main (event-loop) thread only."""
    self_fn: Counter[str] = Counter()
    self_pkg: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        frames = [short(f) for f in stack.split(";") if f]
        if not frames or frames[0].startswith(("_bootstrap (threading.py", "Thread._bootstrap (threading.py")):
            continue  # worker threads (watchfiles' watcher): blocked in native code, not request work
        count = int(n)
        total += count
        self_fn[frames[-1]] += count
        self_pkg[package(frames[-1])] += count
        for f in set(frames):
            if "(router/" in f and "(router/commands/cli.py)" not in f:
                incl[f] += count
    if not total:
        return ["(no samples)"]

    def pct(k: int) -> str:
        return f"{100 * k / total:.1f}"

    out = [f"{total} samples of the event-loop thread while it was busy.", "",
           "| self time by package | % |", "|---|---:|"]
    out += [f"| {p} | {pct(k)} |" for p, k in self_pkg.most_common()]
    out += ["", "| agent-router function (inclusive) | % |", "|---|---:|"]
    out += [f"| `{f}` | {pct(k)} |" for f, k in incl.most_common(top)]
    out += ["", "| function (self) | % |", "|---|---:|"]
    out += [f"| `{f}` | {pct(k)} |" for f, k in self_fn.most_common(top)]
    return out
