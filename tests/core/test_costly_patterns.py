"""A schema regex found too costly is remembered (bounded LRU): a schema that differs only elsewhere
is refused on sight, without asking the regex engine again (it takes milliseconds to give up)."""

from __future__ import annotations

from typing import Any

import jsonschema_rs
import pytest

from router.core.checks import schemas
from router.core.checks.validate import SchemaTooCostly, Validator

COSTLY = r"[\w\W]{50000}"  # Python's `re` reads it; too large for the linear-time engine


def tool(parameters: dict[str, Any], name: str = "lookup") -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def with_pattern(pattern: str, description: str = "") -> dict[str, Any]:
    field = {"type": "string", "pattern": pattern, "description": description}
    return {"type": "object", "properties": {"q": field}}


@pytest.fixture
def compilations(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The schemas handed to the engine, from now on."""
    seen: list[Any] = []
    real = jsonschema_rs.validator_for

    def counted(schema: Any, **options: Any) -> Any:
        seen.append(schema)
        return real(schema, **options)

    monkeypatch.setattr(schemas.jsonschema_rs, "validator_for", counted)
    return seen


def test_a_known_costly_pattern_is_refused_without_compiling(compilations: list[Any]) -> None:
    validator = Validator()
    with pytest.raises(SchemaTooCostly):
        validator.admit([tool(with_pattern(COSTLY, "first"))])
    assert len(compilations) == 1 and validator.costly_patterns == 1
    for i in range(3):  # other schemas (not in the schema cache), the same pattern
        with pytest.raises(SchemaTooCostly):
            validator.admit([tool(with_pattern(COSTLY, f"variant {i}"))])
    assert len(compilations) == 1
    assert validator.compiled == 4 and validator.costly_hits == 3


def test_a_costly_pattern_properties_name_is_remembered_too(compilations: list[Any]) -> None:
    validator = Validator()
    for i in range(2):
        schema = {"type": "object", "description": str(i), "patternProperties": {COSTLY: {"type": "string"}}}
        with pytest.raises(SchemaTooCostly):
            validator.admit([tool(schema)])
    assert len(compilations) == 1 and validator.costly_hits == 1


def test_other_schemas_are_compiled_and_accepted_as_before(compilations: list[Any]) -> None:
    validator = Validator()
    with pytest.raises(SchemaTooCostly):
        validator.admit([tool(with_pattern(COSTLY))])
    validator.admit([tool(with_pattern("^[a-z]+$"))])
    # the costly text as data (a default value, an enum member) is not a regex: compiled, accepted
    validator.admit([tool({"type": "object", "properties": {"q": {"type": "string", "default": COSTLY}}})])
    validator.admit([tool({"type": "object", "properties": {"q": {"enum": [{"pattern": COSTLY}]}}})])
    assert len(compilations) == 4 and validator.costly_hits == 0


def test_the_costly_patterns_kept_are_bounded() -> None:
    validator = Validator(max_costly_patterns=2)
    costly = [rf"[\w\W]{{{50000 + i}}}" for i in range(3)]
    for pattern in costly:
        with pytest.raises(SchemaTooCostly):
            validator.admit([tool(with_pattern(pattern))])
    assert validator.costly_patterns == 2
    with pytest.raises(SchemaTooCostly):  # the oldest was evicted: found costly by compiling again
        validator.admit([tool(with_pattern(costly[0], "again"))])
    assert validator.costly_hits == 0 and validator.costly_patterns == 2
    with pytest.raises(SchemaTooCostly):  # the newest is still kept
        validator.admit([tool(with_pattern(costly[2], "again"))])
    assert validator.costly_hits == 1


def test_none_kept_when_the_bound_is_zero(compilations: list[Any]) -> None:
    validator = Validator(max_costly_patterns=0)
    for i in range(2):
        with pytest.raises(SchemaTooCostly):
            validator.admit([tool(with_pattern(COSTLY, str(i)))])
    assert len(compilations) == 2 and validator.costly_patterns == 0
