"""One word per concept in the code (docs/architecture.md's glossary): what holds the Runtime is
called `runtime` — `router` is the package's name."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOLDERS = {"Runtime", "Parts"}


def _annotation(node: ast.expr | None) -> str:
    return ast.unparse(node) if node is not None else ""


def misnamed(source: str) -> list[str]:
    """Where a Runtime (or its Parts) is held under another name than runtime / parts."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.arg) and _annotation(node.annotation) in HOLDERS and node.arg == "router":
            found.append(f"line {node.lineno}: parameter router: {_annotation(node.annotation)}")
        elif isinstance(node, ast.AnnAssign) and _annotation(node.annotation) in HOLDERS:
            name = ast.unparse(node.target)
            if name.split(".")[-1] in {"router", "_router"}:
                found.append(f"line {node.lineno}: {name}: {_annotation(node.annotation)}")
        elif isinstance(node, ast.Attribute) and node.attr == "router" and ast.unparse(node.value).endswith("state"):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_what_holds_the_runtime_is_called_runtime() -> None:
    problems = {
        str(path.relative_to(ROOT)): found
        for folder in ("router", "tests", "bench")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (found := misnamed(path.read_text()))
    }
    assert problems == {}


def test_the_check_finds_each_misnaming() -> None:
    source = (
        "def f(router: Runtime) -> None:\n"
        "    self.router: Runtime = router\n"
        "    x = request.app.state.router\n"
    )
    assert len(misnamed(source)) == 3
    assert misnamed("def f(runtime: Runtime, router: str) -> None:\n    app.router.add_get('/', f)\n") == []
