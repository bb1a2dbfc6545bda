"""The docs stay short and point at things that exist (issue 27, point 7).

    README.md                  at most 160 lines; the rest is in docs/
    paths                      every repository path named in README.md, docs/*.md and router/'s
                               docstrings and comments exists: `router/…`, `docs/…`, `tests/…`,
                               `bench/…`, `scripts/…`, `policies/…`, `evals/…`, `deploy/…`; a path
                               relative to router/ (`core/live/warming.py`) or to the naming module's
                               package, and a bare module name (`native.py`, which must still be a
                               module somewhere under router/)
    tests/…::name              the test function (or class) exists in that file
    Markdown links             a relative link's file exists, and its #anchor is a heading there

Read as text, nothing imported.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 160
TOP = ("router", "docs", "tests", "bench", "scripts", "policies", "evals", "deploy", "docker")
PACKAGES = tuple(p.name for p in (ROOT / "router").iterdir() if p.is_dir() and (p / "__init__.py").exists())
SUFFIXES = ("py", "md", "yaml", "yml", "sh", "jinja", "toml")

# a path-like word: dirs and a file name with one of SUFFIXES, or a dir ending in "/" (`bench/results/`),
# optionally `::test_name`; not part of a URL, a longer path or a dotted name
PATH = re.compile(
    r"(?<![\w./:@-])((?:[\w-]+/)+(?:[\w.-]+\.(?:" + "|".join(SUFFIXES) + r")|[\w-]*/?)|[\w-]+\.(?:py|md))"
    r"(::[\w\[\]-]+)?(?![\w/-])"
)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def sources() -> list[Path]:
    return sorted((ROOT / "router").rglob("*.py"))


@functools.cache
def module_names() -> frozenset[str]:
    return frozenset(p.name for p in sources())


def resolves(word: str, where: Path) -> bool:
    """`word` names an existing file or directory, read as the docs and docstrings write paths."""
    path = word.rstrip("/")
    first = path.split("/")[0]
    if first in TOP:
        return (ROOT / path).exists()
    if first in PACKAGES or first in ("..", "."):  # relative to router/, or (docs) to the document
        return (ROOT / "router" / path).exists() or (where.parent / path).exists()
    if "/" not in path:  # a bare file name: a document beside `where`, or a module under router/
        return (where.parent / path).exists() or (path.endswith(".py") and path in module_names())
    # relative to the naming module's package or one above it (router/core/x.py: `api/__init__.py`)
    return any((parent / path).exists() for parent in where.parents if ROOT in parent.parents or parent == ROOT)


def checked(word: str) -> bool:
    """Which words are paths of this repository: rooted at one of its top directories or router's
    packages, or a bare `name.py` / `name.md` (an example path such as `src/main.py` is not)."""
    first = word.split("/")[0]
    if first in TOP or first in PACKAGES:
        return True
    return "/" not in word and "." in word  # a bare file name (a bare directory, `anthropic/`, is a word)


def named_paths(path: Path) -> list[tuple[int, str, str]]:
    """(line, path, `::name` or "") of each path the file names."""
    found = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        for m in PATH.finditer(line):
            word = m.group(1)
            if not word.endswith("/") and "." not in word.rsplit("/", 1)[-1]:
                continue  # a plain word pair such as `and/or`, a route `/v1/models`
            if checked(word):
                found.append((n, word, (m.group(2) or "")[2:]))
    return found


def defines(test_file: Path, name: str) -> bool:
    name = name.split("[")[0]  # a parametrized test's id
    tree = ast.parse(test_file.read_text())
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name
        for node in ast.walk(tree)
    )


def anchors(markdown: Path) -> set[str]:
    """GitHub's anchors of a document's headings."""
    out = set()
    for line in markdown.read_text().splitlines():
        if m := re.match(r"#{1,6} (.+)", line):
            text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower().replace("`", ""))
            out.add(text.replace(" ", "-"))
    return out


def test_the_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def test_named_paths_exist() -> None:
    missing = []
    for path in documents() + sources():
        for n, word, test in named_paths(path):
            where = f"{path.relative_to(ROOT)}:{n}: {word}"
            if not resolves(word, path):
                missing.append(where)
            elif test and not defines(ROOT / word, test):
                missing.append(f"{where}::{test} (no such test)")
    assert missing == []


def test_markdown_links_resolve() -> None:
    broken = []
    for doc in documents():
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                    continue
                file, _, anchor = target.partition("#")
                linked = (doc.parent / file).resolve() if file else doc
                if not linked.exists():
                    broken.append(f"{doc.relative_to(ROOT)}:{n}: {target}")
                elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                    broken.append(f"{doc.relative_to(ROOT)}:{n}: {target} (no such heading)")
    assert broken == []


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    """A stale path, a missing test and a broken anchor are found (the checks are not vacuous)."""
    doc = tmp_path / "x.md"
    doc.write_text("see router/responses/native.py, core/nowhere.py, nowhere.py and tests/test_docs.py::nothing\n")
    words = [(w, t) for _, w, t in named_paths(doc)]
    assert words == [("router/responses/native.py", ""), ("core/nowhere.py", ""), ("nowhere.py", ""),
                     ("tests/test_docs.py", "nothing")]  # fmt: skip
    assert not any(resolves(w, ROOT / "router" / "responses" / "__init__.py") for w, _ in words[:3])
    assert resolves("tests/test_docs.py", doc) and not defines(ROOT / "tests/test_docs.py", "nothing")
    assert resolves("core/live/warming.py", ROOT / "docs" / "architecture.md")
    assert resolves("warming.py", ROOT / "router" / "constants.py") and resolves("bench/results/", doc)
    assert named_paths(_write(tmp_path, "an example: src/main.py, and/or /v1/models\n")) == []
    assert "works-with" in anchors(ROOT / "docs" / "clients.md")
    assert "what-the-agent-sees-guarantees" in anchors(ROOT / "docs" / "policy.md")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "y.md"
    path.write_text(text)
    return path
