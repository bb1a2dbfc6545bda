"""A GGUF model file's metadata, read without loading the model: what `up --fast-model/--full-model`
needs to serve a model it did not pack (router/commands/tiers.py).

    read_metadata(path)   the header's key/value pairs (arrays skipped, except short ones), or GGUFError
    GGUFError             not a GGUF file, or a truncated or malformed header (a one-line reason)

The format (the GGUF specification of the ggml project, versions 2 and 3): the magic `GGUF`, a uint32 version, uint64
counts of tensors and of key/value pairs, then each pair: a string key (uint64 length + UTF-8), a
uint32 value type, the value. Little-endian only (big-endian files are rare and say so in the version).
The `gguf` package reads the same but parses every tensor and the 150k-entry vocabulary: 9 s for the
0.5B here, against well under a second for this reader, which skips what it does not keep.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import IO, Any

MAGIC = b"GGUF"
MAX_KEYS = 100_000  # a header claiming more is malformed
MAX_STRING = 64 * 1024 * 1024  # bytes: a chat template is kilobytes; a larger string is malformed
KEEP_ARRAY = 64  # arrays up to this many scalar items are kept (e.g. per-layer head counts)

_SCALARS = {  # GGUF value type → struct format
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d",
}  # fmt: skip
_STRING, _ARRAY = 8, 9


class GGUFError(ValueError):
    """The file is not a readable GGUF model (the message says why, in one line)."""


def _read(f: IO[bytes], n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise GGUFError("the header ends early (a truncated file?)")
    return data


def _unpack(f: IO[bytes], fmt: str) -> Any:
    return struct.unpack(fmt, _read(f, struct.calcsize(fmt)))[0]


def _string(f: IO[bytes], keep: bool = True) -> str:
    n = _unpack(f, "<Q")
    if n > MAX_STRING:
        raise GGUFError(f"a string of {n} bytes in the header")
    if not keep:
        f.seek(n, 1)
        return ""
    return _read(f, n).decode("utf-8", "replace")


def _value(f: IO[bytes], kind: int) -> Any:
    if kind in _SCALARS:
        return _unpack(f, _SCALARS[kind])
    if kind == _STRING:
        return _string(f)
    if kind != _ARRAY:
        raise GGUFError(f"unknown value type {kind} in the header")
    item, count = _unpack(f, "<I"), _unpack(f, "<Q")
    if item in _SCALARS:
        size = struct.calcsize(_SCALARS[item])
        if count <= KEEP_ARRAY:
            return [_unpack(f, _SCALARS[item]) for _ in range(count)]
        f.seek(size * count, 1)
        return None
    if item == _STRING:  # e.g. the vocabulary: walked, not kept
        for _ in range(count):
            _string(f, keep=False)
        return None
    raise GGUFError(f"an array of value type {item} in the header")


def read_metadata(path: Path) -> dict[str, Any]:
    """The metadata of the GGUF file at `path` (arrays longer than KEEP_ARRAY are None)."""
    try:
        with path.open("rb") as f:
            if f.read(4) != MAGIC:
                raise GGUFError(f"{path} is not a GGUF model file")
            version = _unpack(f, "<I")
            if version not in (2, 3):
                raise GGUFError(f"{path}: GGUF version {version} (this reader knows 2 and 3)")
            _unpack(f, "<Q")  # tensors
            keys = _unpack(f, "<Q")
            if keys > MAX_KEYS:
                raise GGUFError(f"{path}: {keys} metadata keys")
            out: dict[str, Any] = {}
            for _ in range(keys):
                key = _string(f)
                out[key] = _value(f, _unpack(f, "<I"))
            return out
    except OSError as exc:
        raise GGUFError(f"cannot read {path}: {exc.strerror or exc}") from None
