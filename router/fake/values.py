"""Schema-valid tool arguments for the fake upstream, generated deterministically (the caller's
``random.Random``).

Generation supports the JSON-schema subset that tool definitions use in practice:
``type`` (string, number, integer, boolean, array, object, null, or a list of them), ``enum``,
``const``, ``required``, nested ``properties``, ``items``, ``minItems``/``maxItems``/``uniqueItems``,
``minimum``/``maximum`` (and their exclusive forms), ``multipleOf``, ``minLength``/``maxLength``,
common ``format``s, ``anyOf``/``oneOf`` (first branch), ``allOf`` (merged) and local ``$ref``
(``#/$defs/...``, ``#/definitions/...``). ``pattern`` is not honoured.
"""

from __future__ import annotations

import math
import random
from typing import Any

import orjson

VOCAB: tuple[str, ...] = (
    "the",
    "quick",
    "model",
    "answers",
    "a",
    "question",
    "about",
    "routing",
    "fast",
    "calls",
    "to",
    "small",
    "servers",
    "while",
    "full",
    "tiers",
    "handle",
    "hard",
    "cases",
    "with",
    "care",
    "and",
    "every",
    "token",
    "counts",
    "for",
    "agents",
    "that",
    "read",
    "files",
    "then",
    "write",
    "tests",
    "on",
    "time",
    "so",
    "latency",
    "stays",
    "low",
    "today",
)

_STRING_HINTS: dict[str, str] = {
    "location": "Paris",
    "city": "Paris",
    "country": "France",
    "name": "Ada",
    "query": "weather today",
    "path": "src/main.py",
    "file": "src/main.py",
    "url": "https://example.com",
    "email": "ada@example.com",
    "unit": "celsius",
    "language": "en",
    "date": "2024-05-17",
    "id": "item-1",
    "command": "ls -la",
}

_FORMATS: dict[str, str] = {
    "date": "2024-05-17",
    "date-time": "2024-05-17T12:00:00Z",
    "time": "12:00:00Z",
    "email": "ada@example.com",
    "uri": "https://example.com/a",
    "url": "https://example.com/a",
    "hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "uuid": "123e4567-e89b-12d3-a456-426614174000",
}

_MAX_DEPTH = 8


def resolve(schema: Any, root: dict[str, Any]) -> Any:
    ref = schema.get("$ref") if isinstance(schema, dict) else None
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    node: Any = root
    for part in ref[2:].split("/"):
        node = node.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def merge_all_of(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    merged = {k: v for k, v in schema.items() if k != "allOf"}
    for sub in schema["allOf"]:
        sub = resolve(sub, root)
        if not isinstance(sub, dict):
            continue
        for key, value in sub.items():
            if key == "properties" and isinstance(value, dict):
                merged["properties"] = {**merged.get("properties", {}), **value}
            elif key == "required" and isinstance(value, list):
                merged["required"] = [*merged.get("required", []), *value]
            else:
                merged.setdefault(key, value)
    return merged


def type_of(schema: dict[str, Any]) -> str:
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), "null")
    if isinstance(t, str):
        return t
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return "string"


def _number(schema: dict[str, Any], rng: random.Random, integer: bool) -> int | float:
    lo, hi = schema.get("minimum"), schema.get("maximum")
    xlo, xhi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    step = 1e-2 if not integer else 1
    low = float(lo) if isinstance(lo, int | float) else -math.inf
    high = float(hi) if isinstance(hi, int | float) else math.inf
    if isinstance(xlo, int | float) and not isinstance(xlo, bool):
        low = max(low, float(xlo) + step)
    if isinstance(xhi, int | float) and not isinstance(xhi, bool):
        high = min(high, float(xhi) - step)
    if low == -math.inf:
        low = 1.0 if high >= 1 else high - 100
    if high == math.inf:
        high = low + 100
    mult = schema.get("multipleOf")
    if isinstance(mult, int | float) and mult > 0:
        k_lo, k_hi = math.ceil(low / mult), math.floor(high / mult)
        k = rng.randint(k_lo, max(k_lo, k_hi))
        value = k * mult
        return int(value) if integer else value
    if integer:
        a, b = math.ceil(low), math.floor(high)
        return rng.randint(a, max(a, b))
    return round(rng.uniform(low, high), 2) if high - low > 0.02 else low


def _string(schema: dict[str, Any], rng: random.Random, key: str) -> str:
    fmt = schema.get("format")
    value = _FORMATS.get(fmt) if isinstance(fmt, str) else None
    if value is None:
        lowered = key.lower()
        value = next((v for k, v in _STRING_HINTS.items() if k in lowered), None) or rng.choice(VOCAB)
    min_len, max_len = schema.get("minLength"), schema.get("maxLength")
    if isinstance(min_len, int) and len(value) < min_len:
        value = value + "x" * (min_len - len(value))
    if isinstance(max_len, int) and len(value) > max_len:
        value = value[:max_len]
    return value


def gen_value(schema: Any, rng: random.Random, root: dict[str, Any], key: str = "", depth: int = 0) -> Any:
    """A value that validates against ``schema`` (for the supported subset)."""
    schema = resolve(schema, root)
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return None if depth > _MAX_DEPTH else "value"
    if "allOf" in schema and isinstance(schema["allOf"], list):
        schema = merge_all_of(schema, root)
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    for combo in ("anyOf", "oneOf"):
        branches = schema.get(combo)
        if isinstance(branches, list) and branches:
            return gen_value(branches[0], rng, root, key, depth + 1)
    kind = type_of(schema)
    if kind == "string":
        return _string(schema, rng, key)
    if kind in ("integer", "number"):
        return _number(schema, rng, kind == "integer")
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "array":
        return _array(schema, rng, root, key, depth)
    return gen_object(schema, rng, root, depth)


def _array(schema: dict[str, Any], rng: random.Random, root: dict[str, Any], key: str, depth: int) -> list[Any]:
    low, high = schema.get("minItems"), schema.get("maxItems")
    min_items: int = low if isinstance(low, int) else 1
    max_items: int = high if isinstance(high, int) else max(2, min_items)
    count = min(max(min_items, 1), max_items)
    items = schema.get("items", {})
    out: list[Any] = []
    seen: set[bytes] = set()
    unique = bool(schema.get("uniqueItems"))
    for _ in range(count * 10 if unique else count):
        value = gen_value(items, rng, root, key, depth + 1)
        if unique:
            blob = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
            if blob in seen and isinstance(value, str):
                value = f"{value}{len(out)}"
                blob = orjson.dumps(value)
            if blob in seen:
                continue
            seen.add(blob)
        out.append(value)
        if len(out) >= count:
            break
    return out


def gen_object(schema: dict[str, Any], rng: random.Random, root: dict[str, Any], depth: int = 0) -> dict[str, Any]:
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    required = schema.get("required")
    required = [r for r in required if isinstance(r, str)] if isinstance(required, list) else []
    out: dict[str, Any] = {}
    for name, sub in props.items():
        if name in required or rng.random() < 0.5:
            out[name] = gen_value(sub, rng, root, name, depth + 1)
    for name in required:  # required but not described in properties
        out.setdefault(name, "value")
    return out


def make_args(params: Any, rng: random.Random) -> dict[str, Any]:
    root = params if isinstance(params, dict) else {}
    return gen_object(merge_all_of(root, root) if isinstance(root.get("allOf"), list) else root, rng, root)
