"""A store that cannot be used at start-up is a clear decision, never "ok" while counting nothing.

store_required (default)   `agent-router serve` exits 1 with the reason (no traceback): a corrupt
                           SQLite file, a file where its directory should be
store_required: false      it serves: /healthz says "degraded" (and why), GET /readyz is 503,
                           stats' "store" says healthy: false and the error
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.api.helpers import get
from tests.conftest import policy_text


def corrupt(tmp_path: Path) -> Path:
    db = tmp_path / "corrupt.db"
    db.write_bytes(b"this is not an SQLite database, " * 64)
    return db


def under_a_file(tmp_path: Path) -> Path:
    (tmp_path / "plain-file").write_text("x")
    return tmp_path / "plain-file" / "state.db"


@pytest.mark.parametrize("where", [corrupt, under_a_file], ids=["corrupt", "file-as-parent"])
def test_serve_exits_with_the_reason(tmp_path: Path, where) -> None:
    db = where(tmp_path)
    policy = tmp_path / "policy.yaml"
    policy.write_text(policy_text("http://127.0.0.1:9/v1").replace("store: memory://", f"store: sqlite:///{db}"))
    run = subprocess.run(
        [sys.executable, "-m", "router", "serve", "--policy", str(policy), "--port", "0", "--log-level", "error"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).parents[2]), "AGENT_ROUTER_WARM_UP": "false"},
    )
    assert run.returncode == 1, run.stderr
    assert "the sqlite store cannot be used" in run.stderr and "store_required: false" in run.stderr
    assert "Traceback" not in run.stderr + run.stdout


async def test_store_not_required_serves_degraded(tmp_path: Path, proxy_) -> None:
    db = corrupt(tmp_path)
    text = policy_text("http://127.0.0.1:9/v1").replace("store: memory://", f"store: sqlite:///{db}")
    proxy = await proxy_(text + "store_required: false\n", warm_up=False)
    health = await get(proxy.base + "/healthz")
    assert health.status == 200 and health.json()["status"] == "degraded"
    assert "sqlite store cannot be used" in health.json()["store"]
    ready = await get(proxy.base + "/readyz")
    assert ready.status == 503 and ready.json()["status"] == "degraded"
    store = (await get(proxy.base + "/v1/router/stats")).json()["store"]
    assert store["healthy"] is False and "file is not a database" in store["error"]


async def test_a_usable_store_is_ready(tmp_path: Path, proxy_) -> None:
    text = policy_text("http://127.0.0.1:9/v1").replace("store: memory://", f"store: sqlite:///{tmp_path}/ok.db")
    proxy = await proxy_(text, warm_up=False)
    assert (await get(proxy.base + "/readyz")).status == 200
    assert (await get(proxy.base + "/healthz")).json()["status"] == "ok"
