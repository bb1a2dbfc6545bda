"""router/mistakes.py owns the mistake kinds: every kind the router records or reports is one a policy
can name, and every other module names a kind through it, never by a string of its own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import ValidationError

from router import errors, mistakes
from router.core.checks.validate import KINDS
from router.fake.tools import BAD_KINDS
from router.policy.model import Escalation

ROOT = Path(__file__).resolve().parents[1] / "router"


def test_every_kind_is_one_a_policy_can_name() -> None:
    for kind in mistakes.MISTAKE_KINDS:
        assert Escalation(to="full", on=[kind]).on == [kind]
    with pytest.raises(ValidationError):
        Escalation(to="full", on=["not_a_kind"])  # type: ignore[list-item]


def test_the_named_groups_are_kinds() -> None:
    constants = {v for k, v in vars(mistakes).items() if k.isupper() and isinstance(v, str)}
    assert constants == set(mistakes.MISTAKE_KINDS)  # one constant per kind, no other
    assert set(KINDS) == set(mistakes.ANSWER_KINDS)
    answer_kinds = set(mistakes.ANSWER_KINDS)
    assert set(mistakes.REPAIRABLE) <= answer_kinds and set(BAD_KINDS) <= answer_kinds
    assert set(mistakes.ESCALATE_BY_DEFAULT) | mistakes.MOVES_ON | {mistakes.AGENT_REPORTED_ERROR} == set(
        mistakes.MISTAKE_KINDS
    )


def test_every_tier_error_carries_a_kind() -> None:
    def subclasses(cls: type) -> list[type]:
        return [cls, *(s for c in cls.__subclasses__() for s in subclasses(c))]

    for cls in subclasses(errors.UpstreamError):
        assert cls.mistake in mistakes.MISTAKE_KINDS, cls


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            found.add(id(first.value))
    return found


def test_no_module_spells_a_kind_itself() -> None:
    """A kind written as a string anywhere in router/ but router/mistakes.py is a second owner — but
    an API error's `code` or `type`, which may share a kind's name (a 504 `timeout`), is another word."""
    kinds = set(mistakes.MISTAKE_KINDS)
    spelled = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.name == "mistakes.py" and path.parent == ROOT:
            continue
        tree = ast.parse(path.read_text())
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in ("code", "type")
                                                    for t in node.targets):  # fmt: skip
                skip.add(id(node.value))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in kinds and id(node) not in skip:
                spelled.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {node.value!r}")
    assert spelled == []
