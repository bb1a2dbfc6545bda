"""Hot reload: real files, a real watchfiles watcher, real log records."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from router.policy.loader import PolicyError
from router.policy.model import Policy
from router.policy.watch import PolicyHolder, watch

CANARY = "sk-watch-canary-0d1e2f"

BASE = """\
version: 1
models:
  fast: {{model: openai/small, api_base: "http://127.0.0.1:{port}/v1", api_key: "${{KEY}}"}}
  full: {{model: openai/big, api_base: http://127.0.0.1:2/v1}}
routes:
  - name: default
    use: {use}
"""


def policy_text(port: int = 1, use: str = "full") -> str:
    return BASE.format(port=port, use=use)


async def eventually(check: Callable[[], bool], path: Path, text: str, within: float = 15.0) -> None:
    """Write `text` to `path` until `check()` holds: the watcher may not be listening yet at first."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        await asyncio.to_thread(path.write_text, text)
        step_end = min(deadline, loop.time() + 1.5)
        while loop.time() < step_end:
            if check():
                return
            await asyncio.sleep(0.02)
    raise AssertionError("the watcher did not pick up the change")


@pytest.fixture
def env() -> dict[str, str]:
    return {"KEY": CANARY}


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(policy_text())
    (tmp_path / "other.yaml").write_text("not: watched\n")
    return path


@pytest.fixture
async def running(policy_file: Path, env: dict[str, str]) -> AsyncIterator[tuple[PolicyHolder, list[Policy]]]:
    holder = PolicyHolder.from_file(policy_file, env)
    seen: list[Policy] = []

    async def on_change(policy: Policy) -> None:
        seen.append(policy)

    stop = asyncio.Event()
    task = asyncio.create_task(watch(holder, policy_file, on_change, stop, debounce_ms=50))
    yield holder, seen
    stop.set()
    await asyncio.wait_for(task, 10)


async def test_edit_reloads_and_notifies(
    running: tuple[PolicyHolder, list[Policy]], policy_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    holder, seen = running
    caplog.set_level(logging.INFO, logger="router.policy")
    first = holder.current
    assert holder.version == 1 and holder.last_error is None

    await eventually(lambda: holder.version == 2, policy_file, policy_text(port=5))
    assert holder.current is not first
    assert holder.current.models["fast"].api_base == "http://127.0.0.1:5/v1"
    assert first.models["fast"].api_base == "http://127.0.0.1:1/v1"  # the old object is untouched
    assert seen == [holder.current]
    assert "policy reloaded (version 2)" in caplog.messages


async def test_broken_edit_keeps_policy_then_recovers(
    running: tuple[PolicyHolder, list[Policy]], policy_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    holder, seen = running
    caplog.set_level(logging.INFO, logger="router.policy")
    good = holder.current

    broken = policy_text(use="nowhere").replace("routes:", "colour: red\nroutes:")
    await eventually(lambda: holder.last_error is not None, policy_file, broken)
    assert holder.current is good and holder.version == 1 and seen == []
    assert holder.last_error is not None
    assert f"{policy_file}:5: colour: unknown key 'colour'" in holder.last_error
    assert f"{policy_file}:8: routes.0.use: unknown tier 'nowhere'" in holder.last_error
    warnings = [r for r in caplog.records if r.name == "router.policy" and r.levelno == logging.WARNING]
    assert warnings and "unknown tier 'nowhere'" in warnings[-1].getMessage()
    assert "keeping version 1" in warnings[-1].getMessage()

    await eventually(lambda: holder.version == 2, policy_file, policy_text(use="fast"))
    assert holder.last_error is None
    assert holder.current.routes[0].use == "fast"
    assert seen == [holder.current]
    assert CANARY not in caplog.text


async def test_editor_style_rename_is_followed(running: tuple[PolicyHolder, list[Policy]], policy_file: Path) -> None:
    holder, _ = running
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 15
    port = 7
    while holder.version == 1 and loop.time() < deadline:
        tmp = policy_file.with_name(".policy.yaml.swp")
        tmp.write_text(policy_text(port=port))
        os.replace(tmp, policy_file)  # how vim, VS Code and friends save
        for _ in range(75):
            if holder.version > 1:
                break
            await asyncio.sleep(0.02)
    assert holder.version == 2
    assert holder.current.models["fast"].api_base == f"http://127.0.0.1:{port}/v1"


def test_secret_env_values_never_logged(policy_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="router.policy")
    holder = PolicyHolder.from_file(policy_file, {"KEY": CANARY})
    # the canary from the environment lands in a field that then fails validation
    policy_file.write_text(
        policy_text().replace("http://127.0.0.1:2/v1", "${KEY}").replace("openai/big", "${KEY}")
        + "client_keys: ${KEY}\nstore: [${KEY}]\n"
    )
    assert holder.reload() is None
    assert holder.last_error is not None and CANARY not in holder.last_error
    assert caplog.records and CANARY not in caplog.text


def test_holder_reload_without_watcher(policy_file: Path, env: dict[str, str]) -> None:
    holder = PolicyHolder.from_file(policy_file, env)
    assert holder.reload() is None  # nothing changed
    policy_file.write_text("# a comment only\n" + policy_text())
    assert holder.reload() is None and holder.version == 1  # same policy: not a new version
    policy_file.write_text(policy_text(port=9))
    new = holder.reload()
    assert new is holder.current and holder.version == 2
    policy_file.unlink()
    assert holder.reload() is None
    assert holder.last_error is not None and "cannot read the policy file" in holder.last_error
    assert holder.current is new


def test_holder_from_bad_file_raises(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("version: 2\n")
    with pytest.raises(PolicyError):
        PolicyHolder.from_file(path)


async def test_on_change_failure_is_logged_and_watch_continues(
    policy_file: Path, env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="router.policy")
    holder = PolicyHolder.from_file(policy_file, env)
    calls: list[int] = []

    async def failing(policy: Policy) -> None:
        calls.append(holder.version)
        raise RuntimeError(f"pool rebuild failed for key {CANARY}")

    stop = asyncio.Event()
    task = asyncio.create_task(watch(holder, policy_file, failing, stop, debounce_ms=50))
    try:
        await eventually(lambda: holder.version == 2, policy_file, policy_text(port=3))
        await eventually(lambda: holder.version == 3, policy_file, policy_text(port=4))
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    assert calls == [2, 3]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2 and "RuntimeError: pool rebuild failed" in errors[0]
    assert CANARY not in caplog.text


async def test_change_before_watch_starts_is_applied(policy_file: Path, env: dict[str, str]) -> None:
    holder = PolicyHolder.from_file(policy_file, env)
    await asyncio.to_thread(policy_file.write_text, policy_text(port=6))
    stop = asyncio.Event()
    task = asyncio.create_task(watch(holder, policy_file, None, stop, debounce_ms=50))
    for _ in range(200):
        if holder.version == 2:
            break
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 10)
    assert holder.version == 2 and holder.current.models["fast"].api_base == "http://127.0.0.1:6/v1"


async def test_cancelling_the_watch_task(policy_file: Path, env: dict[str, str]) -> None:
    holder = PolicyHolder.from_file(policy_file, env)
    task = asyncio.create_task(watch(holder, policy_file))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)


def _kubelet_swap(directory: Path, text: str, n: int) -> None:
    """What the kubelet does to a ConfigMap volume on an update (its atomic writer): the files go to
    a new timestamped directory, `..data` is re-pointed to it by a rename, the old one is removed.
    `policy.yaml` itself is a symlink to `..data/policy.yaml` and never changes."""
    new = directory / f"..2026_01_01_00_00_0{n}.{n:09d}"
    new.mkdir()
    (new / "policy.yaml").write_text(text)
    old = os.readlink(directory / "..data") if (directory / "..data").is_symlink() else None
    tmp = directory / "..data_tmp"
    tmp.symlink_to(new.name)
    os.rename(tmp, directory / "..data")
    if old is not None:
        for f in (directory / old).iterdir():
            f.unlink()
        (directory / old).rmdir()


async def test_configmap_volume_update_reloads(tmp_path: Path, env: dict[str, str]) -> None:
    """A Kubernetes ConfigMap mounted as a volume (no subPath): the kubelet's symlink swap reloads."""
    mount = tmp_path / "config"
    mount.mkdir()
    _kubelet_swap(mount, policy_text(use="full"), 1)
    (mount / "policy.yaml").symlink_to("..data/policy.yaml")
    path = mount / "policy.yaml"
    holder = PolicyHolder.from_file(path, env)
    applied: asyncio.Queue[Policy] = asyncio.Queue()
    stop = asyncio.Event()
    task = asyncio.create_task(watch(holder, path, applied.put, stop, debounce_ms=50))
    try:
        for n, use in enumerate(("fast", "full", "fast"), start=2):
            await asyncio.sleep(0.3)  # the watcher is listening (first round) / settled
            await asyncio.to_thread(_kubelet_swap, mount, policy_text(use=use), n)
            policy = await asyncio.wait_for(applied.get(), 15)
            assert policy.routes[0].use == use and holder.current is policy
            assert holder.version == n
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
