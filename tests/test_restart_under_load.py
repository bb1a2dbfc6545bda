"""`serve --workers 2` under a mixed load through two rolling restarts (SIGHUP) and a stop (SIGTERM):
no call is reset or fails, and once the port has closed new connections are refused.

The load is bench/restart.py's (`drive`, `Tally`): chat calls on new connections and on kept-alive
ones, SSE streams read to `[DONE]`, WebSocket sessions of several turns. A WebSocket closed 1012
before a turn began, or a turn refused at once with `shutting_down` by a draining worker, is the
server telling the client to send it again (the turn never ran): counted apart, not a failure.

Before the supervisor held the listening sockets (each worker bound its own and closed it when
replaced) and while shutdown closed idle kept-alive connections at once, this test failed in 2 of 2
runs (2 and 4 calls reset on new connections, 2 and 4 on kept ones); bench/restart.py's two reloads
reset calls in 8 of 8 runs (docs/operations.md#restarts-and-stops-under-load).
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

from bench.restart import Tally, drive, wait_logged
from tests.conftest import policy_text
from tests.test_serve import serve

LOAD = {"new": 3, "kept": 2, "stream": 2, "ws": 2}


async def test_reloads_and_a_stop_under_load_reset_nothing(fake, tmp_path: Path) -> None:
    async with serve(tmp_path, policy_text(fake.url), "--workers", "2", "--store", f"sqlite:///{tmp_path}/r.db",
                     "--log-level", "info") as served:  # fmt: skip
        tally = Tally()
        load = asyncio.create_task(drive(served.base, 40, tally, LOAD))  # ended below, 40 s at the most
        try:
            await asyncio.sleep(1.0)
            for n in (1, 2):
                served.proc.send_signal(signal.SIGHUP)
                assert await wait_logged(served.log, "reload done", n, 30), served.log.read_text()[-3000:]
                await asyncio.sleep(0.3)
            during_reloads = tally.counts["ok"]
            tally.stopped_at = time.monotonic()
            served.proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(served.proc.wait(), 30) == 0
            await asyncio.sleep(1.5)  # new connections meet the closed port (a SYN dropped while draining: 1 s)
        finally:
            tally.done = True
            await asyncio.wait_for(load, 20)
    failed = {k: v for k, v in tally.counts.items() if not k.startswith(("ok", "refused[", "ws_"))}
    assert failed == {}, (tally.line(), tally.samples)
    assert during_reloads > 100, tally.line()
    refused = sum(v for k, v in tally.counts.items() if k.startswith("refused["))
    assert refused > 0, tally.line()  # after the stop: refused (ECONNREFUSED), not reset
