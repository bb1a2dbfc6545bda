"""The import graph of router/: no circle (type-only and function-level imports count), and every
arrow runs down the floors of docs/architecture.md. Read from the source with `ast`, nothing imported.

A module's floor is that of the longest prefix below naming it; a module no prefix names fails
the test (a new module is given its floor here).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "router"

FLOORS: dict[int, tuple[str, ...]] = {
    # offline tools and the fake upstream: they may use anything below
    7: ("router.__main__", "router.commands", "router.fake"),
    6: ("router.app", "router.connections", "router.listening", "router.serve",
        "router.supervisor"),  # the app, its server, its listening sockets and workers
    5: ("router.api", "router.responses", "router.messages", "router.console"),  # transports, translations, console
    4: ("router.flow",),  # one call's flow
    3: ("router.runtime",),  # what one running proxy owns
    2: ("router.core",),  # the parts the flow uses
    1: ("router.upstream", "router.store", "router.metrics", "router.sessions"),  # clients, state, counts, sessions
    0: ("router", "router.settings", "router.constants", "router.mistakes", "router.errors", "router.policy",
        "router.log_output"),  # the ground
}  # fmt: skip


def modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module → the router modules it imports (a name imported from a package that is a module of
    it counts as that module)."""

    def known(name: str) -> str:
        while name not in mods:
            name = name.rpartition(".")[0]
        return name

    arrows: dict[str, set[str]] = {m: set() for m in mods}
    for module, path in mods.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.split(".")[0] == "router"]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                if base.split(".")[0] == "router":
                    targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            arrows[module] |= {known(t) for t in targets} - {module}
    return arrows


def floor(module: str) -> int | None:
    best: tuple[int, int] | None = None
    for level, prefixes in FLOORS.items():
        for prefix in prefixes:
            within = module == prefix or (prefix != "router" and module.startswith(prefix + "."))
            if within and (best is None or len(prefix) > best[1]):
                best = (level, len(prefix))
    return best[0] if best else None


def circles(arrows: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(arrows):
        if root in index:
            continue
        work = [(root, iter(sorted(arrows[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(arrows[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_graph_is_read() -> None:
    arrows = imports(modules())
    assert len(arrows) > 50 and sum(map(len, arrows.values())) > 200
    assert "router.runtime" in arrows["router.flow.pipeline"]  # a type-only import counts


def test_no_import_circle() -> None:
    assert circles(imports(modules())) == []


def test_the_circle_finder_finds_one() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_module_has_a_floor() -> None:
    assert [m for m in modules() if floor(m) is None] == []


def test_arrows_run_down() -> None:
    arrows = imports(modules())
    up = [
        f"{m} (floor {floor(m)}) -> {t} (floor {floor(t)})"
        for m, targets in sorted(arrows.items())
        for t in sorted(targets)
        if (floor(t) or 0) > (floor(m) or 0)
    ]
    assert up == []


def test_core_is_two_rooms_and_the_checks_know_nothing_of_the_live_state() -> None:
    """router/core/ holds what an answer is checked against (checks/) and the live state one proxy
    keeps (live/), beside the parsed call; the checks import nothing of the live state."""
    mods = modules()
    rooms = {m.split(".")[2] for m in mods if m.startswith("router.core.")}
    assert rooms == {"call", "checks", "live"}
    arrows = imports(mods)
    crossing = [f"{m} -> {t}" for m in arrows if m.startswith("router.core.checks")
                for t in arrows[m] if t.startswith("router.core.live")]  # fmt: skip
    assert crossing == []


def test_a_module_only_the_flow_uses_is_the_flows() -> None:
    arrows = imports(modules())
    used_by = {m: {u for u, targets in arrows.items() if m in targets} for m in arrows}
    flow_only = [
        m for m, users in sorted(used_by.items())
        if m.startswith("router.core.") and users and all(u.startswith("router.flow") for u in users)
    ]  # fmt: skip
    assert flow_only == []


MODULE_MAX_LINES = 400  # a module a newcomer reads whole; a longer one is split along a seam


def test_every_module_is_short_enough_to_read_whole() -> None:
    long = {m: n for m, path in modules().items() if (n := len(path.read_text().splitlines())) > MODULE_MAX_LINES}
    assert long == {}, f"split along a seam: {long}"
