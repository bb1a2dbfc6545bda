"""One word per concept in the code (docs/architecture.md's glossary): what holds the Runtime is
called `runtime` — `router` is the package's name."""

from __future__ import annotations

import ast
import re
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


# Words the code no longer uses for a concept, in its docstrings and the docs: (pattern, the word now)
STALE = {
    r"(?<!stack )\btrace\b(?! spans?\b)": "a call's record is its `outcome`; its state, its `attempts`",
    r"\(router,|\brouter: Runtime": "what holds the Runtime is `runtime`",
    r"\bEscalate\b": "an attempt's end is a step (`Retry`, router/flow/steps.py), never raised",
    r"\bSTRONGER_ONLY\b": "a kind that only moves a call on is a sign (`SIGNS`)",
}


def _prose() -> dict[str, str]:
    """Every docstring under router/ (modules, classes, functions) and every page of docs/ and the README."""
    texts = {}
    for path in sorted((ROOT / "router").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            documented = isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            if documented and (doc := ast.get_docstring(node, clean=False)):
                name = getattr(node, "name", "")
                texts[f"{path.relative_to(ROOT)}{':' + name if name else ''}"] = doc
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        texts[str(path.relative_to(ROOT))] = path.read_text()
    return texts


def stale(texts: dict[str, str]) -> list[str]:
    return [
        f"{where}: {match.group(0)!r} — {now}"
        for where, text in texts.items()
        for pattern, now in STALE.items()
        for match in re.finditer(pattern, text)
    ]


def test_docstrings_and_docs_use_the_words_the_code_uses() -> None:
    assert stale(_prose()) == []


def test_the_prose_check_finds_each_stale_word() -> None:
    found = stale({"a": "left_out(router, turn, trace)", "b": "raise Escalate here; STRONGER_ONLY kinds"})
    assert len(found) == 4
    assert stale({"c": "put prompts in trace spans; no stack trace; the outcome of the runtime"}) == []
