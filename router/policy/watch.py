"""Hot reload of the policy file.

`PolicyHolder` owns the current `Policy`; readers take `holder.current` once per call, so a reload
(which replaces the reference) never changes a policy under a call in flight. `watch()` follows the
file with `watchfiles`: a valid edit swaps the policy and awaits `on_change`; a broken edit keeps
the old policy, sets `last_error` and logs the file:line errors. The parent directory is watched
and filtered to the file's name, so editors that save by writing a temporary file and renaming it
over the original are followed too, and so is a Kubernetes ConfigMap volume: the kubelet updates it
by re-pointing the `..data` symlink (through which the file's own symlink reads) to a new directory,
so a change of `..data` reloads as well. (A ConfigMap mounted with `subPath` is never updated.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from watchfiles import Change, awatch

from router.constants import POLICY_DEBOUNCE_MS
from router.errors import redact
from router.policy.loader import PolicyError, load_policy
from router.policy.model import Policy

__all__ = ["PolicyHolder", "watch"]

log = logging.getLogger("router.policy")

OnChange = Callable[[Policy], Awaitable[None]]
KUBERNETES_SWAP = "..data"  # the symlink a ConfigMap volume's update re-points, in the file's directory


class PolicyHolder:
    """The current policy. `version` starts at 1 and grows by one on every successful reload."""

    def __init__(self, policy: Policy, path: Path | None = None, env: Mapping[str, str] | None = None) -> None:
        self.current = policy
        self.version = 1
        self.last_error: str | None = None
        self.path = path
        self.env = env
        self._text: str | None = _read(path) if path is not None else None

    @classmethod
    def from_file(cls, path: Path, env: Mapping[str, str] | None = None) -> PolicyHolder:
        """Load `path` (raises `PolicyError` when it is invalid) and hold it."""
        return cls(load_policy(path, env), path, env)

    def reload(self, path: Path | None = None) -> Policy | None:
        """Read the file again. Returns the new policy when it was swapped in, else None.

        Unchanged text, or text that yields the same policy, is not a new version. A broken file
        keeps the current policy and sets `last_error` (the file:line lines, newline-joined).
        """
        path = path or self.path
        if path is None:
            raise ValueError("PolicyHolder.reload needs a path")
        self.path = path
        text = _read(path)
        if text is not None and text == self._text and self.last_error is None:
            return None
        self._text = text
        try:
            policy = load_policy(path, self.env)
        except PolicyError as exc:
            self.last_error = str(exc)
            log.warning(
                "policy %s is invalid; keeping version %d:\n%s",
                path,
                self.version,
                redact(self.last_error, self.current.secrets()),
            )
            return None
        self.last_error = None
        if policy == self.current:
            log.info("policy %s is valid again; unchanged (version %d)", path, self.version)
            return None
        self.current = policy  # one reference swap: calls in flight keep the policy they took
        self.version += 1
        log.info("policy reloaded (version %d)", self.version)
        return policy


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


async def watch(
    holder: PolicyHolder,
    path: Path,
    on_change: OnChange | None = None,
    stop_event: asyncio.Event | None = None,
    *,
    debounce_ms: int = POLICY_DEBOUNCE_MS,
) -> None:
    """Reload `path` into `holder` whenever it changes, until `stop_event` is set or the task is cancelled.

    `on_change(new_policy)` is awaited after each swap (e.g. to rebuild the pools of changed tiers);
    its failure is logged and does not stop the watch.
    """
    path = Path(path)
    holder.path = path
    name = path.name

    def only_the_file(change: Change, changed: str) -> bool:
        return Path(changed).name in (name, KUBERNETES_SWAP)

    # The file may have changed between the initial load and now.
    await _apply(holder, path, on_change)
    async for _changes in awatch(
        path.parent,
        watch_filter=only_the_file,
        debounce=debounce_ms,
        step=50,
        stop_event=stop_event,
        recursive=False,
    ):
        await _apply(holder, path, on_change)


async def _apply(holder: PolicyHolder, path: Path, on_change: OnChange | None) -> None:
    try:
        new = holder.reload(path)
    except Exception as exc:  # a bug must not end hot reload; the current policy stays
        holder.last_error = redact(f"{type(exc).__name__}: {exc}", holder.current.secrets())
        log.error("policy %s could not be reloaded; keeping version %d: %s", path, holder.version, holder.last_error)
        return
    if new is None or on_change is None:
        return
    try:
        await on_change(new)
    except Exception as exc:  # the swap stands; the app reports why applying it failed
        reason = redact(f"{type(exc).__name__}: {exc}", new.secrets())
        log.error("policy version %d loaded, but applying it failed: %s", holder.version, reason)
