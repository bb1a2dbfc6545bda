"""router/commands/gguf.py: a GGUF header read as its format says — files written here byte by byte
to the published layout, and the real packed model."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from router.commands.gguf import KEEP_ARRAY, GGUFError, read_metadata
from router.commands.models import QWEN25_CODER_0_5B, model_file


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def _value(value: Any) -> bytes:
    if isinstance(value, bool):
        return struct.pack("<I?", 7, value)
    if isinstance(value, int):
        return struct.pack("<I", 4) + struct.pack("<I", value)
    if isinstance(value, float):
        return struct.pack("<If", 6, value)
    if isinstance(value, str):
        return struct.pack("<I", 8) + _string(value)
    if all(isinstance(v, str) for v in value):
        return struct.pack("<IIQ", 9, 8, len(value)) + b"".join(_string(v) for v in value)
    return struct.pack("<IIQ", 9, 5, len(value)) + b"".join(struct.pack("<i", v) for v in value)


def write_gguf(path: Path, meta: dict[str, Any], version: int = 3) -> Path:
    """A GGUF file's header (no tensors), as llama.cpp's gguf.md lays it out."""
    body = b"".join(_string(k) + _value(v) for k, v in meta.items())
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", version, 0, len(meta)) + body)
    return path


def test_every_kind_of_value_is_read(tmp_path: Path) -> None:
    meta = {
        "general.architecture": "llama",
        "llama.context_length": 131072,
        "llama.rope.freq_base": 0.5,
        "tokenizer.ggml.add_bos_token": True,
        "llama.attention.head_count_kv": [8] * 4,  # per layer
        "tokenizer.ggml.tokens": [f"t{i}" for i in range(1000)],  # walked, not kept
        "tokenizer.ggml.token_type": list(range(KEEP_ARRAY + 1)),
        "tokenizer.chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}{{ tools }}",
    }
    read = read_metadata(write_gguf(tmp_path / "m.gguf", meta))
    assert read == {
        **meta,
        "llama.attention.head_count_kv": [8, 8, 8, 8],
        "tokenizer.ggml.tokens": None,
        "tokenizer.ggml.token_type": None,
    }


def test_what_is_not_a_gguf_says_so_in_one_line(tmp_path: Path) -> None:
    cases = {
        "text.gguf": b"hello, not a model",
        "empty.gguf": b"",
        "truncated.gguf": write_gguf(tmp_path / "x", {"general.name": "m" * 100}).read_bytes()[:40],
        "version.gguf": b"GGUF" + struct.pack("<IQQ", 9, 0, 0),
        "keys.gguf": b"GGUF" + struct.pack("<IQQ", 3, 0, 10**9),
    }
    messages = {}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(GGUFError) as caught:
            read_metadata(tmp_path / name)
        messages[name] = str(caught.value)
    assert all("\n" not in m for m in messages.values())
    assert messages["text.gguf"].endswith("text.gguf is not a GGUF model file")
    assert messages["truncated.gguf"] == "the header ends early (a truncated file?)"
    assert "GGUF version 9" in messages["version.gguf"] and "1000000000 metadata keys" in messages["keys.gguf"]
    with pytest.raises(GGUFError, match="cannot read"):
        read_metadata(tmp_path)  # a directory


def test_the_packed_fast_model() -> None:
    path = model_file(QWEN25_CODER_0_5B)
    if not path.is_file():
        pytest.skip("the packed models are assembled by scripts/install")
    meta = read_metadata(path)
    assert meta["general.architecture"] == "qwen2" and meta["qwen2.context_length"] == 32768
    assert meta["qwen2.block_count"] == 24 and meta["qwen2.attention.head_count_kv"] == 2
    assert "<tool_call>" in meta["tokenizer.chat_template"]
